// GGUF writer -> reader round trip, metadata types, alignment and offsets.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace duet
