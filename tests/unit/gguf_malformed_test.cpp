// Malformed GGUF input: every corrupted file must fail with a one-line message that names what is
// wrong and where (file name, field, byte offset or tensor), never crash, hang or allocate for a
// count the file cannot hold. Cases are hand-built with a tiny byte builder from a small valid
// layout; truncations and random mutations start from a file made by GgufWriter. Also replays
// tests/fuzz/corpus (seeds + regression inputs found by fuzz_gguf).
#include <gtest/gtest.h>
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

#include "formats/gguf.h"
#include "malformed_input.h"

namespace duet {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"

// Little-endian byte builder for hand-written GGUF headers.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& f32(float v) { return put(v); }
  Bytes& f64(double v) { return put(v); }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  Bytes& raw(const std::string& s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const Bytes& o) {
    b.insert(b.end(), o.b.begin(), o.b.end());
    return *this;
  }
  Bytes& pad_to(uint64_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  std::vector<uint8_t> b;

 private:
  template <typename T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
};

uint32_t ty(GgufType t) { return static_cast<uint32_t>(t); }
uint32_t ty(DType t) { return static_cast<uint32_t>(t); }

// One metadata pair: key, value type, raw value bytes.
Bytes kv(const std::string& key, uint32_t type, const Bytes& value) {
  return Bytes().str(key).u32(type).raw(value);
}
Bytes kv_u32(const std::string& key, uint32_t v) {
  return kv(key, ty(GgufType::kUint32), Bytes().u32(v));
}
Bytes kv_str(const std::string& key, const std::string& s) {
  return kv(key, ty(GgufType::kString), Bytes().str(s));
}
// Array value bytes: element type, count, then the given element bytes.
Bytes arr(uint32_t elem_type, uint64_t n, const Bytes& elems = Bytes()) {
  return Bytes().u32(elem_type).u64(n).raw(elems);
}
Bytes tinfo(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
            uint64_t offset) {
  Bytes t;
  t.str(name).u32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) t.u64(d);
  return t.u32(type).u64(offset);
}

// A whole file: header, metadata, tensor infos, padding to `alignment`, `data_bytes` of data.
struct Spec {
  uint32_t magic = kMagic;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // override the real counts
  std::vector<Bytes> kvs, tensors;
  uint64_t alignment = 32;
  uint64_t data_bytes = 0;
  std::optional<size_t> truncate_to;
  GgufLimits limits;
};

std::vector<uint8_t> build(const Spec& s) {
  Bytes f;
  f.u32(s.magic).u32(s.version);
  f.u64(s.n_tensors.value_or(s.tensors.size())).u64(s.n_kv.value_or(s.kvs.size()));
  for (const auto& k : s.kvs) f.raw(k);
  for (const auto& t : s.tensors) f.raw(t);
  f.pad_to(s.alignment);
  for (uint64_t i = 0; i < s.data_bytes; ++i) f.u8(static_cast<uint8_t>(i * 7));
  if (s.truncate_to && *s.truncate_to < f.b.size()) f.b.resize(*s.truncate_to);
  return f.b;
}

// The valid layout every hand-built case corrupts. Data: tok_embd [0,64) F32, blk.q [64,100)
// Q4_0, blk.k [128,162) Q8_0, out [192,224) F16.
Spec base() {
  Spec s;
  s.kvs.push_back(kv_str("general.architecture", "llama"));
  s.kvs.push_back(kv_u32("llama.block_count", 2));
  s.kvs.push_back(kv("llama.rope.freq_base", ty(GgufType::kFloat32), Bytes().f32(10000.f)));
  s.kvs.push_back(kv("tokenizer.ggml.tokens", ty(GgufType::kArray),
                     arr(ty(GgufType::kString), 2, Bytes().str("a").str("bc"))));
  s.kvs.push_back(kv("x.flag", ty(GgufType::kBool), Bytes().u8(1)));
  s.tensors.push_back(tinfo("tok_embd", {8, 2}, ty(DType::kF32), 0));
  s.tensors.push_back(tinfo("blk.q", {32, 2}, ty(DType::kQ4_0), 64));
  s.tensors.push_back(tinfo("blk.k", {32}, ty(DType::kQ8_0), 128));
  s.tensors.push_back(tinfo("out", {16}, ty(DType::kF16), 192));
  s.data_bytes = 224;
  return s;
}

