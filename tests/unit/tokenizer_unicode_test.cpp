// Unicode helpers and pre-tokenizer matchers: UTF-8 repair by maximal subparts, categories,
// NFC, and pre-tokenizer splits checked against HF tokenizers' pre_tokenize_str output.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace duet::tok {
namespace {

TEST(TokenizerUnicode, LossyUsesMaximalSubparts) {
  // Vectors from the Unicode standard's "U+FFFD substitution of maximal subparts" table.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("a\x80"
                       "b"),
            "a" + r + "b");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xE2\x82"
                       "a"),
            r + "a");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);                  // truncated 4-byte
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);                  // overlong lead: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);          // surrogate: ED then A0 80 invalid
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80"), r + r + r);
  EXPECT_EQ(utf8_lossy("\xF1\x80\x80\xE1\x80\xC2"), r + r + r);
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), r + r);
  EXPECT_EQ(utf8_lossy("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
  EXPECT_TRUE(utf8_is_valid("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(utf8_is_valid("\xF4\x90\x80\x80"));
}

TEST(TokenizerUnicode, DecodeAdvancesOverInvalid) {
  std::string s =
      "\xE2\x82"
      "a\xF0\x9F\x98\x80";
  size_t i = 0;
  EXPECT_EQ(utf8_decode(s, &i), kReplacementChar);
  EXPECT_EQ(i, 2u);
  EXPECT_EQ(utf8_decode(s, &i), uint32_t('a'));
  EXPECT_EQ(utf8_decode(s, &i), 0x1F600u);
  EXPECT_EQ(i, s.size());
}

TEST(TokenizerUnicode, Categories) {
  EXPECT_EQ(general_category('A'), GeneralCategory::kLu);
  EXPECT_EQ(general_category(0x4E2D), GeneralCategory::kLo);
  EXPECT_EQ(general_category(0x0301), GeneralCategory::kMn);
  EXPECT_EQ(general_category(0x0663), GeneralCategory::kNd);
  EXPECT_EQ(general_category(0x00BD), GeneralCategory::kNo);
  EXPECT_EQ(general_category(0x1F600), GeneralCategory::kSo);
  EXPECT_EQ(general_category(0x0378), GeneralCategory::kCn);
  EXPECT_EQ(general_category(0x10FFFF), GeneralCategory::kCn);
  // U+10D50 (Garay, Unicode 16.0) is a letter for HF, unassigned for llama.cpp's 15.1 tables.
  EXPECT_EQ(general_category(0x10D50, UnicodeFlavor::kHf), GeneralCategory::kLu);
  EXPECT_EQ(general_category(0x10D50, UnicodeFlavor::kLlamaCpp), GeneralCategory::kCn);
  // White_Space, not Python's isspace: U+001C..U+001F are not spaces, U+0085 is.
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_FALSE(is_white_space(0x1C));
  EXPECT_FALSE(is_white_space(0x200B));
  EXPECT_FALSE(is_white_space(0x180E));
  EXPECT_TRUE(cp_class(' ', UnicodeFlavor::kHf) & kClassSpace);
}

std::string nfc(const std::string& s) {
  std::string out;
  return nfc_normalize(s, &out) ? out : s;
}

TEST(TokenizerUnicode, Nfc) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x81"), "\xE1\xBA\xA1\xCC\x81");             // a + dot below + acute
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");             // reordered first
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                              // Angstrom sign -> Å
  EXPECT_EQ(nfc("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ is NFC (compatibility only)
  std::string out;
  EXPECT_FALSE(nfc_normalize("plain ascii and \xE4\xB8\xAD\xE6\x96\x87", &out));
}

struct PreCase {
  PreTokenizerKind kind;
  std::string text;
  std::vector<std::string> pieces;
};

// Generated from HF tokenizers' pre_tokenize_str on the reference tokenizer.json files.
const PreCase kPreCases[] = {
    {PreTokenizerKind::kLlama3, "Hello world", {"Hello", " world"}},
    {PreTokenizerKind::kLlama3,
     "  leading  and   trailing  ",
     {" ", " leading", " ", " and", "  ", " trailing", "  "}},
    {PreTokenizerKind::kLlama3,
     "it's I'M they'RE 'll 'x",
     {"it", "'s", " I", "'M", " they", "'RE", " '", "ll", " '", "x"}},
    {PreTokenizerKind::kLlama3,
     "it'\xc5"
     "\xbf"
     "",
     {"it",
      "'\xc5"
      "\xbf"
      ""}},
    {PreTokenizerKind::kLlama3,
     "a\x0d"
     "\x0a"
     "\x0d"
     "\x0a"
     "b\x0a"
     "  c\x09"
     "\x09"
     "d",
     {"a",
      "\x0d"
      "\x0a"
      "\x0d"
      "\x0a"
      "",
      "b",
      "\x0a"
      "",
      " ", " c",
      "\x09"
      "",
      "\x09"
      "d"}},
    {PreTokenizerKind::kLlama3, "1234567 x12y", {"123", "456", "7", " x", "12", "y"}},
    {PreTokenizerKind::kLlama3,
     "\xe4"
     "\xb8"
     "\xad"
     "\xe6"
     "\x96"
     "\x87"
     "\xe5"
     "\xad"
     "\x97"
     "\xe7"
     "\xac"
     "\xa6"
     "\xe5"
     "\x92"
     "\x8c"
     "\xe3"
     "\x81"
     "\x8b"
     "\xe3"
     "\x81"
     "\xaa"
     "\xe3"
     "\x82"
     "\xab"
     "\xe3"
     "\x83"
     "\x8a"
     "\xe6"
     "\xb7"
     "\xb7"
     "\xe5"
     "\x9c"
     "\xa8"
     "123abc",
     {"\xe4"
      "\xb8"
      "\xad"
      "\xe6"
      "\x96"
      "\x87"
      "\xe5"
      "\xad"
      "\x97"
      "\xe7"
      "\xac"
      "\xa6"
      "\xe5"
      "\x92"
      "\x8c"
      "\xe3"
      "\x81"
      "\x8b"
      "\xe3"
      "\x81"
      "\xaa"
      "\xe3"
      "\x82"
      "\xab"
      "\xe3"
      "\x83"
      "\x8a"
      "\xe6"
      "\xb7"
      "\xb7"
      "\xe5"
      "\x9c"
      "\xa8"
      "",
      "123", "abc"}},
    {PreTokenizerKind::kLlama3,
     "e\xcc"
     "\x81"
     "t\xc3"
     "\xa9"
     " \xcc"
     "\x81"
     "x",
     {"e",
      "\xcc"
      "\x81"
      "t\xc3"
      "\xa9"
      "",
      " \xcc"
      "\x81"
      "",
      "x"}},
    {PreTokenizerKind::kLlama3,
     "!!!abc ...def -x 'quoted'",
     {"!!!", "abc", " ...", "def", " -", "x", " '", "quoted", "'"}},
    {PreTokenizerKind::kLlama3,
     "x  \x0a"
     "  y",
     {"x",
      "  \x0a"
      "",
      " ", " y"}},
    {PreTokenizerKind::kLlama3,
     "\xe3"
     "\x80"
     "\x80"
     "\xe3"
     "\x80"
     "\x80"
     "z\xc2"
     "\xa0"
     "q",
     {"\xe3"
      "\x80"
      "\x80"
      "",
      "\xe3"
      "\x80"
      "\x80"
      "z",
      "\xc2"
      "\xa0"
      "q"}},
    {PreTokenizerKind::kLlama3,
     "\xf0"
     "\x9f"
     "\x91"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x8f"
     "\xbd"
     " ok \xf0"
     "\x9f"
     "\x91"
     "\xa8"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa9"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa7"
     "",
     {"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x8f"
      "\xbd"
      "",
      " ok",
      " \xf0"
      "\x9f"
      "\x91"
      "\xa8"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa9"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa7"
      ""}},
    {PreTokenizerKind::kLlama3,
     "a\xe2"
     "\x80"
     "\x8b"
     "b",
     {"a",
      "\xe2"
      "\x80"
      "\x8b"
      "b"}},
    {PreTokenizerKind::kLlama3,
     "$100.50, \xd9"
     "\xa3"
     "\xd9"
     "\xa4"
     "\xd9"
     "\xa5"
     " \xc2"
     "\xbd"
     "",
     {"$", "100", ".", "50", ",", " ",
      "\xd9"
      "\xa3"
      "\xd9"
      "\xa4"
      "\xd9"
      "\xa5"
      "",
      " ",
      "\xc2"
      "\xbd"
      ""}},
    {PreTokenizerKind::kLlama3,
     "  \x0a"
     "",
     {"  \x0a"
      ""}},
    {PreTokenizerKind::kLlama3, "x ++ y", {"x", " ++", " y"}},
    {PreTokenizerKind::kLlama3,
     "tab\x09"
     "!x",
     {"tab",
      "\x09"
      "",
      "!x"}},
    {PreTokenizerKind::kQwen2, "Hello world", {"Hello", " world"}},
    {PreTokenizerKind::kQwen2,
     "  leading  and   trailing  ",
     {" ", " leading", " ", " and", "  ", " trailing", "  "}},
    {PreTokenizerKind::kQwen2,
     "it's I'M they'RE 'll 'x",
     {"it", "'s", " I", "'M", " they", "'RE", " '", "ll", " '", "x"}},
    {PreTokenizerKind::kQwen2,
     "it'\xc5"
     "\xbf"
     "",
     {"it",
      "'\xc5"
      "\xbf"
      ""}},
    {PreTokenizerKind::kQwen2,
     "a\x0d"
     "\x0a"
     "\x0d"
     "\x0a"
     "b\x0a"
     "  c\x09"
     "\x09"
     "d",
     {"a",
      "\x0d"
      "\x0a"
      "\x0d"
      "\x0a"
      "",
      "b",
      "\x0a"
      "",
      " ", " c",
      "\x09"
      "",
      "\x09"
      "d"}},
    {PreTokenizerKind::kQwen2,
     "1234567 x12y",
     {"1", "2", "3", "4", "5", "6", "7", " x", "1", "2", "y"}},
    {PreTokenizerKind::kQwen2,
     "\xe4"
     "\xb8"
     "\xad"
     "\xe6"
     "\x96"
     "\x87"
     "\xe5"
     "\xad"
     "\x97"
     "\xe7"
     "\xac"
     "\xa6"
     "\xe5"
     "\x92"
     "\x8c"
     "\xe3"
     "\x81"
     "\x8b"
     "\xe3"
     "\x81"
     "\xaa"
     "\xe3"
     "\x82"
     "\xab"
     "\xe3"
     "\x83"
     "\x8a"
     "\xe6"
     "\xb7"
     "\xb7"
     "\xe5"
     "\x9c"
     "\xa8"
     "123abc",
     {"\xe4"
      "\xb8"
      "\xad"
      "\xe6"
      "\x96"
      "\x87"
      "\xe5"
      "\xad"
      "\x97"
      "\xe7"
      "\xac"
      "\xa6"
      "\xe5"
      "\x92"
      "\x8c"
      "\xe3"
      "\x81"
      "\x8b"
      "\xe3"
      "\x81"
      "\xaa"
      "\xe3"
      "\x82"
      "\xab"
      "\xe3"
      "\x83"
      "\x8a"
      "\xe6"
      "\xb7"
      "\xb7"
      "\xe5"
      "\x9c"
      "\xa8"
      "",
      "1", "2", "3", "abc"}},
    {PreTokenizerKind::kQwen2,
     "e\xcc"
     "\x81"
     "t\xc3"
     "\xa9"
     " \xcc"
     "\x81"
     "x",
     {"e",
      "\xcc"
      "\x81"
      "t\xc3"
      "\xa9"
      "",
      " \xcc"
      "\x81"
      "",
      "x"}},
    {PreTokenizerKind::kQwen2,
     "!!!abc ...def -x 'quoted'",
     {"!!!", "abc", " ...", "def", " -", "x", " '", "quoted", "'"}},
    {PreTokenizerKind::kQwen2,
     "x  \x0a"
     "  y",
     {"x",
      "  \x0a"
      "",
      " ", " y"}},
    {PreTokenizerKind::kQwen2,
     "\xe3"
     "\x80"
     "\x80"
     "\xe3"
     "\x80"
     "\x80"
     "z\xc2"
     "\xa0"
     "q",
     {"\xe3"
      "\x80"
      "\x80"
      "",
      "\xe3"
      "\x80"
      "\x80"
      "z",
      "\xc2"
      "\xa0"
      "q"}},
    {PreTokenizerKind::kQwen2,
     "\xf0"
     "\x9f"
     "\x91"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x8f"
     "\xbd"
     " ok \xf0"
     "\x9f"
     "\x91"
     "\xa8"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa9"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa7"
     "",
     {"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x8f"
      "\xbd"
      "",
      " ok",
      " \xf0"
      "\x9f"
      "\x91"
      "\xa8"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa9"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa7"
      ""}},
    {PreTokenizerKind::kQwen2,
     "a\xe2"
     "\x80"
     "\x8b"
     "b",
     {"a",
      "\xe2"
      "\x80"
      "\x8b"
      "b"}},
    {PreTokenizerKind::kQwen2,
     "$100.50, \xd9"
     "\xa3"
     "\xd9"
     "\xa4"
     "\xd9"
     "\xa5"
     " \xc2"
     "\xbd"
     "",
     {"$", "1", "0", "0", ".", "5", "0", ",", " ",
      "\xd9"
      "\xa3"
      "",
      "\xd9"
      "\xa4"
      "",
      "\xd9"
      "\xa5"
      "",
      " ",
      "\xc2"
      "\xbd"
      ""}},
    {PreTokenizerKind::kQwen2,
     "  \x0a"
     "",
     {"  \x0a"
      ""}},
    {PreTokenizerKind::kQwen2, "x ++ y", {"x", " ++", " y"}},
    {PreTokenizerKind::kQwen2,
     "tab\x09"
     "!x",
     {"tab",
      "\x09"
      "",
      "!x"}},
    {PreTokenizerKind::kDeepseekV3, "Hello world", {"Hello", " world"}},
    {PreTokenizerKind::kDeepseekV3,
     "  leading  and   trailing  ",
     {" ", " leading", " ", " and", "  ", " trailing", "  "}},
    {PreTokenizerKind::kDeepseekV3,
     "it's I'M they'RE 'll 'x",
     {"it", "'s", " I", "'M", " they", "'RE", " '", "ll", " '", "x"}},
    {PreTokenizerKind::kDeepseekV3,
     "it'\xc5"
     "\xbf"
     "",
     {"it", "'",
      "\xc5"
      "\xbf"
      ""}},
    {PreTokenizerKind::kDeepseekV3,
     "a\x0d"
     "\x0a"
     "\x0d"
     "\x0a"
     "b\x0a"
     "  c\x09"
     "\x09"
     "d",
     {"a",
      "\x0d"
      "\x0a"
      "\x0d"
      "\x0a"
      "",
      "b",
      "\x0a"
      "",
      " ", " c",
      "\x09"
      "",
      "\x09"
      "d"}},
    {PreTokenizerKind::kDeepseekV3, "1234567 x12y", {"123", "456", "7", " x", "12", "y"}},
    {PreTokenizerKind::kDeepseekV3,
     "\xe4"
     "\xb8"
     "\xad"
     "\xe6"
     "\x96"
     "\x87"
     "\xe5"
     "\xad"
     "\x97"
     "\xe7"
     "\xac"
     "\xa6"
     "\xe5"
     "\x92"
     "\x8c"
     "\xe3"
     "\x81"
     "\x8b"
     "\xe3"
     "\x81"
     "\xaa"
     "\xe3"
     "\x82"
     "\xab"
     "\xe3"
     "\x83"
     "\x8a"
     "\xe6"
     "\xb7"
     "\xb7"
     "\xe5"
     "\x9c"
     "\xa8"
     "123abc",
     {"\xe4"
      "\xb8"
      "\xad"
      "\xe6"
      "\x96"
      "\x87"
      "\xe5"
      "\xad"
      "\x97"
      "\xe7"
      "\xac"
      "\xa6"
      "\xe5"
      "\x92"
      "\x8c"
      "\xe3"
      "\x81"
      "\x8b"
      "\xe3"
      "\x81"
      "\xaa"
      "\xe3"
      "\x82"
      "\xab"
      "\xe3"
      "\x83"
      "\x8a"
      "\xe6"
      "\xb7"
      "\xb7"
      "\xe5"
      "\x9c"
      "\xa8"
      "",
      "123", "abc"}},
    {PreTokenizerKind::kDeepseekV3,
     "e\xcc"
     "\x81"
     "t\xc3"
     "\xa9"
     " \xcc"
     "\x81"
     "x",
     {"e\xcc"
      "\x81"
      "t\xc3"
      "\xa9"
      "",
      " \xcc"
      "\x81"
      "x"}},
    {PreTokenizerKind::kDeepseekV3,
     "!!!abc ...def -x 'quoted'",
     {"!!!", "abc", " ...", "def", " -", "x", " '", "quoted", "'"}},
    {PreTokenizerKind::kDeepseekV3,
     "x  \x0a"
     "  y",
     {"x",
      "  \x0a"
      "",
      " ", " y"}},
    {PreTokenizerKind::kDeepseekV3,
     "\xe3"
     "\x80"
     "\x80"
     "\xe3"
     "\x80"
     "\x80"
     "z\xc2"
     "\xa0"
     "q",
     {"\xe3"
      "\x80"
      "\x80"
      "",
      "\xe3"
      "\x80"
      "\x80"
      "z",
      "\xc2"
      "\xa0"
      "q"}},
    {PreTokenizerKind::kDeepseekV3,
     "\xf0"
     "\x9f"
     "\x91"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x8f"
     "\xbd"
     " ok \xf0"
     "\x9f"
     "\x91"
     "\xa8"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa9"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa7"
     "",
     {"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x8f"
      "\xbd"
      "",
      " ok",
      " \xf0"
      "\x9f"
      "\x91"
      "\xa8"
      "",
      "\xe2"
      "\x80"
      "\x8d"
      "",
      "\xf0"
      "\x9f"
      "\x91"
      "\xa9"
      "",
      "\xe2"
      "\x80"
      "\x8d"
      "",
      "\xf0"
      "\x9f"
      "\x91"
      "\xa7"
      ""}},
    {PreTokenizerKind::kDeepseekV3,
     "a\xe2"
     "\x80"
     "\x8b"
     "b",
     {"a",
      "\xe2"
      "\x80"
      "\x8b"
      "b"}},
    {PreTokenizerKind::kDeepseekV3,
     "$100.50, \xd9"
     "\xa3"
     "\xd9"
     "\xa4"
     "\xd9"
     "\xa5"
     " \xc2"
     "\xbd"
     "",
     {"$", "100", ".", "50", ",", " ",
      "\xd9"
      "\xa3"
      "\xd9"
      "\xa4"
      "\xd9"
      "\xa5"
      "",
      " ",
      "\xc2"
      "\xbd"
      ""}},
    {PreTokenizerKind::kDeepseekV3,
     "  \x0a"
     "",
     {"  \x0a"
      ""}},
    {PreTokenizerKind::kDeepseekV3, "x ++ y", {"x", " ++", " y"}},
    {PreTokenizerKind::kDeepseekV3,
     "tab\x09"
     "!x",
     {"tab",
      "\x09"
      "",
      "!x"}},
    {PreTokenizerKind::kGpt2, "Hello world", {"Hello", " world"}},
    {PreTokenizerKind::kGpt2,
     "  leading  and   trailing  ",
     {" ", " leading", " ", " and", "  ", " trailing", "  "}},
    {PreTokenizerKind::kGpt2,
     "it's I'M they'RE 'll 'x",
     {"it", "'s", " I", "'", "M", " they", "'", "RE", " '", "ll", " '", "x"}},
    {PreTokenizerKind::kGpt2,
     "it'\xc5"
     "\xbf"
     "",
     {"it", "'",
      "\xc5"
      "\xbf"
      ""}},
    {PreTokenizerKind::kGpt2,
     "a\x0d"
     "\x0a"
     "\x0d"
     "\x0a"
     "b\x0a"
     "  c\x09"
     "\x09"
     "d",
     {"a",
      "\x0d"
      "\x0a"
      "\x0d"
      "",
      "\x0a"
      "",
      "b",
      "\x0a"
      " ",
      " c",
      "\x09"
      "",
      "\x09"
      "",
      "d"}},
    {PreTokenizerKind::kGpt2, "1234567 x12y", {"1234567", " x", "12", "y"}},
    {PreTokenizerKind::kGpt2,
     "\xe4"
     "\xb8"
     "\xad"
     "\xe6"
     "\x96"
     "\x87"
     "\xe5"
     "\xad"
     "\x97"
     "\xe7"
     "\xac"
     "\xa6"
     "\xe5"
     "\x92"
     "\x8c"
     "\xe3"
     "\x81"
     "\x8b"
     "\xe3"
     "\x81"
     "\xaa"
     "\xe3"
     "\x82"
     "\xab"
     "\xe3"
     "\x83"
     "\x8a"
     "\xe6"
     "\xb7"
     "\xb7"
     "\xe5"
     "\x9c"
     "\xa8"
     "123abc",
     {"\xe4"
      "\xb8"
      "\xad"
      "\xe6"
      "\x96"
      "\x87"
      "\xe5"
      "\xad"
      "\x97"
      "\xe7"
      "\xac"
      "\xa6"
      "\xe5"
      "\x92"
      "\x8c"
      "\xe3"
      "\x81"
      "\x8b"
      "\xe3"
      "\x81"
      "\xaa"
      "\xe3"
      "\x82"
      "\xab"
      "\xe3"
      "\x83"
      "\x8a"
      "\xe6"
      "\xb7"
      "\xb7"
      "\xe5"
      "\x9c"
      "\xa8"
      "",
      "123", "abc"}},
    {PreTokenizerKind::kGpt2,
     "e\xcc"
     "\x81"
     "t\xc3"
     "\xa9"
     " \xcc"
     "\x81"
     "x",
     {"e",
      "\xcc"
      "\x81"
      "",
      "t\xc3"
      "\xa9"
      "",
      " \xcc"
      "\x81"
      "",
      "x"}},
    {PreTokenizerKind::kGpt2,
     "!!!abc ...def -x 'quoted'",
     {"!!!", "abc", " ...", "def", " -", "x", " '", "quoted", "'"}},
    {PreTokenizerKind::kGpt2,
     "x  \x0a"
     "  y",
     {"x",
      "  \x0a"
      " ",
      " y"}},
    {PreTokenizerKind::kGpt2,
     "\xe3"
     "\x80"
     "\x80"
     "\xe3"
     "\x80"
     "\x80"
     "z\xc2"
     "\xa0"
     "q",
     {"\xe3"
      "\x80"
      "\x80"
      "",
      "\xe3"
      "\x80"
      "\x80"
      "",
      "z",
      "\xc2"
      "\xa0"
      "",
      "q"}},
    {PreTokenizerKind::kGpt2,
     "\xf0"
     "\x9f"
     "\x91"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x8f"
     "\xbd"
     " ok \xf0"
     "\x9f"
     "\x91"
     "\xa8"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa9"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa7"
     "",
     {"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x8f"
      "\xbd"
      "",
      " ok",
      " \xf0"
      "\x9f"
      "\x91"
      "\xa8"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa9"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa7"
      ""}},
    {PreTokenizerKind::kGpt2,
     "a\xe2"
     "\x80"
     "\x8b"
     "b",
     {"a",
      "\xe2"
      "\x80"
      "\x8b"
      "",
      "b"}},
    {PreTokenizerKind::kGpt2,
     "$100.50, \xd9"
     "\xa3"
     "\xd9"
     "\xa4"
     "\xd9"
     "\xa5"
     " \xc2"
     "\xbd"
     "",
     {"$", "100", ".", "50", ",",
      " \xd9"
      "\xa3"
      "\xd9"
      "\xa4"
      "\xd9"
      "\xa5"
      "",
      " \xc2"
      "\xbd"
      ""}},
    {PreTokenizerKind::kGpt2,
     "  \x0a"
     "",
     {"  \x0a"
      ""}},
    {PreTokenizerKind::kGpt2, "x ++ y", {"x", " ++", " y"}},
    {PreTokenizerKind::kGpt2,
     "tab\x09"
     "!x",
     {"tab",
      "\x09"
      "",
      "!", "x"}},
    {PreTokenizerKind::kSmollm, "Hello world", {"Hello", " world"}},
    {PreTokenizerKind::kSmollm,
     "  leading  and   trailing  ",
     {" ", " leading", " ", " and", "  ", " trailing", "  "}},
    {PreTokenizerKind::kSmollm,
     "it's I'M they'RE 'll 'x",
     {"it", "'s", " I", "'", "M", " they", "'", "RE", " '", "ll", " '", "x"}},
    {PreTokenizerKind::kSmollm,
     "it'\xc5"
     "\xbf"
     "",
     {"it", "'",
      "\xc5"
      "\xbf"
      ""}},
    {PreTokenizerKind::kSmollm,
     "a\x0d"
     "\x0a"
     "\x0d"
     "\x0a"
     "b\x0a"
     "  c\x09"
     "\x09"
     "d",
     {"a",
      "\x0d"
      "\x0a"
      "\x0d"
      "",
      "\x0a"
      "",
      "b",
      "\x0a"
      " ",
      " c",
      "\x09"
      "",
      "\x09"
      "",
      "d"}},
    {PreTokenizerKind::kSmollm,
     "1234567 x12y",
     {"1", "2", "3", "4", "5", "6", "7", " x", "1", "2", "y"}},
    {PreTokenizerKind::kSmollm,
     "\xe4"
     "\xb8"
     "\xad"
     "\xe6"
     "\x96"
     "\x87"
     "\xe5"
     "\xad"
     "\x97"
     "\xe7"
     "\xac"
     "\xa6"
     "\xe5"
     "\x92"
     "\x8c"
     "\xe3"
     "\x81"
     "\x8b"
     "\xe3"
     "\x81"
     "\xaa"
     "\xe3"
     "\x82"
     "\xab"
     "\xe3"
     "\x83"
     "\x8a"
     "\xe6"
     "\xb7"
     "\xb7"
     "\xe5"
     "\x9c"
     "\xa8"
     "123abc",
     {"\xe4"
      "\xb8"
      "\xad"
      "\xe6"
      "\x96"
      "\x87"
      "\xe5"
      "\xad"
      "\x97"
      "\xe7"
      "\xac"
      "\xa6"
      "\xe5"
      "\x92"
      "\x8c"
      "\xe3"
      "\x81"
      "\x8b"
      "\xe3"
      "\x81"
      "\xaa"
      "\xe3"
      "\x82"
      "\xab"
      "\xe3"
      "\x83"
      "\x8a"
      "\xe6"
      "\xb7"
      "\xb7"
      "\xe5"
      "\x9c"
      "\xa8"
      "",
      "1", "2", "3", "abc"}},
    {PreTokenizerKind::kSmollm,
     "e\xcc"
     "\x81"
     "t\xc3"
     "\xa9"
     " \xcc"
     "\x81"
     "x",
     {"e",
      "\xcc"
      "\x81"
      "",
      "t\xc3"
      "\xa9"
      "",
      " \xcc"
      "\x81"
      "",
      "x"}},
    {PreTokenizerKind::kSmollm,
     "!!!abc ...def -x 'quoted'",
     {"!!!", "abc", " ...", "def", " -", "x", " '", "quoted", "'"}},
    {PreTokenizerKind::kSmollm,
     "x  \x0a"
     "  y",
     {"x",
      "  \x0a"
      " ",
      " y"}},
    {PreTokenizerKind::kSmollm,
     "\xe3"
     "\x80"
     "\x80"
     "\xe3"
     "\x80"
     "\x80"
     "z\xc2"
     "\xa0"
     "q",
     {"\xe3"
      "\x80"
      "\x80"
      "",
      "\xe3"
      "\x80"
      "\x80"
      "",
      "z",
      "\xc2"
      "\xa0"
      "",
      "q"}},
    {PreTokenizerKind::kSmollm,
     "\xf0"
     "\x9f"
     "\x91"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x8f"
     "\xbd"
     " ok \xf0"
     "\x9f"
     "\x91"
     "\xa8"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa9"
     "\xe2"
     "\x80"
     "\x8d"
     "\xf0"
     "\x9f"
     "\x91"
     "\xa7"
     "",
     {"\xf0"
      "\x9f"
      "\x91"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x8f"
      "\xbd"
      "",
      " ok",
      " \xf0"
      "\x9f"
      "\x91"
      "\xa8"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa9"
      "\xe2"
      "\x80"
      "\x8d"
      "\xf0"
      "\x9f"
      "\x91"
      "\xa7"
      ""}},
    {PreTokenizerKind::kSmollm,
     "a\xe2"
     "\x80"
     "\x8b"
     "b",
     {"a",
      "\xe2"
      "\x80"
      "\x8b"
      "",
      "b"}},
    {PreTokenizerKind::kSmollm,
     "$100.50, \xd9"
     "\xa3"
     "\xd9"
     "\xa4"
     "\xd9"
     "\xa5"
     " \xc2"
     "\xbd"
     "",
     {"$", "1", "0", "0", ".", "5", "0", ",", " ",
      "\xd9"
      "\xa3"
      "",
      "\xd9"
      "\xa4"
      "",
      "\xd9"
      "\xa5"
      "",
      " ",
      "\xc2"
      "\xbd"
      ""}},
    {PreTokenizerKind::kSmollm,
     "  \x0a"
     "",
     {"  \x0a"
      ""}},
    {PreTokenizerKind::kSmollm, "x ++ y", {"x", " ++", " y"}},
    {PreTokenizerKind::kSmollm,
     "tab\x09"
     "!x",
     {"tab",
      "\x09"
      "",
      "!", "x"}},
};

TEST(TokenizerPreTokenizer, MatchesHfSplits) {
  for (const PreCase& c : kPreCases) {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    pre_tokenize({c.kind, UnicodeFlavor::kHf}, c.text, &ranges);
    std::vector<std::string> got;
    for (auto [b, e] : ranges) got.push_back(c.text.substr(b, e - b));
    EXPECT_EQ(got, c.pieces) << pre_tokenizer_name(c.kind) << " on '" << c.text << "'";
  }
}

TEST(TokenizerPreTokenizer, LongSpaceRunsAreLinear) {
  std::string s(200000, ' ');
  s += "x";
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  pre_tokenize({PreTokenizerKind::kLlama3, UnicodeFlavor::kHf}, s, &ranges);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].second, 199999u);
}

TEST(TokenizerPreTokenizer, Names) {
  EXPECT_EQ(pre_tokenizer_from_name("qwen2").value(), PreTokenizerKind::kQwen2);
  EXPECT_EQ(pre_tokenizer_from_name("deepseek-r1-qwen").value(), PreTokenizerKind::kQwen2);
  EXPECT_EQ(pre_tokenizer_from_name("llama-bpe").value(), PreTokenizerKind::kLlama3);
  EXPECT_EQ(pre_tokenizer_from_name("deepseek-v3").value(), PreTokenizerKind::kDeepseekV3);
  EXPECT_EQ(pre_tokenizer_from_name("smollm").value(), PreTokenizerKind::kSmollm);
  EXPECT_EQ(pre_tokenizer_from_name("gpt-2").value(), PreTokenizerKind::kGpt2);
  EXPECT_EQ(pre_tokenizer_from_name("no-such-pre").status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace duet::tok
