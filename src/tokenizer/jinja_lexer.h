// Jinja lexer: template source -> tokens, with the whitespace rules transformers renders chat
// templates with (trim_blocks, lstrip_blocks, "-" and "+" markers), comments dropped and
// {% raw %} kept as text. Mirrors jinja2/lexer.py; throws JinjaError(kSyntax) on bad input.
// Pure function, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace duet::jinja {

enum class Tok : uint8_t {
  kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof,
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // data, name, operator, or the unescaped string literal
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

std::vector<Token> lex(std::string_view source, const LexOptions& options = {});

}  // namespace duet::jinja
