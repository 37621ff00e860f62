// Malformed safetensors input: every corrupted header must fail with a one-line message naming
// the file and the offending tensor or field, never crash (deep JSON nesting included), hang or
// over-allocate. Also every truncation of a SafetensorsWriter file, random mutations, unsafe
// shard paths in model.safetensors.index.json, and a replay of tests/fuzz/corpus.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "malformed_input.h"

namespace duet {
namespace {

// A file: 8-byte little-endian header length, header text, `data_bytes` of data.
std::vector<uint8_t> st_file(const std::string& header, uint64_t data_bytes,
                             std::optional<uint64_t> hlen_override = std::nullopt) {
  std::vector<uint8_t> b(8);
  uint64_t n = hlen_override.value_or(header.size());
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  for (uint64_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i * 5));
  return b;
}

// One tensor entry, e.g. entry("a", "F32", "[2,2]", "[0,16]").
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

// The valid header every case varies: a [0,16) F32 2x2, b [16,24) BF16 4, 24 data bytes.
const char* kMeta = "\"__metadata__\":{\"format\":\"pt\"}";
std::string base_header() {
  return std::string("{") + kMeta + "," + entry("a", "F32", "[2,2]", "[0,16]") + "," +
         entry("b", "BF16", "[4]", "[16,24]") + "}";
}
// base_header() with b's entry replaced.
std::string with_b(const std::string& b_entry) {
  return std::string("{") + kMeta + "," + entry("a", "F32", "[2,2]", "[0,16]") + "," + b_entry +
         "}";
}

using testing_malformed::expect_one_line_error;
using testing_malformed::read_all;
using Parsed = testing_malformed::ParsedCopy<SafetensorsModel>;

Parsed parse_exact(const uint8_t* p, size_t n, const std::string& name, const SafetensorsLimits& lim = {}) {
  return testing_malformed::parse_exact<SafetensorsModel>(p, n, name, lim);
}

struct Case {
  std::string name;
  std::function<std::vector<uint8_t>()> make;
  std::vector<std::string> expect;  // every one must occur in the message
  SafetensorsLimits limits;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, std::function<std::vector<uint8_t>()> make,
                 std::vector<std::string> expect, SafetensorsLimits lim = {}) {
    c.push_back({std::move(name), std::move(make), std::move(expect), lim});
  };
  auto hdr = [](std::string h, uint64_t data = 24) {
    return [h, data] { return st_file(h, data); };
  };
  const std::string deep_open(100000, '[');
  const std::string deep_close(100000, ']');

  // Framing.
  add("empty_file", [] { return std::vector<uint8_t>(); }, {"0 bytes is too short"});
  add("seven_bytes", [] { return std::vector<uint8_t>(7, 0); }, {"7 bytes is too short"});
  add("header_length_past_end",
      [] { return st_file(base_header(), 24, base_header().size() + 25); },
      {"header length", "runs past end of file"});
  add("header_length_huge", [] { return st_file(base_header(), 24, UINT64_MAX); },
      {"header length 18446744073709551615", "past end"});
  {
    SafetensorsLimits lim;
    lim.max_header_bytes = 64;
    add("header_over_limit", hdr(base_header()), {"exceeds limit 64"}, lim);
  }
  add("header_empty", hdr(""), {"not valid JSON"});
  add("header_not_json", hdr("{\"a\":"), {"not valid JSON"});
  add("header_trailing_garbage", hdr(base_header() + "xx"), {"not valid JSON"});
  add("header_nul_padding", hdr(base_header() + std::string(4, '\0')), {"not valid JSON"});
  add("header_bad_utf8", hdr("{\"\xff\xfe\":{}}"), {"not valid JSON"});
  add("header_is_array", hdr("[1,2,3]"), {"not a JSON object"});
  add("header_is_string", hdr("\"x\""), {"not a JSON object"});
  add("deep_array_unterminated", hdr(deep_open), {"not valid JSON"});
  add("deep_array_is_not_object", hdr(deep_open + deep_close), {"not a JSON object"});
  add("deep_array_as_entry", hdr("{\"a\":" + deep_open + deep_close + "}"),
      {"tensor 'a'", "not an object"});
  add("deep_object_as_entry",
      [] {
        std::string h;
        for (int i = 0; i < 100000; ++i) h += "{\"k\":";
        h += "1";
        h += std::string(100000, '}');
        return st_file(h, 0);
      },
      {"tensor 'k'", "dtype"});
  add("deep_array_as_shape",
      hdr(with_b("\"b\":{\"dtype\":\"BF16\",\"shape\":" + deep_open + deep_close +
                 ",\"data_offsets\":[16,24]}")),
      {"tensor 'b'", "shape entries must be non-negative integers"});

