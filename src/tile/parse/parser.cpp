// Recursive-descent parser for .tile source (see parser.h). Name and type checks live in
// Sema, shared with the C++ builder; this file only knows the grammar.
#include "tile/parse/parser.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "tile/parse/lexer.h"
#include "tile/parse/sema.h"

namespace tessel::tile {

namespace {

using Name = std::pair<std::string, SourceLoc>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Expected<std::vector<Kernel>> parse_file() {
    std::vector<Kernel> kernels;
    while (peek().kind != TokenKind::kEnd) {
      if (is_keyword("tune")) {  // a parameter space: parse/tune_space.h reads it
        TESSEL_TRY(skip_tune_space());
        continue;
      }
      if (!is_keyword("kernel"))
        return error_at(peek().loc, "expected 'kernel', found {}", describe(peek()));
      sema_ = Sema();
      TESSEL_ASSIGN_OR_RETURN(Kernel k, parse_kernel());
      for (const Kernel& other : kernels)
        if (other.name == k.name)
          return error_at(k.loc, "kernel '{}' is already defined at {}", k.name,
                          other.loc.to_string());
      kernels.push_back(std::move(k));
    }
    if (kernels.empty()) return error_at(peek().loc, "no kernel in this file");
    return kernels;
  }

 private:
  // ----- tokens
  const Token& peek(int ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at(TokenKind kind) const { return peek().kind == kind; }
  bool is_keyword(std::string_view word, int ahead = 0) const {
    return peek(ahead).kind == TokenKind::kIdent && peek(ahead).text == word;
  }
  bool accept(TokenKind kind) {
    if (!at(kind)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kIdent:
        return fmt::format("'{}'", t.text);
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return fmt::format("'{}'", t.text);
      default:
        return token_kind_description(t.kind);
    }
  }
  Expected<Token> expect(TokenKind kind, const char* context) {
    if (!at(kind))
      return error_at(peek().loc, "expected {} {}, found {}", token_kind_description(kind), context,
                      describe(peek()));
    return next();
  }
  Status expect_keyword(const char* word, const char* context) {
    if (!is_keyword(word))
      return error_at(peek().loc, "expected '{}' {}, found {}", word, context, describe(peek()));
    next();
    return ok_status();
  }
  Expected<Name> expect_name(const char* context) {
    TESSEL_ASSIGN_OR_RETURN(Token t, expect(TokenKind::kIdent, context));
    return Name{t.text, t.loc};
  }

  // `tune KERNEL on TARGET { ... }`, up to its closing brace.
  Status skip_tune_space() {
    SourceLoc loc = next().loc;
    while (!at(TokenKind::kLBrace)) {
      if (at(TokenKind::kEnd)) return error_at(loc, "a 'tune' declaration without its {{ ... }}");
      next();
    }
    int depth = 0;
    do {
      if (at(TokenKind::kEnd)) return error_at(loc, "this space is never closed with '}}'");
      if (at(TokenKind::kLBrace)) ++depth;
      if (at(TokenKind::kRBrace)) --depth;
      next();
    } while (depth > 0);
    return ok_status();
  }

  // ----- kernel header
  Expected<Kernel> parse_kernel() {
    SourceLoc kernel_loc = next().loc;  // 'kernel'
    TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("after 'kernel'"));
    TESSEL_TRY(sema_.begin_kernel(name.first, name.second));
    if (accept(TokenKind::kLt)) {
      do {
        TESSEL_TRY(parse_param());
      } while (accept(TokenKind::kComma));
      TESSEL_TRY(expect(TokenKind::kGt, "to close the parameter list"));
    }
    TESSEL_TRY(expect(TokenKind::kLParen, "before the kernel's arguments"));
    if (!at(TokenKind::kRParen)) {
      do {
        TESSEL_TRY(parse_arg());
      } while (accept(TokenKind::kComma));
    }
    TESSEL_TRY(expect(TokenKind::kRParen, "to close the argument list"));
    while (is_keyword("on"))
      TESSEL_TRY(parse_target_defaults());
    TESSEL_ASSIGN_OR_RETURN(Token open, expect(TokenKind::kLBrace, "to open the kernel body"));
    if (!is_keyword("grid"))
      return error_at(peek().loc,
                      "a kernel body is one grid: grid (...) as (...) {{ ... }}; found {}",
                      describe(peek()));
    TESSEL_ASSIGN_OR_RETURN(Stmt grid, parse_stmt());
    if (!at(TokenKind::kRBrace))
      return error_at(peek().loc, "statements after the grid; everything belongs inside it");
    next();
    (void)kernel_loc;
    return sema_.finish(grid, open.loc);
  }