// Index of each entry in base().
enum { kArch = 0, kBlocks = 1, kFreq = 2, kTokens = 3, kFlag = 4 };
enum { kTokEmbd = 0, kBlkQ = 1, kBlkK = 2, kOut = 3 };

std::string case_name(const std::string& c) { return c + ".gguf"; }

using testing_malformed::expect_one_line_error;
using testing_malformed::read_all;
using Parsed = testing_malformed::ParsedCopy<GgufFile>;

Parsed parse_exact(const uint8_t* p, size_t n, const std::string& name, const GgufLimits& lim = {}) {
  return testing_malformed::parse_exact<GgufFile>(p, n, name, lim);
}

struct Case {
  std::string name;
  std::function<Spec()> make;
  std::vector<std::string> expect;  // every one must occur in the message
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, std::function<void(Spec&)> edit,
                 std::vector<std::string> expect) {
    c.push_back({std::move(name),
                 [edit] {
                   Spec s = base();
                   edit(s);
                   return s;
                 },
                 std::move(expect)});
  };
  const uint64_t k2_32 = 1ull << 32;

  // Header.
  add("empty_file", [](Spec& s) { s.truncate_to = 0; }, {"truncated", "magic", "at byte 0x0"});
  add("bad_magic", [](Spec& s) { s.magic = 0x46554746; }, {"magic", "0x46554746"});
  add("ggjt_magic", [](Spec& s) { s.magic = 0x67676a74; }, {"not a GGUF file", "magic"});
  add("version_1", [](Spec& s) { s.version = 1; }, {"version 1", "at byte 0x8"});
  add("version_4", [](Spec& s) { s.version = 4; }, {"version 4"});
  add("version_max", [](Spec& s) { s.version = 0xFFFFFFFF; }, {"version 4294967295"});
  add("truncated_version", [](Spec& s) { s.truncate_to = 6; }, {"truncated", "version"});
  add("tensor_count_huge", [](Spec& s) { s.n_tensors = 1ull << 60; },
      {"1152921504606846976 tensors", "bytes left"});
  add("tensor_count_mul_overflow", [](Spec& s) { s.n_tensors = UINT64_MAX; },
      {"tensors", "bytes left"});
  add("kv_count_huge", [](Spec& s) { s.n_kv = 1ull << 62; }, {"metadata entries", "bytes left"});
  add("kv_count_over_limit", [](Spec& s) { s.limits.max_kv = 2; },
      {"metadata count 5", "exceeds limit"});
  add("tensor_count_over_limit", [](Spec& s) { s.limits.max_tensors = 1; },
      {"tensor count 4", "exceeds limit"});
  add("kv_count_one_too_many",
      [](Spec& s) {
        s.n_kv = 6;
        s.tensors.clear();
        s.data_bytes = 0;
        s.alignment = 1;
      },
      {"truncated reading metadata key"});

  // Metadata keys and values.
  add("key_length_past_end", [](Spec& s) { s.kvs[kArch] = Bytes().u64(1ull << 40); },
      {"metadata key length 1099511627776", "past end"});
  add("key_over_limit", [](Spec& s) { s.kvs[kArch] = kv_str(std::string(70000, 'k'), "x"); },
      {"metadata key length 70000", "exceeds limit"});
  add("empty_key", [](Spec& s) { s.kvs[kBlocks] = kv_u32("", 2); },
      {"metadata entry 1", "empty key"});
  add("duplicate_key", [](Spec& s) { s.kvs[kFlag] = kv_u32("llama.block_count", 3); },
      {"duplicate metadata key 'llama.block_count'"});
  add("duplicate_key_newline",
      [](Spec& s) {
        s.kvs[kBlocks] = kv_u32("a\nb", 1);
        s.kvs[kFlag] = kv_u32("a\nb", 2);
      },
      {"duplicate metadata key 'a\\x0ab'"});
  add("value_type_unknown",
      [](Spec& s) { s.kvs[kBlocks] = kv("llama.block_count", 13, Bytes().u32(2)); },
      {"'llama.block_count'", "unknown value type 13"});
  add("value_type_max",
      [](Spec& s) { s.kvs[kBlocks] = kv("llama.block_count", 0xFFFFFFFF, Bytes()); },
      {"unknown value type 4294967295"});
  add("string_value_past_end",
      [](Spec& s) {
        s.kvs[kArch] = kv("general.architecture", ty(GgufType::kString), Bytes().u64(1ull << 50));
      },
      {"string value length 1125899906842624", "past end"});
  add("string_value_over_limit", [](Spec& s) { s.limits.max_string_bytes = 4; },
      {"string value length 5", "exceeds limit"});
  add("bool_not_0_or_1",
      [](Spec& s) { s.kvs[kFlag] = kv("x.flag", ty(GgufType::kBool), Bytes().u8(2)); },
      {"bool value 2 is not 0 or 1"});
  add("truncated_in_value",
      [](Spec& s) {
        s.kvs = {kv("x", ty(GgufType::kUint32), Bytes().u8(1).u8(2))};
        s.tensors.clear();
        s.data_bytes = 0;
        s.alignment = 1;
      },
      {"truncated reading uint32 value", "need 4 bytes, 2 left"});

  // Arrays.
  add("array_length_huge",
      [](Spec& s) {
        s.kvs[kTokens] = kv("tokenizer.ggml.tokens", ty(GgufType::kArray),
                            arr(ty(GgufType::kUint8), 1ull << 40));
      },
      {"array of 1099511627776 uint8", "past end"});
  add("array_length_mul_overflow",
      [](Spec& s) {
        s.kvs[kTokens] = kv("t", ty(GgufType::kArray), arr(ty(GgufType::kUint64), 1ull << 61));
      },
      {"uint64 elements", "past end"});
  add("array_of_arrays_huge",
      [](Spec& s) {
        s.kvs[kTokens] = kv("t", ty(GgufType::kArray), arr(ty(GgufType::kArray), 1ull << 40));
      },
      {"array elements", "past end"});
  add("array_of_strings_huge",
      [](Spec& s) {
        s.kvs[kTokens] = kv("t", ty(GgufType::kArray), arr(ty(GgufType::kString), 1ull << 30));
      },
      {"string elements", "past end"});
  add("array_over_limit", [](Spec& s) { s.limits.max_array_items = 1; },
      {"array length 2 exceeds limit 1"});
  add("array_elem_type_unknown",
      [](Spec& s) { s.kvs[kTokens] = kv("t", ty(GgufType::kArray), arr(13, 1, Bytes().u32(0))); },
      {"unknown array element type 13"});
  add("array_string_past_end",
      [](Spec& s) {
        s.kvs[kTokens] = kv("t", ty(GgufType::kArray),
                            arr(ty(GgufType::kString), 2, Bytes().str("ok").u64(1ull << 33)));
      },
      {"array string length 8589934592", "past end"});
  add("array_string_over_limit",
      [](Spec& s) {
        s.limits.max_string_bytes = 1;  // "llama" fails first unless replaced
        s.kvs[kArch] = kv_u32("general.n", 1);
      },
      {"array string length 2", "exceeds limit 1"});
  add("array_nested_too_deep",
      [](Spec& s) {
        Bytes v = arr(ty(GgufType::kUint8), 0);
        for (int i = 0; i < 5; ++i) v = arr(ty(GgufType::kArray), 1, v);
        s.kvs[kTokens] = kv("t", ty(GgufType::kArray), v);
      },
      {"arrays nested deeper than 4"});
  add("array_bool_not_0_or_1",
      [](Spec& s) {
        s.kvs[kTokens] =
            kv("t", ty(GgufType::kArray), arr(ty(GgufType::kBool), 3, Bytes().u8(0).u8(1).u8(7)));
      },
      {"bool value 7"});

  // general.alignment.
  add("alignment_0", [](Spec& s) { s.kvs.push_back(kv_u32("general.alignment", 0)); },
      {"general.alignment 0", "power of two"});
  add("alignment_3", [](Spec& s) { s.kvs.push_back(kv_u32("general.alignment", 3)); },
      {"general.alignment 3", "power of two"});
  add("alignment_uint64",
      [](Spec& s) {
        s.kvs.push_back(kv("general.alignment", ty(GgufType::kUint64), Bytes().u64(32)));
      },
      {"general.alignment has type uint64", "expected uint32"});
  add("alignment_string", [](Spec& s) { s.kvs.push_back(kv_str("general.alignment", "32")); },
      {"general.alignment has type string"});
  add("alignment_huge_data_past_end",
      [](Spec& s) {
        s.kvs.push_back(kv_u32("general.alignment", 1u << 31));
        s.tensors.resize(1);  // only offset 0 is a multiple of 2^31
      },
      {"truncated", "data section would start at byte 2147483648"});

  // Tensor infos.
  add("tensor_name_past_end", [](Spec& s) { s.tensors[kBlkQ] = Bytes().u64(1ull << 40); },
      {"tensor name length 1099511627776", "past end"});
  add("tensor_name_over_limit",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo(std::string(70000, 't'), {32, 2}, ty(DType::kQ4_0), 64);
      },
      {"tensor name length 70000", "exceeds limit"});
  add("tensor_name_empty",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo("", {32, 2}, ty(DType::kQ4_0), 64);
      },
      {"tensor 1 has an empty name"});
  add("n_dims_0", [](Spec& s) { s.tensors[kBlkQ] = tinfo("blk.q", {}, ty(DType::kQ4_0), 64); },
      {"'blk.q' has 0 dimensions", "expected 1..4"});
  add("n_dims_5",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo("blk.q", {32, 1, 1, 1, 2}, ty(DType::kQ4_0), 64);
      },
      {"'blk.q' has 5 dimensions"});
  add("n_dims_huge", [](Spec& s) { s.tensors[kOut] = Bytes().str("out").u32(0xFFFFFFFF); },
      {"'out' has 4294967295 dimensions"});
  for (uint32_t t : {4u, 5u, 16u, 99u, 1000u}) {
    add("tensor_type_" + std::to_string(t),
        [t](Spec& s) { s.tensors[kBlkK] = tinfo("blk.k", {32}, t, 128); },
        {"'blk.k'", "unsupported type " + std::to_string(t)});
  }
  add("row_not_block_multiple_q4_0",
      [](Spec& s) { s.tensors[kBlkQ] = tinfo("blk.q", {48}, ty(DType::kQ4_0), 64); },
      {"row of 48 elements", "Q4_0 block size 32"});
  add("row_not_block_multiple_q4_k",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo("blk.q", {128, 2}, ty(DType::kQ4_K), 64);
      },
      {"row of 128", "Q4_K block size 256"});
  add("dims_product_overflow",
      [=](Spec& s) {
        s.tensors[kTokEmbd] = tinfo("tok_embd", {k2_32, k2_32}, ty(DType::kF32), 0);
      },
      {"'tok_embd'", "element count overflows", "dimension 1"});
  add("dims_product_over_int64_max",
      [=](Spec& s) {
        s.tensors[kTokEmbd] = tinfo("tok_embd", {1ull << 31, k2_32}, ty(DType::kF32), 0);
      },
      {"element count overflows"});
  add("dim_over_int64_max",
      [](Spec& s) {
        s.tensors[kTokEmbd] = tinfo("tok_embd", {(1ull << 63) + 1}, ty(DType::kI8), 0);
      },
      {"element count overflows", "dimension 0 = 9223372036854775809"});
  add("byte_size_overflow",
      [](Spec& s) { s.tensors[kTokEmbd] = tinfo("tok_embd", {1ull << 62}, ty(DType::kF64), 0); },
      {"'tok_embd'", "byte size overflows"});
  add("tensor_info_truncated",
      [](Spec& s) {
        s.tensors.resize(kOut);
        s.tensors.push_back(Bytes().str("out").u32(1).u64(16));  // type and offset missing
        s.alignment = 1;
        s.data_bytes = 0;
      },
      {"truncated reading tensor type"});
  add("tensor_count_one_too_many",
      [](Spec& s) {
        s.n_tensors = 5;
        s.data_bytes = 0;
        s.alignment = 1;
      },
      {"truncated reading tensor name"});
  add("tensor_count_one_too_many_padded", [](Spec& s) { s.n_tensors = 5; },
      {"tensor 4 has an empty name"});  // the zero padding reads as an empty name

  // Tensor data placement.
  add("offset_misaligned",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo("blk.q", {32, 2}, ty(DType::kQ4_0), 65);
      },
      {"'blk.q'", "offset 65", "alignment 32"});
  add("tensor_data_past_end",
      [](Spec& s) { s.tensors[kOut] = tinfo("out", {16}, ty(DType::kF16), 224); },
      {"'out' data [224, +32)", "outside the data section of 224 bytes"});
  add("tensor_data_partly_past_end", [](Spec& s) { s.data_bytes = 200; },
      {"'out'", "outside the data section of 200 bytes"});
  add("tensor_offset_wraps",
      [](Spec& s) { s.tensors[kOut] = tinfo("out", {16}, ty(DType::kF16), UINT64_MAX - 31); },
      {"'out'", "outside the data section"});
  add("tensors_overlap",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo("blk.q", {32, 2}, ty(DType::kQ4_0), 32);
      },
      {"overlaps tensor 'tok_embd' [0, 64)"});
  add("tensors_same_offset",
      [](Spec& s) { s.tensors[kOut] = tinfo("out", {16}, ty(DType::kF16), 128); }, {"overlaps"});
  add("overlap_hidden_by_empty_tensor",
      [](Spec& s) {
        // tok_embd [0,64) holds an empty tensor at 16 and blk.q at 48: neighbours after sorting
        // are (tok_embd, empty) and (empty, blk.q), neither of which is a non-empty pair.
        s.kvs.push_back(kv_u32("general.alignment", 16));
        s.alignment = 16;
        s.tensors[kBlkQ] = tinfo("blk.q", {32, 2}, ty(DType::kQ4_0), 48);
        s.tensors.push_back(tinfo("empty", {0}, ty(DType::kF32), 16));
      },
      {"'blk.q'", "overlaps tensor 'tok_embd'"});
  add("duplicate_tensor_name",
      [](Spec& s) { s.tensors[kBlkK] = tinfo("blk.q", {32}, ty(DType::kQ8_0), 128); },
      {"duplicate tensor name 'blk.q'"});
  add("tensor_name_control_bytes",
      [](Spec& s) {
        s.tensors[kBlkQ] = tinfo(std::string("x\n\r\0y", 5), {48}, ty(DType::kQ4_0), 64);
      },
      {"'x\\x0a\\x0d\\x00y'"});
  add("truncated_in_header_padding",
      [](Spec& s) {
        size_t full = build(s).size();
        s.truncate_to = full - s.data_bytes - 1;
      },
      {"file truncated: data section would start at byte"});
  add("truncated_at_data_section", [](Spec& s) { s.data_bytes = 0; },
      {"'tok_embd' data [0, +64)", "outside the data section of 0 bytes"});
  return c;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> c = cases();
  return c;
}