  // Entries.
  add("entry_not_object", hdr(with_b("\"b\":[1]")), {"tensor 'b'", "entry is not an object"});
  add("dtype_missing", hdr(with_b("\"b\":{\"shape\":[4],\"data_offsets\":[16,24]}")),
      {"tensor 'b'", "dtype"});
  add("dtype_not_string", hdr(with_b(entry("b", "BF16", "[4]", "[16,24]").replace(13, 6, "16"))),
      {"tensor 'b'", "missing string \"dtype\""});
  add("dtype_unknown", hdr(with_b(entry("b", "Q4_0", "[4]", "[16,24]"))),
      {"tensor 'b'", "unsupported dtype 'Q4_0'"});
  add("dtype_lowercase", hdr(with_b(entry("b", "bf16", "[4]", "[16,24]"))),
      {"unsupported dtype 'bf16'"});
  add("dtype_newline", hdr(with_b(entry("b", "F\\n8", "[4]", "[16,24]"))),
      {"tensor 'b'", "unsupported dtype 'F\\x0a8'"});  // one line: the file's text escaped
  add("shape_missing", hdr(with_b("\"b\":{\"dtype\":\"BF16\",\"data_offsets\":[16,24]}")),
      {"tensor 'b'", "shape"});
  add("shape_not_array", hdr(with_b(entry("b", "BF16", "4", "[16,24]"))),
      {"tensor 'b'", "missing array \"shape\""});
  add("shape_negative", hdr(with_b(entry("b", "BF16", "[-4]", "[16,24]"))),
      {"tensor 'b'", "non-negative integers"});
  add("shape_float", hdr(with_b(entry("b", "BF16", "[4.0]", "[16,24]"))),
      {"non-negative integers"});
  add("shape_string", hdr(with_b(entry("b", "BF16", "[\"4\"]", "[16,24]"))),
      {"non-negative integers"});
  add("shape_too_many_dims", hdr(with_b(entry("b", "BF16", "[1,1,1,1,1,1,1,1,4]", "[16,24]"))),
      {"9 dimensions exceed limit"});
  add("shape_overflow", hdr(with_b(entry("b", "BF16", "[4294967296,4294967296]", "[16,24]"))),
      {"tensor 'b'", "element count overflows"});
  add("shape_over_uint64", hdr(with_b(entry("b", "BF16", "[18446744073709551616]", "[16,24]"))),
      {"non-negative integers"});  // parsed as a float by nlohmann
  add("byte_size_overflow", hdr(with_b(entry("b", "F64", "[4611686018427387904]", "[16,24]"))),
      {"tensor 'b'", "byte size overflows"});
  add("offsets_missing", hdr(with_b("\"b\":{\"dtype\":\"BF16\",\"shape\":[4]}")), {"data_offsets"});
  add("offsets_one_value", hdr(with_b(entry("b", "BF16", "[4]", "[16]"))),
      {"tensor 'b'", "array of two integers"});
  add("offsets_three_values", hdr(with_b(entry("b", "BF16", "[4]", "[16,24,32]"))),
      {"array of two integers"});
  add("offsets_not_array", hdr(with_b(entry("b", "BF16", "[4]", "{\"a\":1,\"b\":2}"))),
      {"array of two integers"});
  add("offsets_negative", hdr(with_b(entry("b", "BF16", "[4]", "[-8,0]"))),
      {"tensor 'b'", "non-negative"});
  add("offsets_float", hdr(with_b(entry("b", "BF16", "[4]", "[16.0,24]"))),
      {"non-negative integers"});
  add("offsets_reversed", hdr(with_b(entry("b", "BF16", "[4]", "[24,16]"))),
      {"tensor 'b'", "end 16 < begin 24"});
  add("offsets_past_end", hdr(with_b(entry("b", "BF16", "[4]", "[24,32]"))),
      {"tensor 'b'", "[24, 32) past the 24 data bytes"});
  add("offsets_huge",
      hdr(with_b(entry("b", "BF16", "[4]", "[18446744073709551608,18446744073709551615]"))),
      {"tensor 'b'", "past the 24 data bytes"});
  add("size_mismatch", hdr(with_b(entry("b", "BF16", "[3]", "[16,24]"))),
      {"tensor 'b'", "8 data bytes but shape and dtype BF16 need 6"});
  add("data_truncated", hdr(base_header(), 20),
      {"tensor 'b'", "past the 20 data bytes", "truncated"});
  add("tensors_overlap", hdr(with_b(entry("b", "BF16", "[4]", "[8,16]"))),
      {"tensor 'b' [8, 16) overlaps tensor 'a' [0, 16)"});
  add("tensors_same_span", hdr(with_b(entry("b", "F32", "[2,2]", "[0,16]"))), {"overlaps"});
  add("overlap_hidden_by_empty_tensor",
      // e [4,4) sorts between a [0,16) and b [8,16); only non-empty neighbours were compared.
      hdr(with_b(entry("e", "F32", "[0]", "[4,4]") + "," + entry("b", "BF16", "[4]", "[8,16]"))),
      {"overlaps tensor 'a'"});
  add("duplicate_tensor_name",
      // nlohmann keeps the last of duplicate keys: the first 'a' would vanish silently.
      hdr("{" + entry("a", "F32", "[2,2]", "[0,16]") + "," + entry("a", "BF16", "[4]", "[16,24]") +
          "}"),
      {"duplicate key 'a'"});
  add("duplicate_field",
      hdr(with_b(
          "\"b\":{\"dtype\":\"BF16\",\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]}")),
      {"duplicate key 'dtype'"});
  add("duplicate_metadata",
      hdr(std::string("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},") +
          entry("a", "F32", "[2,2]", "[0,16]") + "}"),
      {"duplicate key 'k'"});
  add("name_with_newline", hdr(with_b(entry("b\\nc", "Q4_0", "[4]", "[16,24]"))),
      {"tensor 'b\\x0ac'"});
  add("name_very_long", hdr(with_b(entry(std::string(5000, 'n'), "Q4_0", "[4]", "[16,24]"))),
      {"(5000 bytes)"});

