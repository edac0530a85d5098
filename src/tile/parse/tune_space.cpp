// Parser and evaluator of `tune KERNEL on TARGET { ... }` blocks (see tune_space.h).
#include "tile/parse/tune_space.h"

#include <algorithm>
#include <optional>
#include <set>

#include "tile/parse/lexer.h"
#include "tile/parse/parser.h"

namespace tessel::tile {

namespace {

const char* binary_spelling(TokenKind k, int* precedence) {
  switch (k) {
    case TokenKind::kOrOr:
      *precedence = 1;
      return "||";
    case TokenKind::kAndAnd:
      *precedence = 2;
      return "&&";
    case TokenKind::kEq:
      *precedence = 3;
      return "==";
    case TokenKind::kNe:
      *precedence = 3;
      return "!=";
    case TokenKind::kLt:
      *precedence = 4;
      return "<";
    case TokenKind::kLe:
      *precedence = 4;
      return "<=";
    case TokenKind::kGt:
      *precedence = 4;
      return ">";
    case TokenKind::kGe:
      *precedence = 4;
      return ">=";
    case TokenKind::kPlus:
      *precedence = 5;
      return "+";
    case TokenKind::kMinus:
      *precedence = 5;
      return "-";
    case TokenKind::kStar:
      *precedence = 6;
      return "*";
    case TokenKind::kSlash:
      *precedence = 6;
      return "/";
    case TokenKind::kPercent:
      *precedence = 6;
      return "%";
    default:
      *precedence = -1;
      return "";
  }
}

class SpaceParser {
 public:
  SpaceParser(std::vector<Token> tokens, std::map<std::string, const Kernel*> kernels)
      : tokens_(std::move(tokens)), kernels_(std::move(kernels)) {}

  Expected<std::vector<TuneSpace>> parse() {
    std::vector<TuneSpace> spaces;
    int depth = 0;
    while (peek().kind != TokenKind::kEnd) {
      if (depth == 0 && is_keyword("tune") && peek(1).kind == TokenKind::kIdent) {
        TESSEL_ASSIGN_OR_RETURN(TuneSpace s, parse_space());
        for (const TuneSpace& other : spaces)
          if (other.kernel == s.kernel && other.target == s.target)
            return error_at(s.loc, "a second space for '{}' on {} (the first is at {})", s.kernel,
                            s.target, other.loc.to_string());
        spaces.push_back(std::move(s));
        continue;
      }
      if (at(TokenKind::kLBrace)) ++depth;
      if (at(TokenKind::kRBrace)) --depth;
      next();
    }
    return spaces;
  }

