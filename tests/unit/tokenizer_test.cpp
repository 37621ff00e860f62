// Tokenizer on synthetic specs (BPE merge order against a naive reference, ignore_merges,
// missing bytes, added-token splitting in HF and llama.cpp styles, SPM merges by score with byte
// fallback, JSON loader errors) and on the real tokenizer files when they are present.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "malformed_input.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace duet {
namespace {

std::string bl(std::string_view raw) { return tok::byte_level_encode(raw); }

// 256 byte tokens (id = byte), then `extra` merge results in order.
TokenizerSpec byte_level_spec(const std::vector<std::pair<std::string, std::string>>& merges) {
  TokenizerSpec s;
  s.pre_type = "gpt-2";
  for (int b = 0; b < 256; ++b) s.tokens.push_back(bl(std::string(1, static_cast<char>(b))));
  for (const auto& [a, b] : merges) {
    s.merges.emplace_back(bl(a), bl(b));
    std::string m = bl(a + b);
    if (std::find(s.tokens.begin(), s.tokens.end(), m) == s.tokens.end()) s.tokens.push_back(m);
  }
  return s;
}

std::unique_ptr<Tokenizer> make(TokenizerSpec spec) {
  auto t = Tokenizer::create(std::move(spec));
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t.value());
}

std::vector<std::string> texts(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.decode({id}));
  return out;
}

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
  auto t = make(byte_level_spec(
      {{"a", "a"}, {"aa", "a"}, {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}));
  EXPECT_EQ(texts(*t, t->encode("aaa")), (std::vector<std::string>{"aaa"}));
  // a a a a: (a,a) has rank 0, so both pairs merge before (aa,a) can: not "aaa" + "a".
  EXPECT_EQ(texts(*t, t->encode("aaaa")), (std::vector<std::string>{"aa", "aa"}));
  EXPECT_EQ(texts(*t, t->encode("hello")), (std::vector<std::string>{"hello"}));
  EXPECT_EQ(texts(*t, t->encode("hello hell")), (std::vector<std::string>{"hello", " ", "hell"}));
}

// Textbook BPE: repeatedly merge the lowest-ranked adjacent pair, leftmost first.
std::vector<std::string> naive_bpe(const std::string& word,
                                   const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  while (true) {
    size_t best_rank = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      for (size_t r = 0; r < merges.size() && r < best_rank; ++r) {
        if (merges[r].first == sym[i] && merges[r].second == sym[i + 1]) {
          best_rank = r;
          at = i;
          break;
        }
      }
    }
    if (best_rank == SIZE_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + at + 1);
  }
  return sym;
}

TEST(TokenizerBpe, MatchesNaiveBpeOnRandomWords) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    // Random merges over the alphabet {a, b, c}: build pieces from existing ones.
    std::vector<std::string> pieces = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    for (int k = 0; k < 40; ++k) {
      std::string x = pieces[rng() % pieces.size()], y = pieces[rng() % pieces.size()];
      if (x.size() + y.size() > 8) continue;
      bool dup = false;
      for (auto& m : merges) dup |= (m.first == x && m.second == y);
      if (dup) continue;
      merges.emplace_back(x, y);
      if (std::find(pieces.begin(), pieces.end(), x + y) == pieces.end()) pieces.push_back(x + y);
    }
    auto t = make(byte_level_spec(merges));
    for (int w = 0; w < 50; ++w) {
      size_t len = 1 + rng() % (w < 25 ? 20 : 300);  // long words take the heap path
      std::string word;
      for (size_t i = 0; i < len; ++i) word += "abc"[rng() % 3];
      EXPECT_EQ(texts(*t, t->encode(word)), naive_bpe(word, merges)) << word;
    }
  }
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWords) {
  auto spec = byte_level_spec({{"a", "b"}, {"b", "c"}});
  spec.tokens.push_back(bl("abc"));  // reachable only as a whole word
  spec.ignore_merges = true;
  auto t = make(spec);
  EXPECT_EQ(texts(*t, t->encode("abc")), (std::vector<std::string>{"abc"}));
  spec = byte_level_spec({{"a", "b"}, {"b", "c"}});
  spec.tokens.push_back(bl("abc"));
  auto t2 = make(spec);
  EXPECT_EQ(texts(*t2, t2->encode("abc")), (std::vector<std::string>{"ab", "c"}));
}

