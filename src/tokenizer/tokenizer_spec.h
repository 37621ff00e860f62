// TokenizerSpec: the plain description a Tokenizer is built from (vocabulary, merges or scores,
// token types, added tokens, pre-tokenizer name, special ids and flags, chat template). Filled
// from HF tokenizer.json (hf_tokenizer_json.h) or from GGUF metadata (formats/gguf_tokenizer.h);
// this header has no dependency on either format. Plain data; no threads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace duet {

enum class TokenizerModel : uint8_t {
  kBpe,  // byte-level BPE, merges applied by rank (GPT-2, Llama 3, Qwen2/3, DeepSeek V3, SmolLM)
  kSpm,  // SentencePiece-style vocabulary with scores: merges by score, '▁' for spaces, <0xNN>
};

// Whose behaviour to reproduce where references differ (special-token splitting, Unicode version,
// decoding of special tokens): HF `tokenizers` for tokenizer.json, llama.cpp for GGUF.
enum class TokenizerFlavor : uint8_t { kHf, kLlamaCpp };

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class Normalizer : uint8_t { kNone, kNfc };

// An HF added token (tokenizer.json "added_tokens"). GGUF specs derive theirs from token types.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); not split when parse_special is off
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // matched on normalized text (second pass) rather than raw text
  bool single_word = false;  // only matches when not inside a word
};

struct TokenizerSpec {
  TokenizerModel model = TokenizerModel::kBpe;
  TokenizerFlavor flavor = TokenizerFlavor::kHf;
  std::string pre_type;  // llama.cpp name: "llama3", "qwen2", "deepseek-v3", "gpt-2", "smollm", ...

  std::vector<std::string> tokens;     // id -> token text as stored (byte-level chars for BPE)
  std::vector<float> scores;           // SPM merge scores (empty for BPE)
  std::vector<TokenType> token_types;  // empty = all kNormal
  std::vector<std::pair<std::string, std::string>> merges;  // BPE merges, rank = index
  std::vector<AddedToken> added_tokens;                     // HF flavor only

  Normalizer normalizer = Normalizer::kNone;
  bool ignore_merges = false;     // a word already in the vocab is emitted whole (Llama 3)
  bool add_prefix_space = false;  // HF ByteLevel: prepend ' ' to text not starting with one
  bool add_space_prefix = false;  // SPM (llama.cpp): prepend ' ' to text after a special token
  bool byte_fallback = true;      // SPM: unknown characters become <0xNN> byte tokens

  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  std::vector<int32_t> eog_ids;  // end-of-generation ids (eos, eot, im_end, ...)
  bool add_bos = false;
  bool add_eos = false;

  std::string chat_template;
};

}  // namespace duet