  // __metadata__.
  add("metadata_not_object",
      hdr(std::string("{\"__metadata__\":[\"x\"],") + entry("a", "F32", "[2,2]", "[0,16]") + "}"),
      {"__metadata__ is not an object"});
  add("metadata_number",
      hdr(std::string("{\"__metadata__\":{\"n\":1},") + entry("a", "F32", "[2,2]", "[0,16]") + "}"),
      {"__metadata__['n'] is not a string"});
  add("metadata_null", hdr(std::string("{\"__metadata__\":{\"n\":null}}")),
      {"__metadata__['n'] is not a string"});
  add("metadata_nested_deep", hdr("{\"__metadata__\":{\"n\":" + deep_open + deep_close + "}}"),
      {"__metadata__['n'] is not a string"});

  // FP8 without scales.
  add("fp8_without_scales", hdr(with_b(entry("b", "F8_E4M3", "[8]", "[16,24]"))),
      {"FP8 tensors but no weight_scale"});
  return c;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> c = cases();
  return c;
}

class SafetensorsMalformed : public ::testing::TestWithParam<size_t> {};

TEST_P(SafetensorsMalformed, FailsWithOneLineMessage) {
  const Case& k = all_cases()[GetParam()];
  std::vector<uint8_t> bytes = k.make();
  const std::string name = k.name + ".safetensors";
  auto t0 = std::chrono::steady_clock::now();
  auto r = parse_exact(bytes.data(), bytes.size(), name, k.limits);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.is_ok()) << k.name << " parsed";
  expect_one_line_error(r.status(), name);
  for (const auto& e : k.expect)
    EXPECT_NE(r.status().message().find(e), std::string::npos)
        << "expected \"" << e << "\" in: " << r.status().message();
  EXPECT_LT(ms, 2000.0) << "slow failure: " << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(Cases, SafetensorsMalformed,
                         ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return all_cases()[i.param].name;
                         });

