// The .tile lexer (see lexer.h).
#include "tile/parse/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace tessel::tile {

namespace {
struct Punct {
  const char* text;
  TokenKind kind;
};
// Longest first, so "<=" wins over "<".
constexpr Punct kPuncts[] = {
    {"==", TokenKind::kEq},         {"!=", TokenKind::kNe},         {"<=", TokenKind::kLe},
    {">=", TokenKind::kGe},         {"&&", TokenKind::kAndAnd},     {"||", TokenKind::kOrOr},
    {"+=", TokenKind::kPlusAssign}, {"-=", TokenKind::kMinusAssign}, {"*=", TokenKind::kStarAssign},
    {"/=", TokenKind::kSlashAssign}, {"(", TokenKind::kLParen},     {")", TokenKind::kRParen},
    {"[", TokenKind::kLBracket},    {"]", TokenKind::kRBracket},    {"{", TokenKind::kLBrace},
    {"}", TokenKind::kRBrace},      {",", TokenKind::kComma},       {":", TokenKind::kColon},
    {".", TokenKind::kDot},         {"=", TokenKind::kAssign},      {"+", TokenKind::kPlus},
    {"-", TokenKind::kMinus},       {"*", TokenKind::kStar},        {"/", TokenKind::kSlash},
    {"%", TokenKind::kPercent},     {"<", TokenKind::kLt},          {">", TokenKind::kGt},
    {"!", TokenKind::kBang},
};
}  // namespace

std::string token_kind_description(TokenKind kind) {
  switch (kind) {
    case TokenKind::kIdent: return "a name";
    case TokenKind::kInt: return "an integer";
    case TokenKind::kFloat: return "a number";
    case TokenKind::kEnd: return "the end of the file";
    default: break;
  }
  for (const Punct& p : kPuncts)
    if (p.kind == kind) return fmt::format("'{}'", p.text);
  return "?";
}

Expected<std::vector<Token>> tokenize(std::string_view src, std::shared_ptr<const std::string> file) {
  std::vector<Token> tokens;
  size_t i = 0;
  int line = 1, col = 1;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < src.size(); ++k, ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (true) {
    while (i < src.size()) {
      if (std::isspace(static_cast<unsigned char>(src[i]))) {
        advance(1);
      } else if (src[i] == '#') {
        while (i < src.size() && src[i] != '\n') advance(1);
      } else {
        break;
      }
    }
    Token t;
    t.loc = SourceLoc{file, line, col};
    if (i >= src.size()) {
      t.kind = TokenKind::kEnd;
      tokens.push_back(std::move(t));
      return tokens;
    }
    char c = src[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      t.kind = TokenKind::kIdent;
      t.text = std::string(src.substr(i, j - i));
      advance(j - i);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      if (j + 1 < src.size() && src[j] == '.' && std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E')) {
        size_t k = j + 1;
        if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
        if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
          is_float = true;
          j = k;
          while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
        }
      }
      t.text = std::string(src.substr(i, j - i));
      errno = 0;
      if (is_float) {
        t.kind = TokenKind::kFloat;
        t.float_value = std::strtod(t.text.c_str(), nullptr);
      } else {
        t.kind = TokenKind::kInt;
        t.int_value = std::strtoll(t.text.c_str(), nullptr, 10);
      }
      if (errno == ERANGE) return error_at(t.loc, "number '{}' is out of range", t.text);
      if (j < src.size() && (std::isalpha(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        return error_at(t.loc, "malformed number '{}{}'", t.text, src[j]);
      advance(j - i);
    } else {
      bool matched = false;
      for (const Punct& p : kPuncts) {
        std::string_view text = p.text;
        if (src.substr(i, text.size()) == text) {
          t.kind = p.kind;
          t.text = std::string(text);
          advance(text.size());
          matched = true;
          break;
        }
      }
      if (!matched) {
        if (std::isprint(static_cast<unsigned char>(c)))
          return error_at(t.loc, "unexpected character '{}'", c);
        return error_at(t.loc, "unexpected byte 0x{:02x}", static_cast<unsigned char>(c));
      }
    }
    tokens.push_back(std::move(t));
  }
}

}  // namespace tessel::tile