TEST(TokenizerBpe, MissingByteIsDroppedAndBlocksMerges) {
  auto spec = byte_level_spec({{"a", "c"}});
  spec.flavor = TokenizerFlavor::kLlamaCpp;
  spec.tokens['b'] = "[missing]";  // as SmolLM2, whose vocabulary lacks byte 0x1d
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  auto t = make(spec);
  EXPECT_EQ(texts(*t, t->encode("abc")), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(texts(*t, t->encode("ac")), (std::vector<std::string>{"ac"}));
}

TEST(TokenizerAddedTokens, HfLeftmostLongestAndFlags) {
  auto spec = byte_level_spec({});
  auto add = [&](std::string content, bool special, bool lstrip = false, bool rstrip = false) {
    AddedToken a;
    a.id = static_cast<int32_t>(spec.tokens.size());
    a.content = content;
    a.special = special;
    a.lstrip = lstrip;
    a.rstrip = rstrip;
    spec.tokens.push_back(content);
    spec.added_tokens.push_back(a);
    return a.id;
  };
  int32_t s1 = add("<|a|>", true);
  int32_t s2 = add("<|a|>x", true);
  int32_t n1 = add("<b>", false);
  int32_t ls = add("<l>", true, true, false);
  int32_t rs = add("<r>", true, false, true);
  auto t = make(spec);
  EXPECT_EQ(t->encode("<|a|>x<|a|>"), (std::vector<int32_t>{s2, s1}));
  // lstrip swallows the spaces on its left, rstrip those on its right.
  auto ids = t->encode("q  <l>  <r>  q");
  std::vector<std::string> parts = texts(*t, ids);
  EXPECT_EQ(parts, (std::vector<std::string>{"q", "<l>", " ", " ", "<r>", "q"}));
  EXPECT_EQ(ids[1], ls);
  EXPECT_EQ(ids[4], rs);
  // With special parsing off, special tokens are text but non-special added tokens still split.
  EncodeOptions off;
  off.parse_special = false;
  ids = t->encode("<|a|><b>", off);
  EXPECT_EQ(ids.back(), n1);
  EXPECT_EQ(t->decode(ids), "<|a|><b>");
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_EQ(t->encode("<r>", off).size(), 3u);
}

TEST(TokenizerAddedTokens, LlamaCppLongestTokenFirst) {
  auto spec = byte_level_spec({});
  spec.flavor = TokenizerFlavor::kLlamaCpp;
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  int32_t ab = static_cast<int32_t>(spec.tokens.size());
  spec.tokens.push_back("ab");
  spec.token_types.push_back(TokenType::kControl);
  int32_t bcd = ab + 1;
  spec.tokens.push_back("bcd");
  spec.token_types.push_back(TokenType::kUserDefined);
  auto t = make(spec);
  // llama.cpp: "bcd" (longer) claims first, leaving "a"; HF would take "ab" leftmost.
  EXPECT_EQ(t->encode("abcd"), (std::vector<int32_t>{'a', bcd}));
  EncodeOptions off;
  off.parse_special = false;
  EXPECT_EQ(t->encode("abab", off), (std::vector<int32_t>{'a', 'b', 'a', 'b'}));  // control: text
  EXPECT_EQ(t->encode("xbcd", off), (std::vector<int32_t>{'x', bcd}));  // user-defined: still split
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(t->decode({ab, 'x'}), "abx");
  EXPECT_EQ(t->decode({ab, 'x'}, skip), "x");
}

TEST(TokenizerSpm, MergesByScoreWithByteFallback) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSpm;
  spec.flavor = TokenizerFlavor::kLlamaCpp;
  auto add = [&](const std::string& text, float score, TokenType type = TokenType::kNormal) {
    spec.tokens.push_back(text);
    spec.scores.push_back(score);
    spec.token_types.push_back(type);
    return static_cast<int32_t>(spec.tokens.size() - 1);
  };
  add("<unk>", 0, TokenType::kUnknown);
  int32_t bos = add("<s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, 0, TokenType::kByte);
  }
  const std::string sp = "\xE2\x96\x81";
  int32_t a = add("a", -1), b = add("b", -1), c = add("c", -1), sp_tok = add(sp, -1);
  int32_t ab = add("ab", -5), bc = add("bc", -2), abc = add("abc", -3), sp_a = add(sp + "a", -4);
  spec.bos_id = bos;
  spec.unk_id = 0;
  spec.add_bos = true;
  spec.add_space_prefix = true;
  auto t = make(spec);
  // " abc" -> ▁ a b c: "bc" (-2) beats "▁a" (-4) and "ab" (-5), then "a"+"bc" = "abc" (-3).
  EXPECT_EQ(t->encode("abc"), (std::vector<int32_t>{sp_tok, abc}));
  EncodeOptions with_bos;
  with_bos.add_special = true;
  EXPECT_EQ(t->encode("abc", with_bos), (std::vector<int32_t>{bos, sp_tok, abc}));
  // Without a "c", "▁a" (-4) beats "ab" (-5).
  EXPECT_EQ(t->encode("ab"), (std::vector<int32_t>{sp_a, b}));
  // 'é' has no token: its two UTF-8 bytes become <0xC3> <0xA9>.
  auto ids = t->encode("\xC3\xA9");
  EXPECT_EQ(ids, (std::vector<int32_t>{sp_tok, 2 + 0xC3, 2 + 0xA9}));
  EXPECT_EQ(t->decode(ids), "\xC3\xA9");  // leading space of the first token is removed
  (void)a, (void)c, (void)ab, (void)bc;
}