TEST(SafetensorsMalformedBase, CaseCount) { EXPECT_GE(all_cases().size(), 15u); }

TEST(SafetensorsMalformedBase, BaseHeaderParses) {
  for (const std::string& h :
       {base_header(), base_header() + "    ", std::string("{}"),
        with_b(entry("e", "F32", "[0]", "[16,16]") + "," + entry("b", "BF16", "[4]", "[16,24]"))}) {
    std::vector<uint8_t> b = st_file(h, h == "{}" ? 0 : 24);
    auto r = parse_exact(b.data(), b.size(), "base.safetensors");
    ASSERT_TRUE(r.is_ok()) << h << ": " << r.status().message();
  }
  std::vector<uint8_t> b = st_file(base_header(), 24);
  auto r = parse_exact(b.data(), b.size(), "base.safetensors");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.file().tensors().size(), 2u);
  EXPECT_EQ(r.file().metadata().at("format"), "pt");
  EXPECT_EQ(r.file().find("b")->n_bytes, 8u);
}

// ---- truncations and mutations of a SafetensorsWriter file ----

Status write_model(const std::string& path) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  DUET_RETURN_IF_ERROR(w.add_tensor("model.embed_tokens.weight", DType::kBF16, {4, 8}));
  DUET_RETURN_IF_ERROR(w.add_tensor("model.layers.0.mlp.up_proj.weight", DType::kF16, {8, 4}));
  DUET_RETURN_IF_ERROR(w.add_tensor("model.norm.weight", DType::kF32, {8}));
  DUET_RETURN_IF_ERROR(w.add_tensor("lm_head.weight", DType::kI8, {3, 5}));
  DUET_RETURN_IF_ERROR(w.open(path));
  const uint64_t sizes[] = {64, 64, 32, 15};
  for (size_t i = 0; i < 4; ++i) {
    std::vector<uint8_t> d(sizes[i]);
    for (size_t j = 0; j < d.size(); ++j) d[j] = static_cast<uint8_t>(j * 3 + i);
    DUET_RETURN_IF_ERROR(w.write_tensor(i, d.data(), d.size()));
  }
  return w.finish();
}

std::vector<uint8_t> writer_file() {
  std::string path = "/tmp/duet_st_malformed_" + std::to_string(getpid()) + ".safetensors";
  Status st = write_model(path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<uint8_t> bytes = read_all(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(SafetensorsMalformedWriterFile, EveryTruncationFailsCleanly) {
  std::vector<uint8_t> full = writer_file();
  auto ok = parse_exact(full.data(), full.size(), "full.safetensors");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  ASSERT_EQ(ok.file().tensors().size(), 4u);
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parse_exact(full.data(), n, "prefix.safetensors");
    ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " of " << full.size() << " bytes parsed";
    expect_one_line_error(r.status(), "prefix.safetensors");
    if (::testing::Test::HasFailure()) FAIL() << "at prefix " << n << ": " << r.status().message();
  }
}

void exercise(const SafetensorsModel& m) {
  uint64_t sum = m.total_bytes();
  for (const auto& t : m.tensors())
    if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];
  for (const auto& [k, v] : m.metadata()) sum += k.size() + v.size();
  volatile uint64_t sink = sum;
  (void)sink;
}

TEST(SafetensorsMalformedWriterFile, RandomMutationsNeverCrash) {
  std::vector<uint8_t> full = writer_file();
  std::mt19937_64 rng(20240612);
  const uint8_t kInteresting[] = {'"', '[', ']', '{', '}', ',', ':', '-', '0', '9', 0x00, 0xff};
  int n_ok = 0, n_err = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> m = full;
    int n_edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < n_edits; ++e) {
      size_t pos = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          m[pos] = static_cast<uint8_t>(rng());
          break;
        case 2:
          m[pos] = kInteresting[rng() % sizeof kInteresting];
          break;
      }
    }
    if (rng() % 8 == 0) m.resize(rng() % m.size());
    auto r = parse_exact(m.data(), m.size(), "mutant.safetensors");
    if (r.is_ok()) {
      ++n_ok;
      exercise(r.file());
    } else {
      ++n_err;
      expect_one_line_error(r.status(), "mutant.safetensors");
    }
    if (::testing::Test::HasFailure()) FAIL() << "mutant " << iter;
  }
  EXPECT_GT(n_err, 0);
  std::printf("safetensors mutants: %d parsed, %d rejected\n", n_ok, n_err);
}