class GgufMalformed : public ::testing::TestWithParam<size_t> {};

TEST_P(GgufMalformed, FailsWithOneLineMessage) {
  const Case& k = all_cases()[GetParam()];
  Spec s = k.make();
  std::vector<uint8_t> bytes = build(s);
  const std::string name = case_name(k.name);
  auto t0 = std::chrono::steady_clock::now();
  auto r = parse_exact(bytes.data(), bytes.size(), name, s.limits);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.is_ok()) << k.name << " parsed";
  expect_one_line_error(r.status(), name);
  for (const auto& e : k.expect)
    EXPECT_NE(r.status().message().find(e), std::string::npos)
        << "expected \"" << e << "\" in: " << r.status().message();
  EXPECT_LT(ms, 1000.0) << "slow failure: " << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(Cases, GgufMalformed, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return all_cases()[i.param].name;
                         });

TEST(GgufMalformedBase, BaseLayoutParses) {
  Spec s = base();
  std::vector<uint8_t> bytes = build(s);
  auto r = parse_exact(bytes.data(), bytes.size(), "base.gguf");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.file().tensors().size(), 4u);
  EXPECT_EQ(r.file().metadata().size(), 5u);
}

TEST(GgufMalformedBase, CaseCount) { EXPECT_GE(all_cases().size(), 30u); }