 private:
  const Token& peek(int ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at(TokenKind kind) const { return peek().kind == kind; }
  bool is_keyword(std::string_view word) const {
    return peek().kind == TokenKind::kIdent && peek().text == word;
  }
  static std::string describe(const Token& t) {
    if (t.kind == TokenKind::kIdent || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat)
      return fmt::format("'{}'", t.text);
    return token_kind_description(t.kind);
  }
  Status expect(TokenKind kind, const char* context) {
    if (!at(kind))
      return error_at(peek().loc, "expected {} {}, found {}", token_kind_description(kind), context,
                      describe(peek()));
    next();
    return ok_status();
  }

  Expected<TuneSpace> parse_space() {
    TuneSpace s;
    s.loc = next().loc;  // 'tune'
    const Token& name = next();
    s.kernel = name.text;
    auto k = kernels_.find(s.kernel);
    if (k == kernels_.end())
      return error_at(name.loc, "'{}' is not a kernel of this file", s.kernel);
    kernel_ = k->second;
    if (!is_keyword("on"))
      return error_at(peek().loc, "expected 'on' and a target after 'tune {}', found {}", s.kernel,
                      describe(peek()));
    next();
    if (!at(TokenKind::kIdent))
      return error_at(peek().loc, "expected a target (cpu, gpu, opencl or cuda), found {}",
                      describe(peek()));
    const Token& target = next();
    static const std::set<std::string> targets{"cpu", "gpu", "opencl", "cuda"};
    if (!targets.count(target.text))
      return error_at(target.loc, "unknown target '{}' (cpu, gpu, opencl or cuda)", target.text);
    s.target = target.text;
    TESSEL_TRY(expect(TokenKind::kLBrace, "to open the space"));
    while (!at(TokenKind::kRBrace)) {
      if (at(TokenKind::kEnd)) return error_at(s.loc, "this space is never closed with '}}'");
      if (is_keyword("require")) {
        SpaceConstraint c;
        c.loc = next().loc;
        TESSEL_ASSIGN_OR_RETURN(c.expr, parse_binary(0));
        s.constraints.push_back(std::move(c));
        continue;
      }
      TESSEL_ASSIGN_OR_RETURN(SpaceParam p, parse_param(s));
      s.params.push_back(std::move(p));
    }
    next();
    if (s.params.empty()) return error_at(s.loc, "the space of '{}' lists no parameter", s.kernel);
    return s;
  }

  // NAME in [v1, v2, ...]
  Expected<SpaceParam> parse_param(const TuneSpace& s) {
    if (!at(TokenKind::kIdent))
      return error_at(peek().loc, "expected 'NAME in [values]' or 'require ...', found {}",
                      describe(peek()));
    SpaceParam p;
    p.loc = peek().loc;
    p.name = next().text;
    const Param* param = kernel_->find_param(p.name);
    if (param == nullptr)
      return error_at(p.loc, "'{}' is not a parameter of kernel '{}'", p.name, s.kernel);
    if (param->is_dtype)
      return error_at(p.loc, "'{}' is a dtype parameter; a space lists integer parameters", p.name);
    for (const SpaceParam& other : s.params)
      if (other.name == p.name)
        return error_at(p.loc, "'{}' is listed twice (first at {})", p.name, other.loc.to_string());
    if (!is_keyword("in"))
      return error_at(peek().loc, "expected 'in' after '{}', found {}", p.name, describe(peek()));
    next();
    TESSEL_TRY(expect(TokenKind::kLBracket, "to open the list of values"));
    while (true) {
      const bool negative = at(TokenKind::kMinus);
      if (negative) next();
      if (!at(TokenKind::kInt))
        return error_at(peek().loc, "expected an integer value for '{}', found {}", p.name,
                        describe(peek()));
      const Token& v = next();
      const int64_t value = negative ? -v.int_value : v.int_value;
      if (std::find(p.values.begin(), p.values.end(), value) != p.values.end())
        return error_at(v.loc, "value {} of '{}' is listed twice", value, p.name);
      p.values.push_back(value);
      if (!at(TokenKind::kComma)) break;
      next();
    }
    TESSEL_TRY(expect(TokenKind::kRBracket, "to close the list of values"));
    return p;
  }

  Expected<std::shared_ptr<const SpaceExpr>> parse_binary(int min_precedence) {
    TESSEL_ASSIGN_OR_RETURN(auto lhs, parse_unary());
    while (true) {
      int precedence = -1;
      const char* op = binary_spelling(peek().kind, &precedence);
      if (precedence < 0 || precedence <= min_precedence) return lhs;
      if (++operators_ > 1000)
        return error_at(peek().loc, "more than 1000 operators in one constraint");
      auto e = std::make_shared<SpaceExpr>();
      e->kind = SpaceExpr::Kind::kBinary;
      e->name = op;
      e->loc = next().loc;
      TESSEL_ASSIGN_OR_RETURN(auto rhs, parse_binary(precedence));
      e->operands = {lhs, rhs};
      lhs = e;
    }
  }

  Expected<std::shared_ptr<const SpaceExpr>> parse_unary() {
    if (++depth_ > 100) return error_at(peek().loc, "a constraint nested more than 100 levels");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (at(TokenKind::kMinus) || at(TokenKind::kBang)) {
      auto e = std::make_shared<SpaceExpr>();
      e->kind = SpaceExpr::Kind::kUnary;
      e->name = at(TokenKind::kMinus) ? "-" : "!";
      e->loc = next().loc;
      TESSEL_ASSIGN_OR_RETURN(auto a, parse_unary());
      e->operands = {a};
      return std::shared_ptr<const SpaceExpr>(e);
    }
    const Token& t = peek();
    auto e = std::make_shared<SpaceExpr>();
    e->loc = t.loc;
    if (t.kind == TokenKind::kInt) {
      e->kind = SpaceExpr::Kind::kInt;
      e->value = next().int_value;
      return std::shared_ptr<const SpaceExpr>(e);
    }
    if (t.kind == TokenKind::kLParen) {
      next();
      TESSEL_ASSIGN_OR_RETURN(auto inner, parse_binary(0));
      TESSEL_TRY(expect(TokenKind::kRParen, "to close the parenthesis"));
      return inner;
    }
    if (t.kind != TokenKind::kIdent)
      return error_at(t.loc, "expected a number, a parameter or a limit, found {}", describe(t));
    e->kind = SpaceExpr::Kind::kName;
    e->name = next().text;
    const Param* p = kernel_->find_param(e->name);
    const bool limit = std::any_of(std::begin(kSpaceLimitNames), std::end(kSpaceLimitNames),
                                   [&](const char* n) { return e->name == n; });
    if (!limit && (p == nullptr || p->is_dtype))
      return error_at(e->loc,
                      "unknown name '{}' in a constraint (an integer parameter of '{}', "
                      "FAST_MEMORY, MAX_THREADS, COMPUTE_UNITS or ELEMENT_BYTES)",
                      e->name, kernel_->name);
    return std::shared_ptr<const SpaceExpr>(e);
  }

  std::vector<Token> tokens_;
  std::map<std::string, const Kernel*> kernels_;
  const Kernel* kernel_ = nullptr;
  size_t pos_ = 0;
  int depth_ = 0;
  int operators_ = 0;
};

// nullopt: the expression has no value at this point (division by zero, overflow).
std::optional<int64_t> evaluate(const SpaceExpr& e, const std::map<std::string, int64_t>& values) {
  switch (e.kind) {
    case SpaceExpr::Kind::kInt:
      return e.value;
    case SpaceExpr::Kind::kName: {
      auto it = values.find(e.name);
      if (it == values.end()) return std::nullopt;
      return it->second;
    }
    case SpaceExpr::Kind::kUnary: {
      auto a = evaluate(*e.operands[0], values);
      if (!a) return std::nullopt;
      if (e.name == "!") return int64_t{*a == 0};
      if (*a == INT64_MIN) return std::nullopt;
      return -*a;
    }
    case SpaceExpr::Kind::kBinary:
      break;
  }
  auto a = evaluate(*e.operands[0], values);
  auto b = evaluate(*e.operands[1], values);
  if (!a || !b) return std::nullopt;
  const std::string& op = e.name;
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(*a, *b, &r) ? std::nullopt : std::optional(r);
  if (op == "-") return __builtin_sub_overflow(*a, *b, &r) ? std::nullopt : std::optional(r);
  if (op == "*") return __builtin_mul_overflow(*a, *b, &r) ? std::nullopt : std::optional(r);
  if (op == "/" || op == "%") {
    if (*b == 0 || (*a == INT64_MIN && *b == -1)) return std::nullopt;
    return op == "/" ? *a / *b : *a % *b;
  }
  if (op == "<") return int64_t{*a < *b};
  if (op == "<=") return int64_t{*a <= *b};
  if (op == ">") return int64_t{*a > *b};
  if (op == ">=") return int64_t{*a >= *b};
  if (op == "==") return int64_t{*a == *b};
  if (op == "!=") return int64_t{*a != *b};
  if (op == "&&") return int64_t{*a != 0 && *b != 0};
  return int64_t{*a != 0 || *b != 0};  // "||"
}

}  // namespace

int64_t TuneSpace::size() const {
  int64_t n = 1;
  for (const SpaceParam& p : params)
    n *= static_cast<int64_t>(p.values.size());
  return n;
}

std::map<std::string, int64_t> TuneSpace::point(int64_t i) const {
  std::map<std::string, int64_t> out;
  for (auto p = params.rbegin(); p != params.rend(); ++p) {
    const int64_t n = static_cast<int64_t>(p->values.size());
    out[p->name] = p->values[i % n];
    i /= n;
  }
  return out;
}

Expected<std::vector<TuneSpace>> parse_tune_spaces(std::string_view source,
                                                   const std::string& file) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Kernel> kernels, parse_tile(source, file));
  std::map<std::string, const Kernel*> by_name;
  for (const Kernel& k : kernels)
    by_name[k.name] = &k;
  TESSEL_ASSIGN_OR_RETURN(std::vector<Token> tokens,
                          tokenize(source, std::make_shared<const std::string>(file)));
  SpaceParser parser(std::move(tokens), std::move(by_name));
  return parser.parse();
}

bool satisfies(const TuneSpace& space, const std::map<std::string, int64_t>& values) {
  for (const SpaceConstraint& c : space.constraints) {
    std::optional<int64_t> v = evaluate(*c.expr, values);
    if (!v || *v == 0) return false;
  }
  return true;
}

const TuneSpace* find_space(const std::vector<TuneSpace>& spaces, const std::string& kernel,
                            const std::string& device_kind) {
  const TuneSpace* found = nullptr;
  for (const TuneSpace& s : spaces) {
    if (s.kernel != kernel) continue;
    if (s.target == device_kind) return &s;
    if (s.target == "gpu" && (device_kind == "opencl" || device_kind == "cuda")) found = &s;
  }
  return found;
}

}  // namespace tessel::tile
