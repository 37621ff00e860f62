// GGUF writer -> reader round trip, metadata types, alignment and offsets.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/convert.h"
#include "formats/gguf.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

std::string tmp_path(const char* name) { return std::string("/tmp/duet_test_") + name; }

TEST(Gguf, RoundTripMetadataAndTensors) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("llama.block_count", GgufValue::u32(2));
  w.set("x.i32", GgufValue::i32(-5));
  w.set("x.u64", GgufValue::u64(1ull << 40));
  w.set("x.f32", GgufValue::f32(0.5f));
  w.set("x.bool", GgufValue::boolean(true));
  GgufArray toks;
  toks.elem_type = GgufType::kString;
  toks.strings = {"a", "bb", "", "\xe4\xb8\xad"};
  w.set("tokenizer.ggml.tokens", GgufValue::array(toks));
  GgufArray scores;
  scores.elem_type = GgufType::kFloat32;
  scores.floats = {0.25, -1.5};
  w.set("tokenizer.ggml.scores", GgufValue::array(scores));
  ASSERT_TRUE(w.add_tensor("a", DType::kF32, {4, 3}).is_ok());
  ASSERT_TRUE(w.add_tensor("b", DType::kQ8_0, {64, 2}).is_ok());
  EXPECT_FALSE(w.add_tensor("a", DType::kF32, {4}).is_ok());   // duplicate
  EXPECT_FALSE(w.add_tensor("c", DType::kQ4_0, {48}).is_ok());  // not a block multiple
  std::string p = tmp_path("rt.gguf");
  ASSERT_TRUE(w.open(p).is_ok());
  std::vector<float> a(12);
  for (int i = 0; i < 12; ++i) a[i] = i * 0.5f;
  ASSERT_TRUE(w.write_tensor(0, a.data(), 48).is_ok());
  std::vector<float> bsrc(128);
  for (int i = 0; i < 128; ++i) bsrc[i] = (i % 7) - 3.0f;
  std::vector<uint8_t> b(2 * 2 * 34);
  quantize_row(DType::kQ8_0, bsrc.data(), b.data(), 128);
  ASSERT_TRUE(w.write_tensor(1, b.data(), b.size()).is_ok());
  ASSERT_TRUE(w.finish().is_ok());

  auto g = GgufFile::open(p);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ((*g)->version(), 3u);
  EXPECT_EQ((*g)->architecture(), "llama");
  EXPECT_EQ((*g)->find("x.i32")->as_int(), -5);
  EXPECT_EQ(static_cast<uint64_t>((*g)->find("x.u64")->as_int()), 1ull << 40);
  EXPECT_EQ((*g)->find("x.f32")->as_float(), 0.5);
  EXPECT_EQ((*g)->find("x.bool")->as_int(), 1);
  EXPECT_EQ((*g)->find("tokenizer.ggml.tokens")->as_array().strings[3], "\xe4\xb8\xad");
  EXPECT_EQ((*g)->find("tokenizer.ggml.scores")->as_array().floats[1], -1.5);
  ASSERT_EQ((*g)->tensors().size(), 2u);
  const GgufTensorInfo* ta = (*g)->find_tensor("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->n_bytes, 48u);
  EXPECT_EQ(std::vector<float>(reinterpret_cast<const float*>(ta->data), reinterpret_cast<const float*>(ta->data) + 12), a);
  const GgufTensorInfo* tb = (*g)->find_tensor("b");
  EXPECT_EQ(tb->offset % 32, 0u);
  std::vector<float> back(128);
  dequantize_row(DType::kQ8_0, tb->data, back.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(back[i], bsrc[i], 0.02f);
  EXPECT_EQ((*g)->file_size(), w.total_bytes());
  std::remove(p.c_str());
}

TEST(Gguf, GetterTypeErrors) {
  GgufWriter w;
  w.set("k.str", GgufValue::str("x"));
  std::string p = tmp_path("getter.gguf");
  ASSERT_TRUE(w.open(p).is_ok());
  ASSERT_TRUE(w.finish().is_ok());
  auto g = GgufFile::open(p);
  ASSERT_TRUE(g.is_ok());
  EXPECT_FALSE((*g)->get_int("k.str", 0).is_ok());
  EXPECT_EQ((*g)->get_int("missing", 7).value(), 7);
  std::remove(p.c_str());
}

TEST(Gguf, MissingFileIsError) {
  auto g = GgufFile::open("/nonexistent/x.gguf");
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("cannot open"), std::string::npos);
}

// A weight past F16's range fails an F16 conversion with the tensor's name and leaves no file;
// the same values convert to BF16.
TEST(Gguf, F16OutputRefusesOverflowAndLeavesNoFile) {
  TensorSourceSet src;
  SourceTensor t;
  t.name = "blk.0.ffn_down.weight";
  t.shape = {64, 8};
  t.read_rows = [](uint64_t r0, uint64_t n, float* dst) {
    for (uint64_t r = 0; r < n; ++r)
      for (int c = 0; c < 64; ++c) dst[r * 64 + c] = (r0 + r == 5 && c == 3) ? 1.0e5f : 0.5f;
  };
  src.tensors.push_back(t);
  const std::string path = ::testing::TempDir() + "/f16_overflow.gguf";
  std::remove(path.c_str());
  ConvertOptions opt;
  opt.n_threads = 2;
  opt.quiet = true;
  {
    GgufWriter w;
    Status s = write_gguf(src, w, FileType::kF16, MixModelInfo{}, path, opt);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("blk.0.ffn_down.weight"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("1 value(s) beyond F16"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // removed
  GgufWriter w;
  ASSERT_TRUE(write_gguf(src, w, FileType::kBF16, MixModelInfo{}, path, opt).is_ok());
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ((*g)->tensors().at(0).dtype, DType::kBF16);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace duet
