// Splits .tile source into tokens. Comments run from `#` to the end of the line; newlines are
// plain white space (every statement starts with a name or a keyword, so none is ambiguous).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

enum class TokenKind {
  kIdent, kInt, kFloat,
  kLParen, kRParen, kLBracket, kRBracket, kLBrace, kRBrace,
  kComma, kColon, kDot, kAssign,
  kPlus, kMinus, kStar, kSlash, kPercent,
  kPlusAssign, kMinusAssign, kStarAssign, kSlashAssign,
  kLt, kLe, kGt, kGe, kEq, kNe, kAndAnd, kOrOr, kBang,
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;  // as written
  SourceLoc loc;
  int64_t int_value = 0;
  double float_value = 0;
};

// How a token kind reads in an error message: "')'", "a name", "the end of the file".
std::string token_kind_description(TokenKind kind);

// `file` names the source in every SourceLoc (and so in every error message).
Expected<std::vector<Token>> tokenize(std::string_view source, std::shared_ptr<const std::string> file);

}  // namespace tessel::tile