// A claimed 2^40-element uint8 array (and 2^30 strings) must fail on the bytes-left check, even
// with the item limit lifted, without first allocating for the claimed count.
TEST(GgufMalformedBase, HugeArrayFailsBeforeAllocating) {
  GgufLimits lim;
  lim.max_array_items = UINT64_MAX;
  lim.max_string_bytes = UINT64_MAX;
  for (uint32_t et : {ty(GgufType::kUint8), ty(GgufType::kString), ty(GgufType::kArray)}) {
    Spec s = base();
    s.kvs[kTokens] = kv("t", ty(GgufType::kArray), arr(et, 1ull << 40));
    std::vector<uint8_t> bytes = build(s);
    auto t0 = std::chrono::steady_clock::now();
    auto r = parse_exact(bytes.data(), bytes.size(), "huge.gguf", lim);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("past end"), std::string::npos) << r.status().message();
    EXPECT_LT(ms, 100.0);
  }
}

// Found by fuzz_gguf: as_int() on a float64 value of -7.6e38 cast it straight to int64 (UB).
// Float values from a file must saturate (NaN reads as 0).
TEST(GgufMalformedBase, FloatAsIntSaturates) {
  Spec s = base();
  s.kvs = {kv("f.neg", ty(GgufType::kFloat64), Bytes().f64(-7.65635e38)),
           kv("f.neg32", ty(GgufType::kFloat32), Bytes().f32(-3.0e38f)),
           kv("f.pos", ty(GgufType::kFloat64), Bytes().u64(0x7ff0000000000000ull)),  // +inf
           kv("f.nan", ty(GgufType::kFloat32), Bytes().u32(0x7fc00000)),
           kv("f.big", ty(GgufType::kFloat64), Bytes().u64(0x43e0000000000000ull)),  // 2^63
           kv("f.ok", ty(GgufType::kFloat32), Bytes().f32(-2.75f))};
  std::vector<uint8_t> bytes = build(s);
  auto r = parse_exact(bytes.data(), bytes.size(), "floats.gguf");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GgufFile& g = r.file();
  EXPECT_EQ(g.find("f.neg")->as_int(), INT64_MIN);
  EXPECT_EQ(g.find("f.neg32")->as_int(), INT64_MIN);
  EXPECT_EQ(g.find("f.pos")->as_int(), INT64_MAX);
  EXPECT_EQ(g.find("f.nan")->as_int(), 0);
  EXPECT_EQ(g.find("f.big")->as_int(), INT64_MAX);
  EXPECT_EQ(g.find("f.ok")->as_int(), -2);
  for (const auto& [k, v] : g.metadata()) EXPECT_FALSE(v.to_display().empty()) << k;
}

