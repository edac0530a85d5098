// A C++ API that makes the same IR as .tile source, through the same checks (parse/sema.h).
// Errors carry the C++ file:line:col of the builder call; the first one sticks and build()
// returns it, so code building a kernel needs no error handling until the end:
//
//   KernelBuilder kb("axpy");
//   Ex BN = kb.param("BN", 256);
//   Tile x = kb.tensor("x", kF32, {"N"}), y = kb.tensor("y", kF32, {"N"});
//   Ex a = kb.scalar("a", kF32);
//   kb.grid({cdiv(kb.size("N"), BN)}, {"bx"}, [&](std::vector<Ex> b) {
//     kb.parallel({"i"}, {BN}, [&](std::vector<Ex> i) {
//       Ex n = kb.let("n", b[0] * BN + i[0]);
//       kb.store(y, {n}, a * x(n) + y(n));
//     });
//   });
//   Expected<Kernel> k = kb.build();
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "tile/ir/ir.h"

namespace tessel::tile {

class KernelBuilder;
class Sema;

// A scalar expression under construction. Literals convert implicitly.
class Ex {
 public:
  Ex(int v) : e_(IntImm::make(v)) {}       // NOLINT: literals read naturally
  Ex(int64_t v) : e_(IntImm::make(v)) {}   // NOLINT
  Ex(double v) : e_(FloatImm::make(v)) {}  // NOLINT
  Ex(KernelBuilder* kb, Expr e) : kb_(kb), e_(std::move(e)) {}
  const Expr& expr() const { return e_; }
  KernelBuilder* builder() const { return kb_; }

 private:
  KernelBuilder* kb_ = nullptr;
  Expr e_;  // null after an error
};

Ex operator+(Ex a, Ex b);
Ex operator-(Ex a, Ex b);
Ex operator*(Ex a, Ex b);
Ex operator/(Ex a, Ex b);
Ex operator%(Ex a, Ex b);
Ex operator<(Ex a, Ex b);
Ex operator<=(Ex a, Ex b);
Ex operator>(Ex a, Ex b);
Ex operator>=(Ex a, Ex b);
Ex operator==(Ex a, Ex b);
Ex operator!=(Ex a, Ex b);
Ex operator&&(Ex a, Ex b);
Ex operator||(Ex a, Ex b);
Ex operator-(Ex a);
Ex cdiv(Ex a, Ex b);
Ex min(Ex a, Ex b);
Ex max(Ex a, Ex b);
Ex select(Ex c, Ex t, Ex f);

// A tensor argument or a shared/fragment tile. x(i, j) is an element; x.at(r, c) the tile of
// a global tensor starting at (r, c); x.T() the transposed view for copy and gemm.
class Tile {
 public:
  Tile() = default;
  Tile(KernelBuilder* kb, std::string name) : kb_(kb), name_(std::move(name)) {}
  template <typename... I>
  Ex operator()(I... indices) const {
    return element({Ex(indices)...});
  }
  Ex element(std::vector<Ex> indices) const;
  template <typename... I>
  Tile at(I... origin) const {
    Tile t = *this;
    t.origin_ = std::vector<Ex>{Ex(origin)...};
    return t;
  }
  Tile T() const {
    Tile t = *this;
    t.transposed_ = true;
    return t;
  }
  const std::string& name() const { return name_; }

 private:
  friend class KernelBuilder;
  KernelBuilder* kb_ = nullptr;
  std::string name_;
  std::optional<std::vector<Ex>> origin_;
  bool transposed_ = false;
};

// A tensor dimension: a size name ("M") or a number.
struct Dim {
  Dim(const char* n) : name(n) {}  // NOLINT
  Dim(int64_t v) : value(v) {}     // NOLINT
  Dim(int v) : value(v) {}         // NOLINT
  std::string name;
  int64_t value = 0;
};

class KernelBuilder {
 public:
  using Loc = std::source_location;
  explicit KernelBuilder(std::string name, Loc loc = Loc::current());
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  // ----- the kernel's signature
  Ex param(const std::string& name, int64_t default_value, Loc loc = Loc::current());
  DType dtype_param(const std::string& name, DType default_value, Loc loc = Loc::current());
  Tile tensor(const std::string& name, DType dtype, std::vector<Dim> dims,
              Loc loc = Loc::current());
  Ex scalar(const std::string& name, DType dtype, Loc loc = Loc::current());
  Ex size(const std::string& name, Loc loc = Loc::current());  // a size named by a tensor
  // Defaults for one kind of target: on("gpu", {{"BM", "64"}}) is `on gpu <BM = 64>`.
  void on(const std::string& target, std::vector<std::pair<std::string, std::string>> values,
          Loc loc = Loc::current());

