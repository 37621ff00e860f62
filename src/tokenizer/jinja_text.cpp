// Text helpers for the Jinja interpreter (see jinja_text.h): UTF-8, Python whitespace/case,
// Python float and string repr, JSON string escaping.
#include "tokenizer/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tokenizer/unicode.h"

namespace duet::jinja {

uint32_t utf8_next(std::string_view s, size_t* i) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  if (b0 < 0x80) {
    *i += 1;
    return b0;
  }
  int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC0 ? 1 : 0;
  if (n == 0 || *i + n >= s.size()) {
    *i += 1;
    return b0;
  }
  uint32_t cp = b0 & (0x3F >> n);
  for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += n + 1;
  return cp;
}

void utf8_append(std::string* out, uint32_t cp) { tok::utf8_append(cp, out); }

bool utf8_valid(std::string_view s) { return tok::utf8_is_valid(s); }

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<uint8_t>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(utf8_next(s, &i));
  return out;
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t k = begin; k < end; ++k) utf8_append(&out, cps[k]);
  return out;
}

bool py_isspace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool py_isprintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0)) return false;
  if (cp == ' ') return true;
  if (py_isspace(cp)) return false;  // Zs, Zl, Zp other than space
  if (cp == 0xAD || (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F ||
      cp == 0x180E || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0x110BD || (cp >= 0x1D173 && cp <= 0x1D17A) ||
      cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F))
    return false;  // Cf
  if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000) return false;  // Cs, Co
  if ((cp & 0xFFFE) == 0xFFFE || (cp >= 0xFDD0 && cp <= 0xFDEF)) return false;  // noncharacters
  return true;
}

bool py_isalnum(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return !py_isspace(cp) && py_isprintable(cp) && !(cp >= 0x2000 && cp <= 0x206F) &&
         !(cp >= 0x3000 && cp <= 0x303F) && !(cp >= 0xFF00 && cp <= 0xFF0F) && cp != 0xD7 && cp != 0xF7 &&
         !(cp >= 0xA1 && cp <= 0xBF);
}

uint32_t py_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130) return 'i';  // approximation: Python gives "i̇"
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp + 1 : cp;
    if (cp == 0x178) return 0xFF;
    if (cp >= 0x138 && cp <= 0x149) return cp;
    return (cp & 1) ? cp : cp + 1;
  }
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

uint32_t py_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x131) return 'I';
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp : cp - 1;
    if (cp == 0x138 || cp == 0x149 || cp == 0x17F || cp == 0x130 || cp == 0x178) return cp == 0x17F ? 'S' : cp;
    return (cp & 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

bool py_iscased_lower(uint32_t cp) { return py_upper(cp) != cp || cp == 0xDF; }
bool py_iscased_upper(uint32_t cp) { return py_lower(cp) != cp; }

namespace {

template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back(static_cast<char>(f(static_cast<uint8_t>(c))));
    return out;
  }
  size_t i = 0;
  while (i < s.size()) utf8_append(&out, f(utf8_next(s, &i)));
  return out;
}

}  // namespace

std::string py_str_lower(std::string_view s) { return map_cps(s, py_lower); }

std::string py_str_upper(std::string_view s) {
  // U+00DF (sharp s) upper-cases to "SS" in Python.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    if (cp == 0xDF) {
      out += "SS";
    } else {
      utf8_append(&out, py_upper(cp));
    }
  }
  return out;
}

std::string py_str_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    uint32_t c = prev_cased ? py_lower(cp) : py_upper(cp);
    utf8_append(&out, c);
    prev_cased = py_iscased_lower(c) || py_iscased_upper(c);
  }
  return out;
}

std::string py_str_capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    utf8_append(&out, first ? py_upper(cp) : py_lower(cp));
    first = false;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](uint32_t cp) {
    if (!chars) return py_isspace(cp);
    for (uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t j = begin;
      if (!strip_it(utf8_next(s, &j))) break;
      begin = j;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
      size_t j = start;
      if (!strip_it(utf8_next(s, &j))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::string py_float_repr(double x, bool json_style) {
  if (std::isnan(x)) return json_style ? "NaN" : "nan";
  if (std::isinf(x)) return x > 0 ? (json_style ? "Infinity" : "inf") : (json_style ? "-Infinity" : "-inf");
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout rule (repr uses exponent form when the
  // decimal point position is <= -4 or > 16).
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = false;
  size_t p = 0;
  if (sci[0] == '-') neg = true, p = 1;
  std::string digits;
  size_t e_pos = sci.find('e');
  for (size_t k = p; k < e_pos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  int exp10 = std::atoi(sci.c_str() + e_pos + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  std::string out = neg ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    int e = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += eb;
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt >= n) {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

std::string py_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    char buf[16];
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (py_isprintable(cp)) {
      utf8_append(&out, cp);
    } else {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      }
      out += buf;
    }
  }
  out.push_back(q);
  return out;
}

void json_quote(std::string* out, std::string_view s, bool ensure_ascii) {
  out->push_back('"');
  size_t i = 0;
  char buf[16];
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80) {
      size_t start = i;
      uint32_t cp = utf8_next(s, &i);
      if (!ensure_ascii) {
        out->append(s.substr(start, i - start));
      } else if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        out->append(buf);
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
        out->append(buf);
      }
      continue;
    }
    ++i;
    switch (b) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (b < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", b);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(b));
        }
    }
  }
  out->push_back('"');
}

}  // namespace duet::jinja
