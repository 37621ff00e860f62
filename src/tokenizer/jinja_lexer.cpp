// Jinja lexer (see jinja_lexer.h). Follows jinja2/lexer.py rule by rule: the root rule finds the
// next "{{", "{%" or "{#", strips the text before it ("-" marker, lstrip_blocks), and the tag
// rules tokenize until the matching end while (), [] and {} are balanced.
#include "tokenizer/jinja_lexer.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja_text.h"
#include "tokenizer/jinja_value.h"

namespace duet::jinja {

namespace {

[[noreturn]] void syntax_error(const std::string& msg, int line) {
  JinjaError e(ErrorKind::kSyntax, msg + " (line " + std::to_string(line) + ")");
  e.line = line;
  throw e;
}

bool is_ws_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() on UTF-8 text.
std::string rstrip_ws(std::string_view s) { return py_strip(s, nullptr, false, true); }

// Length of the Python-\s* run starting at pos.
size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t j = pos;
    uint32_t cp = utf8_next(s, &j);
    if (!py_isspace(cp)) break;
    pos = j;
  }
  return pos;
}

// True when s[from:] is a non-empty run of whitespace (Python's \s+ fullmatch).
bool all_ws(std::string_view s, size_t from) {
  if (from >= s.size()) return false;
  return skip_ws(s, from) == s.size();
}

int count_nl(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// (\d+_)*\d+ at pos; returns end or npos.
size_t match_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return std::string_view::npos;
  size_t p = pos;
  while (true) {
    while (p < s.size() && is_digit(s[p])) ++p;
    if (p + 1 < s.size() && s[p] == '_' && is_digit(s[p + 1])) {
      ++p;
      continue;
    }
    return p;
  }
}

size_t match_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return std::string_view::npos;
  size_t p = match_digits(s, pos);
  if (p == std::string_view::npos) return p;
  size_t frac_end = std::string_view::npos;
  if (p < s.size() && s[p] == '.') frac_end = match_digits(s, p + 1);
  size_t after = frac_end != std::string_view::npos ? frac_end : p;
  if (after < s.size() && (s[after] == 'e' || s[after] == 'E')) {
    size_t q = after + 1;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    size_t e = match_digits(s, q);
    if (e != std::string_view::npos) return e;
  }
  return frac_end;  // npos when there is neither a fraction nor an exponent
}