TEST(TokenizerHfJson, RejectsBadInput) {
  EXPECT_EQ(tokenizer_spec_from_hf_json_text("{not json", "").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer_spec_from_hf_json_text(R"({"model": {"type": "Unigram", "vocab": []}})", "")
                .status()
                .code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(tokenizer_spec_from_hf_json_text(
                R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}})", "")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(tokenizer_spec_from_hf_json("/nonexistent/tokenizer.json").is_ok());
  // Strings of the file quoted in a message keep it one line (found by fuzz_tokenizer_json).
  auto merge = tokenizer_spec_from_hf_json_text(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a\nb\u001b[2J"]}})", "");
  ASSERT_FALSE(merge.is_ok());
  EXPECT_EQ(merge.status().message().find('\n'), std::string::npos) << merge.status().message();
  EXPECT_NE(merge.status().message().find("a\\x0ab\\x1b[2J"), std::string::npos) << merge.status().message();
}

// The fuzzer's seeds and crash regressions (tests/fuzz/corpus/fuzz_tokenizer_json, .../regression):
// loading never crashes, every failure is one line, a tokenizer that loads encodes to valid ids.
TEST(TokenizerRobustness, FuzzCorpusNeverCrashes) {
  namespace fs = std::filesystem;
  const fs::path src(DUET_SOURCE_DIR);
  int n = 0, loaded = 0;
  for (const fs::path& d : {src / "tests/fuzz/corpus/fuzz_tokenizer_json", src / "tests/fuzz/corpus/regression"}) {
    ASSERT_TRUE(fs::is_directory(d)) << d;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      const std::vector<uint8_t> bytes = testing_malformed::read_all(e.path().string());
      auto spec = tokenizer_spec_from_hf_json_text(std::string(bytes.begin(), bytes.end()), "");
      ++n;
      if (!spec.is_ok()) {
        EXPECT_FALSE(spec.status().message().empty()) << e.path();
        EXPECT_EQ(spec.status().message().find('\n'), std::string::npos) << e.path();
        continue;
      }
      auto t = Tokenizer::create(std::move(spec.value()));
      if (!t.is_ok()) continue;
      ++loaded;
      for (int32_t id : t.value()->encode("Hello, world! caf\xc3\xa9 <|im_end|>")) EXPECT_TRUE(t.value()->valid_id(id));
    }
  }
  EXPECT_GT(n, 2);
  EXPECT_GE(loaded, 2);  // the seeds load
}

TEST(TokenizerHfJson, ParsesConfigAndTemplate) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    if (b) vocab += ",";
    std::string k = bl(std::string(1, static_cast<char>(b)));
    if (k == "\"" || k == "\\") k = "\\" + k;
    vocab += "\"" + k + "\":" + std::to_string(b);
  }
  vocab += "}";
  std::string j = R"({"added_tokens":[{"id":256,"content":"<s>","special":true}],
    "normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]},
    "decoder":{"type":"ByteLevel"},"model":{"type":"BPE","merges":[],"vocab":)" +
                  vocab + "}}";
  auto spec = tokenizer_spec_from_hf_json_text(
      j, R"({"chat_template":"{{ x }}","eos_token":{"content":"<s>"}})");
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  EXPECT_EQ(spec->bos_id, 256);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->eos_id, 256);
  EXPECT_EQ(spec->chat_template, "{{ x }}");
  EXPECT_EQ(spec->pre_type, "gpt-2");
  auto t = make(std::move(spec.value()));
  EncodeOptions o;
  o.add_special = true;
  EXPECT_EQ(t->encode("hi", o), (std::vector<int32_t>{256, 'h', 'i'}));
}

