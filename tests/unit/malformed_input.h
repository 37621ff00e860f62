// Shared by the malformed-input tests of the file parsers (gguf_malformed_test.cpp,
// safetensors_malformed_test.cpp): parsing a private heap copy of exactly the given bytes (so
// AddressSanitizer sees any over-read), the one-line error contract, and the fuzz-corpus replay.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace duet::testing_malformed {

inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A parse of a private copy; the copy lives as long as the result that points into it.
template <typename File>
struct ParsedCopy {
  std::unique_ptr<uint8_t[]> buf;
  Result<std::unique_ptr<File>> r;
  bool is_ok() const { return r.is_ok(); }
  const Status& status() const { return r.status(); }
  File& file() { return *r.value(); }
};

// File::parse(bytes, n, name, limits) on a heap copy of exactly n bytes; every tensor of a
// successful parse must lie inside the copy.
template <typename File, typename Limits>
ParsedCopy<File> parse_exact(const uint8_t* p, size_t n, const std::string& name, const Limits& lim) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(copy.get(), p, n);
  auto r = File::parse(copy.get(), n, name, lim);
  if (r.is_ok()) {
    for (const auto& t : (*r)->tensors()) {
      EXPECT_GE(t.data, copy.get());
      EXPECT_LE(t.data + t.n_bytes, copy.get() + n);
    }
  }
  return ParsedCopy<File>{std::move(copy), std::move(r)};
}

// The parsers' error contract: one line, bounded, starting with the file name.
inline void expect_one_line_error(const Status& st, const std::string& name) {
  EXPECT_FALSE(st.is_ok());
  const std::string& m = st.message();
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find('\r'), std::string::npos) << m;
  EXPECT_LT(m.size(), 600u) << m;
  EXPECT_EQ(m.rfind(name + ":", 0), 0u) << "message does not start with the file name: " << m;
}

// Seeds (tests/fuzz/corpus/<seed_dir>, which must parse) and crash regressions kept by the
// fuzzer: never crash, and any failure is a one-line message. `exercise` walks a parsed file.
template <typename File, typename Limits, typename Exercise>
void replay_fuzz_corpus(const char* seed_dir, const Limits& lim, Exercise exercise) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(DUET_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
  int n = 0;
  for (const char* sub : {seed_dir, "regression"}) {
    if (!fs::is_directory(root / sub)) continue;
    for (const auto& e : fs::directory_iterator(root / sub)) {
      if (!e.is_regular_file()) continue;
      std::vector<uint8_t> b = read_all(e.path().string());
      auto r = parse_exact<File>(b.data(), b.size(), e.path().filename().string(), lim);
      if (r.is_ok()) {
        exercise(r.file());
      } else {
        expect_one_line_error(r.status(), e.path().filename().string());
      }
      if (std::string(sub) == seed_dir) {
        EXPECT_TRUE(r.is_ok()) << "seed " << e.path() << ": " << r.status().message();
      }
      ++n;
    }
  }
  EXPECT_GT(n, 0) << "no corpus under " << root;
}

}  // namespace duet::testing_malformed
