// The shared base of tessel's code generators: C-family source from lowered tile IR. What
// differs between targets is mostly spelling, kept as data in a CDialect (type names, literal
// suffixes, math functions, qualifiers, barrier, thread and block indices); what differs in
// structure (how a parallel loop is shared among threads, how a kernel is entered) is a few
// virtual functions that the CPU and GPU renderers override.
#pragma once

#include <map>
#include <set>
#include <string>

#include "tile/codegen/abi.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

struct CDialect {
  std::string target;  // "cpu", "opencl", "cuda": named in the generated file's header
  // Value types. f16 and bf16 values are computed as f32 (`f32` below) and stored as 16 bits.
  std::string bool_type, i8, u8, i16, i32, i64, f32, f64;
  std::string f16_storage, bf16_storage;
  // Functions converting 16-bit storage to a float value and back, and rounding a float to the
  // precision of a 16-bit type (for casts).
  std::string f16_load, bf16_load, f16_store, bf16_store, f16_round, bf16_round;
  std::string f32_literal_suffix = "f";
  std::string i64_literal_suffix;
  bool suffix_every_i64 = false;  // OpenCL: min(32, n) with n a long is ambiguous without 32L
  // Write `a && b` as `a & b` (and || as |) where b cannot trap (no division): the same value,
  // without the branch that keeps a C compiler from vectorising the loop around it.
  bool eager_logic = false;
  std::string infinity;  // an f32 expression for +inf
  std::string restrict_keyword;
  // Integer and floating-point min/max.
  std::string int_min, int_max, float_min, float_max;
  // Spelling of each math function, as a function name applied to the arguments.
  std::map<MathFn, std::string> math;
  // Identifiers the target reserves; a kernel name that collides gets a trailing '_'.
  std::set<std::string> reserved;
};

class CRenderer {
 public:
  explicit CRenderer(const CDialect& dialect) : d_(dialect) {}
  virtual ~CRenderer() = default;

  // The whole source file for one compiled kernel.
  virtual std::string render(const Kernel& kernel) = 0;

 protected:
  // ----- names and types
  std::string ident(const std::string& name) const;
  std::string value_type(const DType& t) const;    // the C type of a value (f16 -> float)
  std::string storage_type(const DType& t) const;  // the C type of a stored element
  std::string int_literal(int64_t v, const DType& type) const;
  std::string float_literal(double v, const DType& t) const;

  // ----- expressions
  virtual std::string expr(const Expr& e);
  std::string cast(const std::string& value, const DType& from, const DType& to);
  // The lvalue of an element: global tensors through their strides, tiles row-major.
  virtual std::string element(const Buffer& b, const std::vector<Expr>& indices);
  std::string global_offset(const Buffer& b, const std::vector<Expr>& indices);
  // Reading and writing elements, converting 16-bit storage.
  std::string load_value(const Buffer& b, const std::string& lvalue);
  std::string store_value(const Buffer& b, const std::string& value);

  // ----- statements
  void stmt(const Stmt& s);
  virtual void parallel(const Parallel* p) = 0;
  virtual void for_loop(const For* f);
  virtual void copy(const Copy* c);
  virtual void gemm(const Gemm* g);
  virtual void barrier(const Barrier* b);
  void store(const Store* s);
  static bool may_trap(const Expr& e);
  // i8, u8, i16: C computes them as int, so results are narrowed back to the IR's type.
  static bool is_narrow_int(const DType& t);
  void emit(const std::string& line);
  void open(const std::string& line);          // emit "line {" and indent
  void close(const std::string& suffix = "");  // dedent and emit "}"

  const CDialect& d_;
  const Kernel* kernel_ = nullptr;
  // Strides of global tensors that the code being rendered may take as constants (a run-time
  // check chose this version of a loop), so the compiler sees unit-stride and fixed-stride
  // accesses: per tensor, one entry per dimension, the stride or -1 where it stays a variable.
  std::map<std::string, std::vector<int64_t>> known_strides_;
  std::string out_;
  int indent_ = 0;
};

}  // namespace tessel::tile