TEST(TokenizerRobustness, ArbitraryBytesRoundTripLossy) {
  auto t = make(byte_level_spec({{"a", "b"}, {"\xC3", "\xA9"}}));
  std::mt19937 rng(11);
  for (int k = 0; k < 3000; ++k) {
    std::string s;
    size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i)
      s.push_back(static_cast<char>(rng() % 4 ? 0x80 + rng() % 128 : rng() % 128));
    std::vector<int32_t> ids = t->encode(s);
    EXPECT_EQ(t->decode(ids), tok::utf8_lossy(s));
  }
}

TEST(TokenizerRobustness, MalformedJsonNeverCrashes) {
  const std::string good = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},
    "added_tokens":[{"id":3,"content":"<s>","special":true}],
    "pre_tokenizer":{"type":"ByteLevel","use_regex":true},"decoder":{"type":"ByteLevel"}})";
  ASSERT_TRUE(tokenizer_spec_from_hf_json_text(good, "").is_ok());
  std::mt19937 rng(5);
  for (int k = 0; k < 3000; ++k) {
    std::string s = good;
    if (k % 3 == 0) s.resize(1 + rng() % (s.size() - 1));
    for (int m = 0; m < 3; ++m) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto spec = tokenizer_spec_from_hf_json_text(s, k % 5 == 0 ? s : "");
    if (spec.is_ok() && !spec->tokens.empty()) (void)Tokenizer::create(std::move(spec.value()));
  }
}

// ---- Real tokenizer files (skipped when absent).

std::string shared_dir() { return DUET_SHARED_DIR; }

std::unique_ptr<Tokenizer> load_hf(const std::string& name) {
  std::string path = shared_dir() + "/tokenizers/" + name + "/tokenizer.json";
  if (!std::ifstream(path).good()) return nullptr;
  auto spec = tokenizer_spec_from_hf_json(path);
  EXPECT_TRUE(spec.is_ok()) << spec.status().message();
  if (!spec.is_ok()) return nullptr;
  return make(std::move(spec.value()));
}

const char* const kMixed =
    "Hello world! It's 2024: \xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C "
    "<|im_start|>x\n\n  e\xCC\x81";

TEST(TokenizerRealFiles, HfReferenceIds) {
  struct Case {
    const char* name;
    std::vector<int32_t> ids;  // from HF tokenizers 0.23, add_special_tokens=False
  };
  const Case cases[] = {
      {"qwen3", {9707, 1879,   0,    1084,  594, 220,    17, 15,  17,  19,  25,
                 220,  108386, 3837, 99489, 220, 151644, 87, 271, 220, 3958}},
      {"llama3", {9906,   1917,  0,   1102, 596, 220, 2366, 19,  25,  118195, 53901, 3922,
                  102616, 83739, 318, 5011, 91,  29,  87,   271, 220, 384,    54939}},
      {"deepseek_v3", {19923, 2058, 3,  983, 734,   223, 939, 22, 28,  223, 30594, 303,
                       3427,  818,  94, 328, 37864, 94,  32,  90, 271, 223, 312,   17793}},
  };
  int found = 0;
  for (const Case& c : cases) {
    auto t = load_hf(c.name);
    if (!t) continue;
    ++found;
    EXPECT_EQ(t->encode(kMixed), c.ids) << c.name;
    // Qwen3 normalizes to NFC; the others round-trip exactly.
    std::string back = t->decode(c.ids);
    if (std::string(c.name) != "qwen3") {
      EXPECT_EQ(back, kMixed) << c.name;
    }
  }
  if (!found) GTEST_FAIL() << "no tokenizer.json under " << shared_dir();
}

