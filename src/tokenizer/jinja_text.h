// Text helpers for the Jinja interpreter: UTF-8 code points, Python's notion of whitespace and
// case, Python float repr, Python string repr and JSON string escaping. Pure functions on
// UTF-8 std::string; no allocation limits here (callers check sizes). Thread-safe.
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic, not all of Unicode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace duet::jinja {

// Decodes one code point at s[*i], advancing *i. Input is assumed valid UTF-8 (checked once with
// utf8_valid); a stray byte decodes as itself so that no input can loop forever.
uint32_t utf8_next(std::string_view s, size_t* i);
// tokenizer/unicode.h's encoder and strict validator (no overlongs, surrogates or > U+10FFFF).
void utf8_append(std::string* out, uint32_t cp);
bool utf8_valid(std::string_view s);
bool is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);  // code points
std::vector<uint32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);

bool py_isspace(uint32_t cp);      // str.isspace() of one character
bool py_isprintable(uint32_t cp);  // str.isprintable(), approximated (see file header)
bool py_isalnum(uint32_t cp);      // approximated: ASCII alnum, or a non-ASCII letter-ish cp
uint32_t py_lower(uint32_t cp);
uint32_t py_upper(uint32_t cp);
bool py_iscased_lower(uint32_t cp);
bool py_iscased_upper(uint32_t cp);

std::string py_str_lower(std::string_view s);
std::string py_str_upper(std::string_view s);
std::string py_str_title(std::string_view s);       // str.title()
std::string py_str_capitalize(std::string_view s);  // str.capitalize()

// str.strip/lstrip/rstrip. chars == nullptr strips whitespace; otherwise any code point in chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

// Python's repr(float) ("1.0", "1e+16", "inf"); json_style gives json.dumps's "Infinity"/"NaN".
std::string py_float_repr(double x, bool json_style = false);
// Python's repr(str): quotes chosen as Python does, non-printables escaped.
std::string py_str_repr(std::string_view s);
// JSON string with quotes, as json.dumps(ensure_ascii=...) writes it.
void json_quote(std::string* out, std::string_view s, bool ensure_ascii);

}  // namespace duet::jinja