// ---- truncations and mutations of a GgufWriter file ----

// A small valid file: metadata of several types incl. arrays (strings, floats, nested), and four
// tensors (Q4_0, Q8_0, F16, F32). The last tensor is 32 bytes, so the file ends exactly at the
// end of its data: every proper prefix is then a truncated file.
std::vector<uint8_t> writer_file() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("general.name", GgufValue::str("tiny"));
  w.set("llama.block_count", GgufValue::u32(1));
  w.set("llama.context_length", GgufValue::u64(4096));
  w.set("llama.attention.head_count", GgufValue::i32(4));
  w.set("llama.rope.freq_base", GgufValue::f32(10000.f));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  GgufArray toks;
  toks.elem_type = GgufType::kString;
  toks.strings = {"<s>", "</s>", "a", "\xe4\xb8\xad"};
  w.set("tokenizer.ggml.tokens", GgufValue::array(toks));
  GgufArray scores;
  scores.elem_type = GgufType::kFloat32;
  scores.floats = {0.f, -1.f, -2.5f, -3.f};
  w.set("tokenizer.ggml.scores", GgufValue::array(scores));
  GgufArray types;
  types.elem_type = GgufType::kInt32;
  types.ints = {3, 3, 1, 1};
  w.set("tokenizer.ggml.token_type", GgufValue::array(types));
  GgufArray inner;
  inner.elem_type = GgufType::kUint8;
  inner.ints = {1, 2};
  GgufArray outer;
  outer.elem_type = GgufType::kArray;
  outer.arrays = {GgufValue::array(inner), GgufValue::array(inner)};
  w.set("x.nested", GgufValue::array(outer));
  EXPECT_TRUE(w.add_tensor("blk.0.attn_q.weight", DType::kQ4_0, {32, 2}).is_ok());
  EXPECT_TRUE(w.add_tensor("blk.0.attn_k.weight", DType::kQ8_0, {32, 1}).is_ok());
  EXPECT_TRUE(w.add_tensor("blk.0.attn_norm.weight", DType::kF16, {8}).is_ok());
  EXPECT_TRUE(w.add_tensor("output.weight", DType::kF32, {8}).is_ok());
  std::string path = "/tmp/duet_gguf_malformed_" + std::to_string(getpid()) + ".gguf";
  EXPECT_TRUE(w.open(path).is_ok());
  for (size_t i = 0; i < w.n_tensors(); ++i) {
    std::vector<uint8_t> d(w.tensor(i).n_bytes);
    for (size_t j = 0; j < d.size(); ++j) d[j] = static_cast<uint8_t>(j * 13 + i);
    EXPECT_TRUE(w.write_tensor(i, d.data(), d.size()).is_ok());
  }
  EXPECT_TRUE(w.finish().is_ok());
  std::vector<uint8_t> bytes = read_all(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(GgufMalformedWriterFile, EveryTruncationFailsCleanly) {
  std::vector<uint8_t> full = writer_file();
  ASSERT_GT(full.size(), 200u);
  auto ok = parse_exact(full.data(), full.size(), "full.gguf");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  ASSERT_EQ(ok.file().tensors().size(), 4u);
  const auto& last = ok.file().tensors().back();
  ASSERT_EQ(ok.file().data_offset() + last.offset + last.n_bytes, full.size())
      << "file has trailing padding";
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parse_exact(full.data(), n, "prefix.gguf");
    ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " of " << full.size() << " bytes parsed";
    expect_one_line_error(r.status(), "prefix.gguf");
    if (::testing::Test::HasFailure()) FAIL() << "at prefix " << n << ": " << r.status().message();
  }
}

