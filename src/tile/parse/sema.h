// Semantic checks of the tile language, shared by the parser and the C++ builder so both make
// the same IR and report the same errors. Every function either returns a well-formed node or a
// Status "file:line:col: what is wrong"; it never asserts on user input.
//
// Sema tracks names (one namespace, nested scopes, no shadowing) and the statement context (in
// the grid? inside a parallel loop?). Types are checked here; tile extents are compared after
// specialisation, when they are numbers (passes/check_shapes.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

class Sema {
 public:
  // ----- kernel header
  Status begin_kernel(std::string name, SourceLoc loc);
  Status add_int_param(std::string name, int64_t default_value, SourceLoc loc);
  Status add_dtype_param(std::string name, DType default_value, SourceLoc loc);
  // A type name: a scalar type (f32) or a dtype parameter (T).
  Expected<DType> dtype(const std::string& name, const SourceLoc& loc);
  // A dimension of a tensor argument: a parameter, a size seen before, or a new size.
  Expected<Expr> tensor_dim(const std::string& name, const SourceLoc& loc);
  Status add_tensor_arg(std::string name, DType dtype, std::vector<Expr> dims, SourceLoc loc);
  Status add_scalar_arg(std::string name, DType dtype, SourceLoc loc);
  // `on gpu <BM = 64>`: every name a parameter, every value of the parameter's kind.
  Status add_target_defaults(TargetDefaults defaults, const std::vector<SourceLoc>& name_locs,
                             const std::vector<SourceLoc>& value_locs);

  // ----- names
  bool is_defined(const std::string& name) const;
  bool is_buffer(const std::string& name) const;
  Expected<Expr> lookup_value(const std::string& name, const SourceLoc& loc) const;
  Expected<Buffer> lookup_buffer(const std::string& name, const SourceLoc& loc) const;

  // ----- expressions
  Expr int_literal(int64_t v, SourceLoc loc);
  Expr float_literal(double v, SourceLoc loc);
  Expr bool_literal(bool v, SourceLoc loc);
  Expected<Expr> binary(BinaryOp op, Expr a, Expr b, SourceLoc loc);
  Expected<Expr> unary(UnaryOp op, Expr a, SourceLoc loc);
  // Built-in functions: math (exp, ...), min, max, cdiv, select, and casts (f32(x), T(x)).
  static bool is_function(const std::string& name);
  Expected<Expr> call(const std::string& name, std::vector<Expr> args, SourceLoc loc);
  Expected<Expr> load(const Buffer& buffer, std::vector<Expr> indices, SourceLoc loc);

  // ----- statements
  // Scoped statements come in begin/end pairs around their bodies.
  Expected<std::vector<Expr>> begin_grid(
      const std::vector<Expr>& extents, const std::vector<std::pair<std::string, SourceLoc>>& names,
      SourceLoc loc);
  Stmt end_grid(std::vector<Expr> extents, std::vector<Expr> vars, Stmt body, SourceLoc loc,
                std::vector<Expr> threads = {});
  // `threads (R, C)` or `threads (N)`: integers (check_shapes wants them constant and positive).
  Status check_threads(const std::vector<Expr>& threads, SourceLoc loc);
  Expected<Expr> begin_for(const std::string& name, const Expr& extent, const Expr& stages,
                           SourceLoc name_loc, SourceLoc loc);
  Stmt end_for(Expr var, Expr extent, Expr stages, Stmt body, SourceLoc loc);
  Expected<std::vector<Expr>> begin_parallel(
      const std::vector<std::pair<std::string, SourceLoc>>& names, const std::vector<Expr>& extents,
      SourceLoc loc);
  Stmt end_parallel(std::vector<Expr> vars, std::vector<Expr> extents, Stmt body, SourceLoc loc);
  Status begin_if(const Expr& cond, SourceLoc loc);
  void next_branch();
  Stmt end_if(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc);

  Expected<Stmt> alloc(std::string name, Scope scope, DType dtype, std::vector<Expr> shape,
                       SourceLoc name_loc, SourceLoc loc);
  Expected<Stmt> let(std::string name, Expr value, SourceLoc name_loc, SourceLoc loc);
  Expected<Stmt> store(const Buffer& buffer, std::vector<Expr> indices, Expr value, SourceLoc loc);
  // A tile operand: `As`, `As.T`, `A[r, c]`, `A.T[r, c]` (origin has_value for the last two).
  Expected<TileRef> tile_ref(const std::string& name, bool transposed,
                             std::optional<std::vector<Expr>> origin, SourceLoc loc);
  Expected<Stmt> copy(TileRef src, TileRef dst, Expr pad, SourceLoc loc);
  Expected<Stmt> gemm(TileRef a, TileRef b, TileRef c, SourceLoc loc);
  Expected<Stmt> fill(TileRef dst, Expr value, SourceLoc loc);
  Expected<Stmt> reduce(TileRef src, TileRef dst, int64_t axis, SourceLoc axis_loc,
                        const std::string& op, SourceLoc op_loc, SourceLoc loc);

  Expected<Kernel> finish(Stmt body, SourceLoc body_loc);

 private:
  struct Symbol {
    Expr value;     // a Var
    Buffer buffer;  // or a tile / tensor
    bool is_dtype_param = false;
    DType dtype_param;  // DType::param(name, its default), when is_dtype_param
    SourceLoc loc;
  };
  Status define(const std::string& name, Symbol symbol, const SourceLoc& loc);
  const Symbol* find(const std::string& name) const;
  Status check_tile_op_context(const char* op, const SourceLoc& loc) const;
  // Brings a and b to one type: literals take the other side's type; otherwise they must match.
  Status unify(Expr* a, Expr* b, const std::string& what, const SourceLoc& loc);
  // `value` converted for storing into an element of type `to` (implicit conversions only).
  Expected<Expr> convert_for_store(Expr value, const DType& to, const std::string& what,
                                   const SourceLoc& loc);

  Kernel kernel_;
  std::vector<std::map<std::string, Symbol>> scopes_{1};
  bool in_grid_ = false;
  bool had_grid_ = false;
  int loop_depth_ = 0;
  int parallel_depth_ = 0;
};

}  // namespace tessel::tile
