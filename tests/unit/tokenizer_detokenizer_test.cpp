// IncrementalDetokenizer: characters split across tokens are held, dead bytes become U+FFFD at
// once, every chunk is valid UTF-8, and the streamed text equals one-shot decode byte for byte.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace duet {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Byte tokens 0..255 plus a few multi-byte pieces that cut characters in odd places.
std::unique_ptr<Tokenizer> byte_tokenizer(std::vector<std::string> extra,
                                          TokenizerFlavor flavor = TokenizerFlavor::kHf) {
  TokenizerSpec s;
  s.pre_type = "gpt-2";
  s.flavor = flavor;
  for (int b = 0; b < 256; ++b)
    s.tokens.push_back(tok::byte_level_encode(std::string(1, static_cast<char>(b))));
  for (const std::string& e : extra) s.tokens.push_back(tok::byte_level_encode(e));
  auto t = Tokenizer::create(std::move(s));
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t.value());
}

std::string stream_all(const Tokenizer& t, const std::vector<int32_t>& ids,
                       DecodeOptions opts = {}) {
  IncrementalDetokenizer d(t, opts);
  std::string all;
  for (int32_t id : ids) {
    std::string chunk = d.push(id);
    EXPECT_TRUE(tok::utf8_is_valid(chunk));
    all += chunk;
  }
  std::string last = d.finish();
  EXPECT_TRUE(tok::utf8_is_valid(last));
  return all + last;
}

TEST(TokenizerDetokenizer, HoldsSplitCharacters) {
  auto t = byte_tokenizer({"\xE2\x82",
                           "\xAC"
                           "ab",
                           "\xF0\x9F"});
  int32_t e2_82 = 256, ac_ab = 257, f0_9f = 258;
  IncrementalDetokenizer d(*t);
  EXPECT_EQ(d.push(e2_82), "");
  EXPECT_EQ(d.n_pending_bytes(), 2u);
  EXPECT_EQ(d.push(ac_ab),
            "\xE2\x82\xAC"
            "ab");  // €ab
  EXPECT_EQ(d.push(f0_9f), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.push(e2_82), "");
  EXPECT_EQ(d.push('a'), kFffd + "a");  // the held prefix can no longer complete
  EXPECT_EQ(d.push(0xFF), kFffd);       // never valid: replaced at once
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.finish(), kFffd);  // end of sequence flushes the incomplete prefix
  EXPECT_EQ(d.n_pending_bytes(), 0u);
}

TEST(TokenizerDetokenizer, StreamEqualsDecodeOnRandomIds) {
  auto t = byte_tokenizer(
      {"\xE2\x82", "\xAC", "\xC3", "\xA9\xC3", "\xF0\x9F\x98", "\x80\xF0", "\xED\xA0", "ok \xE4"});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<int32_t> ids;
    size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i) {
      // Bias towards bytes >= 0x80 and the extra pieces.
      uint32_t k = rng() % 4;
      ids.push_back(k == 0   ? static_cast<int32_t>(rng() % 128)
                    : k == 1 ? static_cast<int32_t>(256 + rng() % 8)
                             : static_cast<int32_t>(128 + rng() % 128));
    }
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) t->append_token_bytes(ids[i], i, {}, &bytes);
    std::string want = tok::utf8_lossy(bytes);
    ASSERT_EQ(t->decode(ids), want);
    ASSERT_EQ(stream_all(*t, ids), want) << trial;
  }
}

TEST(TokenizerDetokenizer, SkipSpecialAndReset) {
  TokenizerSpec s;
  s.pre_type = "gpt-2";
  for (int b = 0; b < 256; ++b)
    s.tokens.push_back(tok::byte_level_encode(std::string(1, static_cast<char>(b))));
  AddedToken eos;
  eos.id = 256;
  eos.content = "<|end|>";
  eos.special = true;
  s.tokens.push_back(eos.content);
  s.added_tokens.push_back(eos);
  auto t = std::move(Tokenizer::create(std::move(s)).value());
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(stream_all(*t, {'h', 'i', 256}), "hi<|end|>");
  EXPECT_EQ(stream_all(*t, {'h', 'i', 256}, skip), "hi");
  IncrementalDetokenizer d(*t);
  d.push(0xE2);
  d.reset();
  EXPECT_EQ(d.push('x'), "x");
  EXPECT_EQ(d.push(999999), "");  // out-of-range ids contribute nothing, as in decode()
}

TEST(TokenizerDetokenizer, RealTokenizersStreamExactly) {
  const char* names[] = {"qwen3", "llama3", "deepseek_v3"};
  const std::string text =
      "Stream \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 and "
      "\xE4\xB8\xAD\xE6\x96\x87 "
      "with e\xCC\x81 \xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80 "
      "\xF4\x8F\xBF\xBF!";
  int found = 0;
  for (const char* name : names) {
    std::string path = std::string(DUET_SHARED_DIR) + "/tokenizers/" + name + "/tokenizer.json";
    if (!std::ifstream(path).good()) continue;
    ++found;
    auto spec = tokenizer_spec_from_hf_json(path);
    ASSERT_TRUE(spec.is_ok()) << spec.status().message();
    auto t = std::move(Tokenizer::create(std::move(spec.value())).value());
    std::vector<int32_t> ids = t->encode(text);
    EXPECT_EQ(stream_all(*t, ids), t->decode(ids)) << name;
    // Random ids split multi-byte characters everywhere.
    std::mt19937 rng(3);
    for (int k = 0; k < 300; ++k) {
      std::vector<int32_t> r;
      for (int i = 0; i < 8; ++i) r.push_back(static_cast<int32_t>(rng() % t->vocab_size()));
      ASSERT_EQ(stream_all(*t, r), t->decode(r)) << name;
    }
  }
  if (!found) GTEST_FAIL() << "no tokenizer.json under " << DUET_SHARED_DIR;
}

}  // namespace
}  // namespace duet