  // ----- statements
  void grid(std::vector<Ex> extents, std::vector<std::string> names,
            const std::function<void(std::vector<Ex>)>& body, Loc loc = Loc::current());
  // `grid (...) as (...) threads (...) { ... }`: a GPU block of threads[0] x threads[1] threads.
  void grid(std::vector<Ex> extents, std::vector<std::string> names, std::vector<Ex> threads,
            const std::function<void(std::vector<Ex>)>& body, Loc loc = Loc::current());
  Tile shared(const std::string& name, DType dtype, std::vector<Ex> shape,
              Loc loc = Loc::current());
  Tile fragment(const std::string& name, DType dtype, std::vector<Ex> shape,
                Loc loc = Loc::current());
  void range(const std::string& var, Ex extent, const std::function<void(Ex)>& body,
             Loc loc = Loc::current());
  void pipelined(const std::string& var, Ex extent, Ex stages, const std::function<void(Ex)>& body,
                 Loc loc = Loc::current());
  void parallel(std::vector<std::string> vars, std::vector<Ex> extents,
                const std::function<void(std::vector<Ex>)>& body, Loc loc = Loc::current());
  void parallel(std::vector<std::string> vars, const Tile& over,
                const std::function<void(std::vector<Ex>)>& body, Loc loc = Loc::current());
  void if_then(Ex cond, const std::function<void()>& then_case,
               const std::function<void()>& else_case = nullptr, Loc loc = Loc::current());
  Ex let(const std::string& name, Ex value, Loc loc = Loc::current());
  void store(const Tile& t, std::vector<Ex> indices, Ex value, Loc loc = Loc::current());
  void copy(const Tile& src, const Tile& dst, Loc loc = Loc::current());
  void copy(const Tile& src, const Tile& dst, Ex pad, Loc loc = Loc::current());
  void gemm(const Tile& a, const Tile& b, const Tile& c, Loc loc = Loc::current());
  void clear(const Tile& t, Loc loc = Loc::current());
  void fill(const Tile& t, Ex value, Loc loc = Loc::current());
  void reduce(const Tile& src, const Tile& dst, int axis, const std::string& op,
              Loc loc = Loc::current());

  // ----- scalar functions: math (exp, gelu, ...) and casts (f32, T)
  Ex call(const std::string& fn, std::vector<Ex> args, Loc loc = Loc::current());
  Ex cast(DType to, Ex x, Loc loc = Loc::current());

  Expected<Kernel> build(Loc loc = Loc::current());

  // Used by Ex operators and Tile: the sema call, or a recorded error.
  Ex binary(BinaryOp op, Ex a, Ex b);
  Ex unary(UnaryOp op, Ex a);
  Ex select(Ex c, Ex t, Ex f);
  Ex element(const std::string& name, std::vector<Ex> indices);

 private:
  SourceLoc where(const Loc& loc);
  bool ok() const { return status_.ok(); }
  void fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  bool usable(const std::vector<Ex>& xs);
  std::vector<Expr> exprs(const std::vector<Ex>& xs);
  void add(Stmt s);
  Stmt run_body(const std::function<void()>& body, SourceLoc loc);
  std::optional<TileRef> tile_ref(const Tile& t, const SourceLoc& loc);
  Tile alloc(const std::string& name, Scope scope, DType dtype, std::vector<Ex> shape, Loc loc);

  std::unique_ptr<Sema> sema_;
  Status status_;
  std::vector<std::vector<Stmt>> blocks_;
  Stmt grid_;
  SourceLoc last_loc_;
};

}  // namespace tessel::tile