size_t match_int(std::string_view s, size_t pos, int* base) {
  auto digit_ok = [](char c, int b) {
    if (b == 2) return c == '0' || c == '1';
    if (b == 8) return c >= '0' && c <= '7';
    if (b == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    return is_digit(c);
  };
  auto run = [&](size_t p, int b) {  // (_?[digit])+
    size_t q = p;
    while (true) {
      if (q < s.size() && digit_ok(s[q], b)) {
        ++q;
      } else if (q + 1 < s.size() && s[q] == '_' && digit_ok(s[q + 1], b)) {
        q += 2;
      } else {
        break;
      }
    }
    return q;
  };
  if (pos >= s.size() || !is_digit(s[pos])) return std::string_view::npos;
  if (s[pos] == '0' && pos + 1 < s.size()) {
    char c = static_cast<char>(s[pos + 1] | 0x20);
    int b = c == 'b' ? 2 : c == 'o' ? 8 : c == 'x' ? 16 : 0;
    if (b) {
      size_t q = run(pos + 2, b);
      if (q > pos + 2) {
        *base = b;
        return q;
      }
    }
  }
  *base = 10;
  if (s[pos] != '0') return run(pos + 1, 10);
  size_t q = pos + 1;  // 0(_?0)*
  while (true) {
    if (q < s.size() && s[q] == '0') {
      ++q;
    } else if (q + 1 < s.size() && s[q] == '_' && s[q + 1] == '0') {
      q += 2;
    } else {
      break;
    }
  }
  return q;
}

int hexval(char c) {
  if (is_digit(c)) return c - '0';
  c = static_cast<char>(c | 0x20);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal body.
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  size_t i = 0;
  while (i < body.size()) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          int h = i + k < body.size() ? hexval(body[i + k]) : -1;
          if (h < 0) syntax_error("truncated \\" + std::string(1, e) + " escape in a string", line);
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
          syntax_error("string escape is not a valid code point", line);
        i += n;
        utf8_append(&out, cp);
        break;
      }
      case 'N': syntax_error("\\N{...} escapes are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k, ++i)
            cp = cp * 8 + static_cast<uint32_t>(body[i] - '0');
          utf8_append(&out, cp);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                            ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& o) : opt_(o) {
    // Newlines normalized to "\n", and one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_.push_back(src[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    const std::string_view s = src_;
    bool line_starting = true;
    while (pos_ < s.size()) {
      size_t k = s.find('{', pos_);
      while (k != std::string_view::npos && (k + 1 >= s.size() || (s[k + 1] != '{' && s[k + 1] != '%' && s[k + 1] != '#')))
        k = s.find('{', k + 1);
      if (k == std::string_view::npos) {
        emit_data(s.substr(pos_));
        pos_ = s.size();
        break;
      }
      const char kind = s[k + 1];
      char sign = (k + 2 < s.size() && (s[k + 2] == '-' || s[k + 2] == '+')) ? s[k + 2] : 0;
      std::string text(s.substr(pos_, k - pos_));
      if (sign == '-') {
        std::string stripped = rstrip_ws(text);
        text = std::move(stripped);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && all_ws(text, l_pos)) text.resize(l_pos);
      }
      const int tag_line = line_ + count_nl(s.substr(pos_, k - pos_));
      emit_data(text);
      line_ = tag_line;
      pos_ = k + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%' && try_raw()) {
        line_starting = last_consumed_newline_;
      } else {
        line_starting = lex_tag(kind == '%');
      }
    }
    Token eof;
    eof.type = Tok::kEof;
    eof.line = line_;
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  void emit_data(std::string_view text) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::kData;
    t.text = std::string(text);
    t.line = line_;
    toks_.push_back(std::move(t));
    line_ += count_nl(text);
  }

  void push(Tok type, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_;
    toks_.push_back(std::move(t));
  }

  // After "%}" / "#}": trim_blocks eats one newline; "-" eats all whitespace. Returns whether
  // the consumed text ended with a newline (the lexer's line_starting).
  bool finish_block_end(size_t end_pos, char sign) {
    const std::string_view s = src_;
    size_t p = end_pos;
    if (sign == '-') {
      p = skip_ws(s, p);
    } else if (sign == 0 && opt_.trim_blocks && p < s.size() && s[p] == '\n') {
      ++p;
    }
    line_ += count_nl(s.substr(end_pos, p - end_pos));
    pos_ = p;
    return p > 0 && s[p - 1] == '\n';
  }

  bool lex_comment() {
    const std::string_view s = src_;
    size_t q = s.find("#}", pos_);
    if (q == std::string_view::npos) syntax_error("Missing end of comment tag", line_);
    char sign = 0;
    size_t body_end = q;
    if (q > pos_ && (s[q - 1] == '-' || s[q - 1] == '+')) sign = s[q - 1], body_end = q - 1;
    line_ += count_nl(s.substr(pos_, body_end - pos_));
    return finish_block_end(q + 2, sign);
  }

  // "{%" [sign] \s* "raw" \s* ("-%}" \s* | "%}") ... "{%" [sign] \s* "endraw" \s* (end).
  bool try_raw() {
    const std::string_view s = src_;
    size_t p = skip_ws(s, pos_);
    if (s.compare(p, 3, "raw") != 0 || (p + 3 < s.size() && is_name_char(s[p + 3]))) return false;
    p = skip_ws(s, p + 3);
    if (s.compare(p, 3, "-%}") == 0) {
      p = skip_ws(s, p + 3);
    } else if (s.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    line_ += count_nl(s.substr(pos_, p - pos_));
    // Find "{%" [sign] \s* "endraw" \s* end.
    size_t search = p;
    while (true) {
      size_t k = s.find("{%", search);
      if (k == std::string_view::npos) syntax_error("Missing end of raw directive", line_);
      size_t q = k + 2;
      char sign = (q < s.size() && (s[q] == '-' || s[q] == '+')) ? s[q] : 0;
      if (sign) ++q;
      q = skip_ws(s, q);
      if (s.compare(q, 6, "endraw") != 0) {
        search = k + 1;
        continue;
      }
      q = skip_ws(s, q + 6);
      char end_sign = 0;
      size_t end_pos;
      if (s.compare(q, 3, "+%}") == 0) {
        end_sign = '+', end_pos = q + 3;
      } else if (s.compare(q, 3, "-%}") == 0) {
        end_sign = '-', end_pos = q + 3;
      } else if (s.compare(q, 2, "%}") == 0) {
        end_pos = q + 2;
      } else {
        search = k + 1;
        continue;
      }
      std::string text(s.substr(p, k - p));
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 && all_ws(text, l_pos)) text.resize(l_pos);
      }
      int raw_line = line_;
      emit_data(text);
      line_ = raw_line + count_nl(s.substr(p, end_pos - p));
      pos_ = end_pos;
      last_consumed_newline_ = finish_block_end(end_pos, end_sign);
      return true;
    }
  }

  bool lex_tag(bool block) {
    const std::string_view s = src_;
    push(block ? Tok::kBlockBegin : Tok::kVarBegin);
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) syntax_error(std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'", line_);
      if (balance.empty()) {
        if (block) {
          if (s.compare(pos_, 3, "+%}") == 0 || s.compare(pos_, 3, "-%}") == 0 || s.compare(pos_, 2, "%}") == 0) {
            char sign = s[pos_] == '%' ? 0 : s[pos_];
            push(Tok::kBlockEnd);
            return finish_block_end(pos_ + (sign ? 3 : 2), sign);
          }
        } else {
          if (s.compare(pos_, 3, "-}}") == 0) {
            push(Tok::kVarEnd);
            size_t p = skip_ws(s, pos_ + 3);
            line_ += count_nl(s.substr(pos_, p - pos_));
            pos_ = p;
            return p > 0 && s[p - 1] == '\n';
          }
          if (s.compare(pos_, 2, "}}") == 0) {
            push(Tok::kVarEnd);
            pos_ += 2;
            return false;
          }
        }
      }
      const char c = s[pos_];
      if (is_ws_byte(c)) {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (static_cast<uint8_t>(c) >= 0x80) {
        size_t j = pos_;
        if (py_isspace(utf8_next(s, &j))) {
          pos_ = j;
          continue;
        }
        syntax_error("unexpected character in tag", line_);
      }
      size_t end = match_float(s, pos_);
      if (end != std::string_view::npos) {
        std::string digits;
        for (size_t k = pos_; k < end; ++k)
          if (s[k] != '_') digits.push_back(s[k]);
        Token t;
        t.type = Tok::kFloat;
        t.fval = std::strtod(digits.c_str(), nullptr);
        t.text = digits;
        t.line = line_;
        toks_.push_back(std::move(t));
        pos_ = end;
        continue;
      }
      int base = 10;
      end = match_int(s, pos_, &base);
      if (end != std::string_view::npos) {
        std::string digits;
        for (size_t k = pos_ + (base == 10 ? 0 : 2); k < end; ++k)
          if (s[k] != '_') digits.push_back(s[k]);
        errno = 0;
        char* ep = nullptr;
        unsigned long long v = std::strtoull(digits.c_str(), &ep, base);
        if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
          syntax_error("integer literal " + digits + " does not fit in 64 bits", line_);
        Token t;
        t.type = Tok::kInt;
        t.ival = static_cast<int64_t>(v);
        t.text = digits;
        t.line = line_;
        toks_.push_back(std::move(t));
        pos_ = end;
        continue;
      }
      if (is_name_start(c)) {
        size_t p = pos_;
        while (p < s.size() && is_name_char(s[p])) ++p;
        push(Tok::kName, std::string(s.substr(pos_, p - pos_)));
        pos_ = p;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s.size() && s[p] != c) p += (s[p] == '\\') ? 2 : 1;
        if (p >= s.size()) syntax_error("unterminated string literal", line_);
        std::string_view body = s.substr(pos_ + 1, p - pos_ - 1);
        Token t;
        t.type = Tok::kString;
        t.text = unescape(body, line_);
        t.line = line_;
        toks_.push_back(std::move(t));
        line_ += count_nl(body);
        pos_ = p + 1;
        continue;
      }
      bool matched = false;
      for (const char* op : kOps) {
        size_t n = std::char_traits<char>::length(op);
        if (s.compare(pos_, n, op) != 0) continue;
        std::string o(op);
        if (o == "(" || o == "[" || o == "{") {
          balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
        } else if (o == ")" || o == "]" || o == "}") {
          if (balance.empty()) syntax_error("unexpected '" + o + "'", line_);
          if (balance.back() != o[0])
            syntax_error("unexpected '" + o + "', expected '" + std::string(1, balance.back()) + "'", line_);
          balance.pop_back();
        }
        push(Tok::kOp, o);
        pos_ += n;
        matched = true;
        break;
      }
      if (!matched) syntax_error(std::string("unexpected char '") + c + "'", line_);
    }
  }

  LexOptions opt_;
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_consumed_newline_ = false;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace duet::jinja
