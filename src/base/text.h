// Small string and filesystem helpers shared by parsers and tools: suffix tests, a one-line
// printable form of untrusted names, and file-type tests. Header-only, no state.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace duet {

inline bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Bound for longer quotes of a file's text in a message (a template's raise_exception argument,
// a loader's message that quotes merges or token texts): printable(s, kMaxQuotedText).
constexpr size_t kMaxQuotedText = 1000;

// A name read from a file, fit for a one-line error message: control bytes are escaped and long
// names cut (after kMaxShown bytes), so a hostile name can neither split nor flood the message.
inline std::string printable(const std::string& s, size_t kMaxShown = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (s.size() > kMaxShown) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

inline bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
inline bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace duet