// ---- sharded checkpoints: model.safetensors.index.json ----

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/duet_st_index_XXXXXX";
    char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "/tmp";
  }
  ~TempDir() {
    if (path_ != "/tmp") std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }

 private:
  std::string path_;
};

std::string index_json(const std::string& weight_map_body) {
  return "{\"metadata\":{\"total_size\":175},\"weight_map\":{" + weight_map_body + "}}";
}

TEST(SafetensorsMalformedIndex, ValidShardOpens) {
  TempDir d;
  ASSERT_TRUE(write_model(d.path() + "/model-00001-of-00001.safetensors").is_ok());
  d.write("model.safetensors.index.json",
          index_json("\"model.norm.weight\":\"model-00001-of-00001.safetensors\","
                     "\"lm_head.weight\":\"model-00001-of-00001.safetensors\""));
  auto m = SafetensorsModel::open(d.path());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ((*m)->tensors().size(), 4u);
  EXPECT_EQ((*m)->shard_paths().size(), 1u);
}

TEST(SafetensorsMalformedIndex, UnsafeOrBrokenIndexFails) {
  struct IndexCase {
    std::string index;
    std::string expect;
  };
  const IndexCase kCases[] = {
      {index_json("\"a\":\"../x.safetensors\""), "unsafe path '../x.safetensors'"},
      {index_json("\"a\":\"..\""), "unsafe path '..'"},
      {index_json("\"a\":\"/etc/passwd\""), "unsafe path '/etc/passwd'"},
      {index_json("\"a\":\"sub/../../x\""), "unsafe path"},
      {index_json("\"a\":\"\""), "unsafe path ''"},
      {index_json("\"a\\nb\":\"../x\""), "weight_map['a\\x0ab'] names an unsafe path"},
      {index_json("\"a\":\".\""), "not a regular file"},
      {index_json("\"a\":\"missing.safetensors\""), "cannot open"},
      {index_json("\"a\":7"), "weight_map['a'] is not a string"},
      {index_json("\"a\":\"model-00001-of-00001.safetensors\",\"a\":\"../x\""),
       "duplicate JSON key 'a'"},
      {"{\"weight_map\":[]}", "no \"weight_map\" object"},
      {"[]", "no \"weight_map\" object"},
      {"{\"weight_map\":", "invalid JSON"},
      {std::string(100000, '['), "invalid JSON"},
  };
  for (const auto& k : kCases) {
    TempDir d;
    ASSERT_TRUE(write_model(d.path() + "/model-00001-of-00001.safetensors").is_ok());
    d.write("model.safetensors.index.json", k.index);
    auto m = SafetensorsModel::open(d.path());
    ASSERT_FALSE(m.is_ok()) << k.index.substr(0, 200);
    const std::string& msg = m.status().message();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(k.expect), std::string::npos)
        << "expected \"" << k.expect << "\" in: " << msg;
    EXPECT_NE(msg.find(d.path()), std::string::npos) << "message does not name the path: " << msg;
  }
}

// Seeds and crash regressions kept by the fuzzer (tests/fuzz/corpus): never crash, and any
// failure is a one-line message.
TEST(SafetensorsMalformedCorpus, FuzzCorpusNeverCrashes) {
  testing_malformed::replay_fuzz_corpus<SafetensorsModel>("fuzz_safetensors", SafetensorsLimits{}, [](auto& f) { exercise(f); });
}

}  // namespace
}  // namespace duet