  Status parse_param() {
    TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("for a parameter"));
    if (accept(TokenKind::kColon)) {
      if (!is_keyword("dtype"))
        return error_at(peek().loc,
                        "parameters are integers (BM = 64) or dtypes (T: dtype = f32); found {}",
                        describe(peek()));
      next();
      TESSEL_TRY(expect(TokenKind::kAssign, "before the parameter's default"));
      TESSEL_ASSIGN_OR_RETURN(Name type, expect_name("for the dtype's default"));
      auto t = scalar_type_from_name(type.first);
      if (!t) return error_at(type.second, "unknown dtype '{}'", type.first);
      return sema_.add_dtype_param(name.first, DType(*t), name.second);
    }
    TESSEL_TRY(expect(TokenKind::kAssign,
                      "after the parameter name (parameters need a default: BM = 64)"));
    bool negative = accept(TokenKind::kMinus);
    if (!at(TokenKind::kInt))
      return error_at(peek().loc, "the default of parameter '{}' must be an integer, found {}",
                      name.first, describe(peek()));
    int64_t v = next().int_value;
    return sema_.add_int_param(name.first, negative ? -v : v, name.second);
  }

  // on gpu <BM = 64, T = bf16>
  Status parse_target_defaults() {
    next();  // 'on'
    TESSEL_ASSIGN_OR_RETURN(Name target, expect_name("after 'on' (cpu, gpu, opencl or cuda)"));
    TargetDefaults d;
    d.target = target.first;
    d.loc = target.second;
    std::vector<SourceLoc> names, values;
    TESSEL_TRY(expect(TokenKind::kLt, "before the target's parameter values"));
    do {
      TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("for a parameter"));
      TESSEL_TRY(expect(TokenKind::kAssign, "after the parameter name"));
      SourceLoc value_loc = peek().loc;
      std::string value;
      if (accept(TokenKind::kMinus)) value = "-";
      if (!at(TokenKind::kInt) && !at(TokenKind::kIdent))
        return error_at(peek().loc, "expected a value for '{}', found {}", name.first,
                        describe(peek()));
      value += next().text;
      d.values.emplace_back(name.first, value);
      names.push_back(name.second);
      values.push_back(value_loc);
    } while (accept(TokenKind::kComma));
    TESSEL_TRY(expect(TokenKind::kGt, "to close the target's parameter values"));
    return sema_.add_target_defaults(std::move(d), names, values);
  }

  Status parse_arg() {
    TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("for an argument"));
    TESSEL_TRY(expect(TokenKind::kColon, "after the argument name (A: f32[M, K] or alpha: f32)"));
    TESSEL_ASSIGN_OR_RETURN(Name type_name, expect_name("for the argument's dtype"));
    TESSEL_ASSIGN_OR_RETURN(DType type, sema_.dtype(type_name.first, type_name.second));
    if (!accept(TokenKind::kLBracket)) return sema_.add_scalar_arg(name.first, type, name.second);
    std::vector<Expr> dims;
    do {
      if (at(TokenKind::kInt)) {
        const Token& t = next();
        if (t.int_value <= 0)
          return error_at(t.loc, "tensor dimensions must be positive, got {}", t.int_value);
        dims.push_back(IntImm::make(t.int_value, kI64, t.loc));
      } else {
        TESSEL_ASSIGN_OR_RETURN(
            Name dim, expect_name("for a dimension (a size name such as M, or a number)"));
        TESSEL_ASSIGN_OR_RETURN(Expr d, sema_.tensor_dim(dim.first, dim.second));
        dims.push_back(d);
      }
    } while (accept(TokenKind::kComma));
    TESSEL_TRY(expect(TokenKind::kRBracket, "to close the tensor's shape"));
    return sema_.add_tensor_arg(name.first, type, std::move(dims), name.second);
  }

  // ----- statements
  Expected<Stmt> parse_block(const char* context) {
    TESSEL_ASSIGN_OR_RETURN(Token open, expect(TokenKind::kLBrace, context));
    std::vector<Stmt> stmts;
    while (!at(TokenKind::kRBrace)) {
      if (at(TokenKind::kEnd)) return error_at(open.loc, "this '{{' is never closed");
      TESSEL_ASSIGN_OR_RETURN(Stmt s, parse_stmt());
      stmts.push_back(std::move(s));
    }
    next();
    return Seq::make(std::move(stmts), open.loc);
  }

  Expected<Stmt> parse_stmt() {
    const Token& t = peek();
    Nest nest(&nesting_);
    TESSEL_TRY(check_nesting(t.loc));
    statement_operators_ = 0;
    if (t.kind != TokenKind::kIdent)
      return error_at(t.loc, "expected a statement, found {}", describe(t));
    if (t.text == "grid") return parse_grid();
    if (t.text == "for") return parse_for();
    if (t.text == "parallel") return parse_parallel();
    if (t.text == "if") return parse_if();
    if (peek(1).kind == TokenKind::kLParen) return parse_tile_op();
    if (peek(1).kind == TokenKind::kAssign) return parse_assign();
    if (peek(1).kind == TokenKind::kLBracket) return parse_element_store();
    if (peek(1).kind == TokenKind::kDot)
      return error_at(peek(1).loc, "'.T' only appears on the operands of copy and gemm");
    return error_at(peek(1).loc, "expected '=', '[' or '(' after '{}', found {}", t.text,
                    describe(peek(1)));
  }

  Expected<std::vector<Name>> parse_names(const char* context) {
    TESSEL_TRY(expect(TokenKind::kLParen, context));
    std::vector<Name> names;
    do {
      TESSEL_ASSIGN_OR_RETURN(Name n, expect_name(context));
      names.push_back(std::move(n));
    } while (accept(TokenKind::kComma));
    TESSEL_TRY(expect(TokenKind::kRParen, context));
    return names;
  }

  Expected<std::vector<Expr>> parse_expr_list(TokenKind close, const char* context) {
    std::vector<Expr> out;
    if (at(close))
      return error_at(peek().loc, "expected an expression {}, found {}", context, describe(peek()));
    do {
      TESSEL_ASSIGN_OR_RETURN(Expr e, parse_expr());
      out.push_back(std::move(e));
    } while (accept(TokenKind::kComma));
    TESSEL_TRY(expect(close, context));
    return out;
  }

  Expected<Stmt> parse_grid() {
    SourceLoc loc = next().loc;
    TESSEL_TRY(expect(TokenKind::kLParen, "after 'grid'"));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> extents,
                            parse_expr_list(TokenKind::kRParen, "in the grid's extents"));
    TESSEL_TRY(expect_keyword("as", "after the grid's extents (grid (...) as (bx, by))"));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Name> names, parse_names("for the grid's block indices"));
    std::vector<Expr> threads;
    if (is_keyword("threads")) {
      SourceLoc at = next().loc;
      TESSEL_TRY(expect(TokenKind::kLParen, "after 'threads'"));
      TESSEL_ASSIGN_OR_RETURN(threads,
                              parse_expr_list(TokenKind::kRParen, "in the block's threads"));
      TESSEL_TRY(sema_.check_threads(threads, at));
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> vars, sema_.begin_grid(extents, names, loc));
    TESSEL_ASSIGN_OR_RETURN(Stmt body, parse_block("to open the grid's body"));
    return sema_.end_grid(extents, vars, body, loc, threads);
  }

  Expected<Stmt> parse_for() {
    SourceLoc loc = next().loc;
    TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("for the loop variable"));
    TESSEL_TRY(expect_keyword("in", "after the loop variable"));
    bool pipelined = false;
    if (is_keyword("pipelined")) {
      pipelined = true;
    } else if (!is_keyword("range")) {
      return error_at(peek().loc, "expected range(n) or pipelined(n, stages=S), found {}",
                      describe(peek()));
    }
    next();
    TESSEL_TRY(expect(TokenKind::kLParen, "after range/pipelined"));
    TESSEL_ASSIGN_OR_RETURN(Expr extent, parse_expr());
    Expr stages;
    if (accept(TokenKind::kComma)) {
      if (!pipelined || !is_keyword("stages"))
        return error_at(
            peek().loc, "{}",
            pipelined ? "expected stages=S" : "range takes one argument, the trip count");
      next();
      TESSEL_TRY(expect(TokenKind::kAssign, "after 'stages'"));
      TESSEL_ASSIGN_OR_RETURN(stages, parse_expr());
    } else if (pipelined) {
      stages = sema_.int_literal(2, loc);
    }
    TESSEL_TRY(expect(TokenKind::kRParen, "to close the loop's range"));
    TESSEL_ASSIGN_OR_RETURN(Expr var,
                            sema_.begin_for(name.first, extent, stages, name.second, loc));
    TESSEL_ASSIGN_OR_RETURN(Stmt body, parse_block("to open the loop's body"));
    return sema_.end_for(var, extent, stages, body, loc);
  }

  Expected<Stmt> parse_parallel() {
    SourceLoc loc = next().loc;
    TESSEL_ASSIGN_OR_RETURN(std::vector<Name> names,
                            parse_names("for the parallel loop's indices"));
    TESSEL_TRY(expect_keyword("in", "after the parallel loop's indices"));
    std::vector<Expr> extents;
    if (accept(TokenKind::kLBracket)) {
      TESSEL_ASSIGN_OR_RETURN(
          extents, parse_expr_list(TokenKind::kRBracket, "in the parallel loop's extents"));
    } else {
      TESSEL_ASSIGN_OR_RETURN(Name over, expect_name("(a tile or [extents]) after 'in'"));
      TESSEL_ASSIGN_OR_RETURN(Buffer b, sema_.lookup_buffer(over.first, over.second));
      if (b->scope == Scope::kGlobal)
        return error_at(
            over.second,
            "parallel loops run over tiles or [extents]; '{}' is a global tensor of run-time size",
            over.first);
      extents = b->shape;
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> vars, sema_.begin_parallel(names, extents, loc));
    TESSEL_ASSIGN_OR_RETURN(Stmt body, parse_block("to open the parallel loop's body"));
    return sema_.end_parallel(vars, extents, body, loc);
  }

  Expected<Stmt> parse_if() {
    SourceLoc loc = next().loc;
    TESSEL_ASSIGN_OR_RETURN(Expr cond, parse_expr());
    TESSEL_TRY(sema_.begin_if(cond, loc));
    TESSEL_ASSIGN_OR_RETURN(Stmt then_case, parse_block("to open the 'if' body"));
    Stmt else_case;
    if (is_keyword("else")) {
      next();
      sema_.next_branch();
      if (is_keyword("if")) {
        Nest nest(&nesting_);  // an else-if chain nests without passing through parse_stmt
        TESSEL_TRY(check_nesting(peek().loc));
        TESSEL_ASSIGN_OR_RETURN(else_case, parse_if());
      } else {
        TESSEL_ASSIGN_OR_RETURN(else_case, parse_block("to open the 'else' body"));
      }
    }
    return sema_.end_if(cond, then_case, else_case, loc);
  }

  Expected<Stmt> parse_assign() {
    Name name{peek().text, peek().loc};
    SourceLoc loc = name.second;
    next();
    next();  // '='
    if (is_keyword("shared") || is_keyword("fragment")) {
      Scope scope = is_keyword("shared") ? Scope::kShared : Scope::kFragment;
      next();
      TESSEL_TRY(expect(TokenKind::kLt, "before the tile's dtype (shared<f32>[...])"));
      TESSEL_ASSIGN_OR_RETURN(Name type_name, expect_name("for the tile's dtype"));
      TESSEL_ASSIGN_OR_RETURN(DType type, sema_.dtype(type_name.first, type_name.second));
      TESSEL_TRY(expect(TokenKind::kGt, "after the tile's dtype"));
      TESSEL_TRY(expect(TokenKind::kLBracket, "before the tile's shape"));
      TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> shape,
                              parse_expr_list(TokenKind::kRBracket, "in the tile's shape"));
      return sema_.alloc(name.first, scope, type, std::move(shape), name.second, loc);
    }
    TESSEL_ASSIGN_OR_RETURN(Expr value, parse_expr());
    return sema_.let(name.first, value, name.second, loc);
  }

  Expected<Stmt> parse_element_store() {
    Name name{peek().text, peek().loc};
    next();
    TESSEL_ASSIGN_OR_RETURN(Buffer b, sema_.lookup_buffer(name.first, name.second));
    next();  // '['
    TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> idx,
                            parse_expr_list(TokenKind::kRBracket, "in the element's indices"));
    const Token& op = peek();
    std::optional<BinaryOp> compound;
    switch (op.kind) {
      case TokenKind::kAssign:
        break;
      case TokenKind::kPlusAssign:
        compound = BinaryOp::kAdd;
        break;
      case TokenKind::kMinusAssign:
        compound = BinaryOp::kSub;
        break;
      case TokenKind::kStarAssign:
        compound = BinaryOp::kMul;
        break;
      case TokenKind::kSlashAssign:
        compound = BinaryOp::kDiv;
        break;
      default:
        return error_at(op.loc, "expected '=' after {}[...], found {}", name.first, describe(op));
    }
    SourceLoc loc = next().loc;
    TESSEL_ASSIGN_OR_RETURN(Expr value, parse_expr());
    if (compound) {
      TESSEL_ASSIGN_OR_RETURN(Expr old, sema_.load(b, idx, name.second));
      TESSEL_ASSIGN_OR_RETURN(value, sema_.binary(*compound, old, value, loc));
    }
    return sema_.store(b, std::move(idx), value, name.second);
  }

  // A tile operand: As, As.T, A[r, c], A.T[r, c].
  Expected<TileRef> parse_tile_operand() {
    TESSEL_ASSIGN_OR_RETURN(Name name, expect_name("for a tile operand"));
    bool transposed = false;
    if (accept(TokenKind::kDot)) {
      if (!is_keyword("T"))
        return error_at(peek().loc, "expected 'T' after '.', found {}", describe(peek()));
      next();
      transposed = true;
    }
    std::optional<std::vector<Expr>> origin;
    if (accept(TokenKind::kLBracket)) {
      TESSEL_ASSIGN_OR_RETURN(origin,
                              parse_expr_list(TokenKind::kRBracket, "in the tile's origin"));
    }
    return sema_.tile_ref(name.first, transposed, std::move(origin), name.second);
  }

  // Skips one call argument: tokens up to the next ',' or ')' outside brackets.
  void skip_argument() {
    int depth = 0;
    while (!at(TokenKind::kEnd)) {
      TokenKind k = peek().kind;
      if (depth == 0 && (k == TokenKind::kComma || k == TokenKind::kRParen)) return;
      if (k == TokenKind::kLParen || k == TokenKind::kLBracket) ++depth;
      if (k == TokenKind::kRParen || k == TokenKind::kRBracket) --depth;
      next();
    }
  }

  // name=value keyword arguments after the positional ones.
  struct Keyword {
    Name name;
    Token value_token;
    Expr value;
  };

  Expected<Stmt> parse_tile_op() {
    Name op{peek().text, peek().loc};
    SourceLoc loc = op.second;
    next();
    next();  // '('
    struct OpShape {
      const char* name;
      int tiles;
      bool value;
      std::vector<std::string> keywords;
      const char* usage;
    };
    static const OpShape kOps[] = {
        {"copy", 2, false, {"pad"}, "copy(source, destination[, pad=value])"},
        {"gemm", 3, false, {}, "gemm(a, b, accumulator)"},
        {"clear", 1, false, {}, "clear(tile)"},
        {"fill", 1, true, {}, "fill(tile, value)"},
        {"reduce", 2, false, {"axis", "op"}, "reduce(source, destination, axis=1, op=sum)"},
    };
    const OpShape* shape = nullptr;
    for (const OpShape& s : kOps)
      if (op.first == s.name) shape = &s;
    if (!shape) {
      if (Sema::is_function(op.first))
        return error_at(loc,
                        "'{}(...)' computes a value; use it in an expression, e.g. v = {}(...)",
                        op.first, op.first);
      return error_at(loc, "unknown operation '{}' (expected copy, gemm, clear, fill or reduce)",
                      op.first);
    }
    std::vector<TileRef> tiles;
    Expr value;
    std::vector<Keyword> keywords;
    int positional = 0;
    if (!at(TokenKind::kRParen)) {
      do {
        if (at(TokenKind::kIdent) && peek(1).kind == TokenKind::kAssign) {
          Keyword kw{{peek().text, peek().loc}, {}, nullptr};
          next();
          next();
          kw.value_token = peek();
          if (kw.name.first == "op") {
            TESSEL_ASSIGN_OR_RETURN(Name v, expect_name("after op= (sum, max or min)"));
            (void)v;
          } else {
            TESSEL_ASSIGN_OR_RETURN(kw.value, parse_expr());
          }
          bool known = false;
          for (const std::string& k : shape->keywords)
            known |= k == kw.name.first;
          if (!known)
            return error_at(kw.name.second, "{} has no argument '{}'; usage: {}", op.first,
                            kw.name.first, shape->usage);
          keywords.push_back(std::move(kw));
          continue;
        }
        if (!keywords.empty())
          return error_at(peek().loc, "positional argument after a keyword argument; usage: {}",
                          shape->usage);
        if (positional < shape->tiles) {
          TESSEL_ASSIGN_OR_RETURN(TileRef t, parse_tile_operand());
          tiles.push_back(std::move(t));
        } else if (shape->value && positional == shape->tiles) {
          TESSEL_ASSIGN_OR_RETURN(value, parse_expr());
        } else {
          skip_argument();  // only counted, so the message can say how many there were
        }
        ++positional;
      } while (accept(TokenKind::kComma));
    }
    TESSEL_TRY(expect(TokenKind::kRParen, "to close the argument list"));
    int want = shape->tiles + (shape->value ? 1 : 0);
    if (positional != want)
      return error_at(loc, "{} takes {} argument{}, got {}; usage: {}", op.first, want,
                      want == 1 ? "" : "s", positional, shape->usage);
    auto keyword = [&](const char* k) -> const Keyword* {
      for (const Keyword& kw : keywords)
        if (kw.name.first == k) return &kw;
      return nullptr;
    };
    if (op.first == "copy") {
      const Keyword* pad = keyword("pad");
      return sema_.copy(tiles[0], tiles[1], pad ? pad->value : nullptr, loc);
    }
    if (op.first == "gemm") return sema_.gemm(tiles[0], tiles[1], tiles[2], loc);
    if (op.first == "clear") return sema_.fill(tiles[0], sema_.int_literal(0, loc), loc);
    if (op.first == "fill") return sema_.fill(tiles[0], value, loc);
    const Keyword* axis = keyword("axis");
    const Keyword* rop = keyword("op");
    if (!axis) return error_at(loc, "reduce needs axis=; usage: {}", shape->usage);
    auto axis_value = const_int(axis->value);
    if (!axis_value || !axis->value->type.is_int())
      return error_at(axis->value_token.loc, "axis must be an integer literal");
    std::string op_name = rop ? rop->value_token.text : "sum";
    SourceLoc op_loc = rop ? rop->value_token.loc : loc;
    return sema_.reduce(tiles[0], tiles[1], *axis_value, axis->value_token.loc, op_name, op_loc,
                        loc);
  }

  // ----- expressions, by precedence
  Expected<Expr> parse_expr() { return parse_binary(0); }

  static int binary_precedence(TokenKind k, BinaryOp* op) {
    switch (k) {
      case TokenKind::kOrOr:
        *op = BinaryOp::kOr;
        return 1;
      case TokenKind::kAndAnd:
        *op = BinaryOp::kAnd;
        return 2;
      case TokenKind::kEq:
        *op = BinaryOp::kEq;
        return 3;
      case TokenKind::kNe:
        *op = BinaryOp::kNe;
        return 3;
      case TokenKind::kLt:
        *op = BinaryOp::kLt;
        return 4;
      case TokenKind::kLe:
        *op = BinaryOp::kLe;
        return 4;
      case TokenKind::kGt:
        *op = BinaryOp::kGt;
        return 4;
      case TokenKind::kGe:
        *op = BinaryOp::kGe;
        return 4;
      case TokenKind::kPlus:
        *op = BinaryOp::kAdd;
        return 5;
      case TokenKind::kMinus:
        *op = BinaryOp::kSub;
        return 5;
      case TokenKind::kStar:
        *op = BinaryOp::kMul;
        return 6;
      case TokenKind::kSlash:
        *op = BinaryOp::kDiv;
        return 6;
      case TokenKind::kPercent:
        *op = BinaryOp::kMod;
        return 6;
      default:
        return -1;
    }
  }

  Expected<Expr> parse_binary(int min_precedence) {
    TESSEL_ASSIGN_OR_RETURN(Expr lhs, parse_unary());
    while (true) {
      BinaryOp op;
      int p = binary_precedence(peek().kind, &op);
      if (p < 0 || p <= min_precedence) return lhs;
      if (++statement_operators_ > kMaxOperatorsPerStatement)
        return error_at(peek().loc,
                        "more than {} operators in one statement; split it with named values",
                        kMaxOperatorsPerStatement);
      SourceLoc loc = next().loc;
      TESSEL_ASSIGN_OR_RETURN(Expr rhs, parse_binary(p));
      TESSEL_ASSIGN_OR_RETURN(lhs, sema_.binary(op, lhs, rhs, loc));
    }
  }

  Expected<Expr> parse_unary() {
    Nest nest(&nesting_);
    TESSEL_TRY(check_nesting(peek().loc));
    if (at(TokenKind::kMinus) || at(TokenKind::kBang)) {
      UnaryOp op = at(TokenKind::kMinus) ? UnaryOp::kNeg : UnaryOp::kNot;
      SourceLoc loc = next().loc;
      TESSEL_ASSIGN_OR_RETURN(Expr a, parse_unary());
      return sema_.unary(op, a, loc);
    }
    return parse_primary();
  }

  Expected<Expr> parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kInt:
        next();
        return sema_.int_literal(t.int_value, t.loc);
      case TokenKind::kFloat:
        next();
        return sema_.float_literal(t.float_value, t.loc);
      case TokenKind::kLParen: {
        next();
        TESSEL_ASSIGN_OR_RETURN(Expr e, parse_expr());
        TESSEL_TRY(expect(TokenKind::kRParen, "to close the parenthesis"));
        return e;
      }
      case TokenKind::kIdent:
        break;
      default:
        return error_at(t.loc, "expected an expression, found {}", describe(t));
    }
    Name name{t.text, t.loc};
    next();
    if (name.first == "true" || name.first == "false")
      return sema_.bool_literal(name.first == "true", name.second);
    if (name.first == "inf")
      return sema_.float_literal(std::numeric_limits<double>::infinity(), name.second);
    if (accept(TokenKind::kLParen)) {
      std::vector<Expr> args;
      if (!at(TokenKind::kRParen)) {
        do {
          TESSEL_ASSIGN_OR_RETURN(Expr a, parse_expr());
          args.push_back(std::move(a));
        } while (accept(TokenKind::kComma));
      }
      TESSEL_TRY(expect(TokenKind::kRParen, "to close the call"));
      return sema_.call(name.first, std::move(args), name.second);
    }
    if (accept(TokenKind::kLBracket)) {
      TESSEL_ASSIGN_OR_RETURN(Buffer b, sema_.lookup_buffer(name.first, name.second));
      TESSEL_ASSIGN_OR_RETURN(std::vector<Expr> idx,
                              parse_expr_list(TokenKind::kRBracket, "in the element's indices"));
      return sema_.load(b, std::move(idx), name.second);
    }
    if (at(TokenKind::kDot))
      return error_at(peek().loc, "'.T' only appears on the operands of copy and gemm");
    return sema_.lookup_value(name.first, name.second);
  }

  // Every later pass walks the IR recursively, so a hostile file (10,000 nested parentheses or
  // ifs, a sum of 20,000 terms) would overflow the stack there: nesting and the operators of one
  // statement are bounded here, with the location of the first construct past the limit.
  static constexpr int kMaxNesting = 100;
  static constexpr int kMaxOperatorsPerStatement = 1000;

  // One level of nesting for as long as it lives.
  class Nest {
   public:
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    int* depth_;
  };
  Status check_nesting(const SourceLoc& loc) const {
    if (nesting_ > kMaxNesting)
      return error_at(loc, "nested more than {} levels deep; split the expression or the block",
                      kMaxNesting);
    return ok_status();
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  Sema sema_;
  int nesting_ = 0;
  int statement_operators_ = 0;
};

}  // namespace

Expected<std::vector<Kernel>> parse_tile(std::string_view source, const std::string& file) {
  auto name = std::make_shared<const std::string>(file);
  TESSEL_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source, name));
  Parser parser(std::move(tokens));
  return parser.parse_file();
}

Expected<Kernel> parse_kernel(std::string_view source, const std::string& file,
                              const std::string& name) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Kernel> kernels, parse_tile(source, file));
  if (name.empty()) {
    if (kernels.size() == 1) return kernels[0];
    std::string names;
    for (const Kernel& k : kernels)
      names += (names.empty() ? "" : ", ") + k.name;
    return invalid_argument("{} defines {} kernels ({}); name the one you mean", file,
                            kernels.size(), names);
  }
  for (const Kernel& k : kernels)
    if (k.name == name) return k;
  return not_found("{} has no kernel '{}'", file, name);
}

Expected<std::vector<Kernel>> parse_tile_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_error("open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_tile(ss.str(), path);
}

}  // namespace tessel::tile