// Touches what a successful parse exposes, so that sanitizers see any bad pointer or value.
void exercise(const GgufFile& g) {
  for (const auto& [k, v] : g.metadata()) {
    std::string d = v.to_display();
    EXPECT_FALSE(d.empty()) << k;
  }
  (void)g.get_string("general.architecture");
  (void)g.get_int("llama.block_count", 0);
  (void)g.get_float("llama.rope.freq_base", 0);
  uint64_t sum = 0;
  for (const auto& t : g.tensors())
    if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];
  volatile uint64_t sink = sum;
  (void)sink;
}

TEST(GgufMalformedWriterFile, RandomMutationsNeverCrash) {
  std::vector<uint8_t> full = writer_file();
  std::mt19937_64 rng(20240611);
  const uint8_t kInteresting[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x0d,
                                  0x1f, 0x20, 0x7f, 0x80, 0xfe, 0xff};
  int n_ok = 0, n_err = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> m = full;
    int n_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < n_edits; ++e) {
      size_t pos = rng() % m.size();
      switch (rng() % 4) {
        case 0:
          m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          m[pos] = static_cast<uint8_t>(rng());
          break;
        case 2:
          m[pos] = kInteresting[rng() % sizeof kInteresting];
          break;
        case 3:  // an 8-byte field set to an extreme value
          for (size_t k = 0; k < 8 && pos + k < m.size(); ++k)
            m[pos + k] = (rng() % 2) ? 0xff : 0x00;
          break;
      }
    }
    if (rng() % 8 == 0) m.resize(rng() % m.size());
    std::unique_ptr<uint8_t[]> copy(new uint8_t[m.size() ? m.size() : 1]);
    if (!m.empty()) std::memcpy(copy.get(), m.data(), m.size());
    auto r = GgufFile::parse(copy.get(), m.size(), "mutant.gguf");
    if (r.is_ok()) {
      ++n_ok;
      exercise(**r);
    } else {
      ++n_err;
      expect_one_line_error(r.status(), "mutant.gguf");
    }
    if (::testing::Test::HasFailure()) FAIL() << "mutant " << iter;
  }
  EXPECT_GT(n_err, 0);
  std::printf("gguf mutants: %d parsed, %d rejected\n", n_ok, n_err);
}

// Seeds and crash regressions kept by the fuzzer (tests/fuzz/corpus): never crash, and any
// failure is a one-line message.
TEST(GgufMalformedCorpus, FuzzCorpusNeverCrashes) {
  testing_malformed::replay_fuzz_corpus<GgufFile>("fuzz_gguf", GgufLimits{}, [](auto& f) { exercise(f); });
}

}  // namespace
}  // namespace duet