TEST(TokenizerRealFiles, ConcurrentEncodeMatchesSerial) {
  auto t = load_hf("llama3");
  if (!t) GTEST_FAIL() << "no llama3 tokenizer.json";
  std::vector<std::string> inputs;
  for (int i = 0; i < 64; ++i)
    inputs.push_back(std::string(kMixed) + std::to_string(i * 7919) + std::string(i, ' ') + "x");
  std::vector<std::vector<int32_t>> serial;
  for (const auto& s : inputs) serial.push_back(t->encode(s));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < inputs.size(); ++i)
          mismatches[th] += t->encode(inputs[i]) != serial[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// The fuzzer's GGUF tokenizer seeds load and encode to valid ids; a hostile model name in them
// stays inside a one-line message.
TEST(TokenizerRobustness, GgufTokenizerSeeds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(DUET_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_gguf_tokenizer";
  int loaded = 0;
  for (const char* name : {"bpe_qwen2.gguf", "spm_llama.gguf"}) {
    std::vector<uint8_t> bytes = testing_malformed::read_all((dir / name).string());
    ASSERT_FALSE(bytes.empty()) << name;
    auto g = GgufFile::parse(bytes.data(), bytes.size(), name);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    auto spec = tokenizer_spec_from_gguf(*g.value());
    ASSERT_TRUE(spec.is_ok()) << spec.status().message();
    auto t = Tokenizer::create(std::move(spec.value()));
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    for (int32_t id : t.value()->encode("Hello world <s> caf\xc3\xa9")) EXPECT_TRUE(t.value()->valid_id(id));
    ++loaded;
    if (std::string(name) == "bpe_qwen2.gguf") {  // tokenizer.ggml.model "gpt2" -> "gp\n2" (same length)
      const std::string model = "gpt2";
      const auto at = std::search(bytes.begin(), bytes.end(), model.begin(), model.end());
      ASSERT_NE(at, bytes.end());
      at[2] = '\n';
      auto g2 = GgufFile::parse(bytes.data(), bytes.size(), name);
      ASSERT_TRUE(g2.is_ok()) << g2.status().message();
      auto bad = tokenizer_spec_from_gguf(*g2.value());
      ASSERT_FALSE(bad.is_ok());
      EXPECT_EQ(bad.status().message().find('\n'), std::string::npos) << bad.status().message();
      EXPECT_NE(bad.status().message().find("gp\\x0a2"), std::string::npos) << bad.status().message();
    }
  }
  EXPECT_EQ(loaded, 2);
}

std::unique_ptr<Tokenizer> load_gguf(const std::string& file) {
  std::string path = std::string(DUET_SOURCE_DIR) + "/models/" + file;
  if (!std::ifstream(path).good()) return nullptr;
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return nullptr;
  auto spec = tokenizer_spec_from_gguf(*f.value());
  EXPECT_TRUE(spec.is_ok()) << spec.status().message();
  if (!spec.is_ok()) return nullptr;
  return make(std::move(spec.value()));
}

TEST(TokenizerRealFiles, GgufReferenceIds) {
  const char* text =
      "Hello world! It's 2024: \xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C "
      "<start_of_turn>x\n\n  e\xCC\x81 <|im_start|>";
  int found = 0;
  EncodeOptions bos;
  bos.add_special = true;
  EncodeOptions plain;
  plain.parse_special = false;
  if (auto t = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")) {
    ++found;
    // llama.cpp (llama-cpp-python 0.3.36) tokenize(add_bos=True, special=True / add_bos=False,
    // special=False)
    EXPECT_EQ(t->encode(text, bos),
              (std::vector<int32_t>{19556, 905, 17,  657,   506,  216,   34,  32,    34,
                                    36,    42,  216, 18645, 250,  48392, 138, 12831, 7906,
                                    240,   178, 239, 230,   2067, 3738,  79,  1714,  79,
                                    20589, 46,  104, 8866,  297,  151,   219, 216,   1}));
    EXPECT_EQ(t->encode(text, plain),
              (std::vector<int32_t>{19556, 905,   17,  657,   506, 216,   34,   32,  34,   36,  42,
                                    216,   18645, 250, 48392, 138, 12831, 7906, 240, 178,  239, 230,
                                    2067,  3738,  79,  1714,  79,  20589, 46,   104, 8866, 297, 151,
                                    219,   2067,  108, 306,   79,  3738,  108,  46}));
    EXPECT_EQ(t->pre_type(), "smollm");
  }
  if (auto t = load_gguf("gemma-3-270m-q4_k_m.gguf")) {
    ++found;
    EXPECT_EQ(t->encode(text, bos),
              (std::vector<int32_t>{2,      9259,   1902,   236888, 1030,   236789, 236751, 236743,
                                    236778, 236771, 236778, 236812, 236787, 43758,  237389, 236900,
                                    12811,  236743, 105,    236781, 108,    138,    236744, 238288,
                                    655,    236909, 548,    236779, 3041,   111038}));
    EXPECT_EQ(
        t->encode(text, plain),
        (std::vector<int32_t>{9259,   1902,   236888, 1030,  236789, 236751, 236743, 236778, 236771,
                              236778, 236812, 236787, 43758, 237389, 236900, 12811,  655,    3041,
                              236779, 1340,   236779, 887,   236813, 236781, 108,    138,    236744,
                              238288, 655,    236909, 548,   236779, 3041,   111038}));
    EXPECT_EQ(t->model(), TokenizerModel::kSpm);
  }
  if (!found) GTEST_FAIL() << "no GGUF models under " << DUET_SOURCE_DIR << "/models";
}

}  // namespace
}  // namespace duet
