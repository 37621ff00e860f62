// Splits text around added/special tokens before the model sees it. Two rule sets:
//  * HF tokenizers: leftmost-longest over all added tokens of one trie (raw-text tokens, then
//    normalized-text tokens in a second pass), honoring lstrip/rstrip/single_word; special
//    tokens found while parse_special is off stay text.
//  * llama.cpp: tokens in order of decreasing length each claim their non-overlapping
//    occurrences in the still-unclaimed text; with parse_special off only user-defined tokens.
// Immutable after construction; split() is safe from many threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace duet::tok {

struct Segment {
  uint32_t begin = 0;  // byte range in the text passed to split()
  uint32_t end = 0;
  int32_t token = -1;  // >= 0: this segment is that token; -1: plain text
};

class AddedTokenSplitter {
 public:
  struct Entry {
    int32_t id;
    std::string content;
    bool special;  // HF: special flag; llama.cpp: control/unknown (not split unless parse_special)
    bool lstrip, rstrip, single_word;
  };
  AddedTokenSplitter() = default;
  AddedTokenSplitter(std::vector<Entry> entries, TokenizerFlavor flavor);

  bool empty() const { return entries_.empty(); }
  // Appends segments covering `text` to *out. Segments whose text is empty are not emitted,
  // except when the whole text is empty.
  void split(std::string_view text, bool parse_special, std::vector<Segment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> next;  // sorted by byte
    int32_t entry = -1;
  };
  uint32_t child(uint32_t node, uint8_t b) const;
  void split_hf(std::string_view text, bool parse_special, std::vector<Segment>* out) const;
  void split_llama(std::string_view text, bool parse_special, std::vector<Segment>* out) const;

  std::vector<Entry> entries_;
  std::vector<Node> nodes_;
  uint32_t root_next_[256];
  std::vector<uint32_t> by_length_;  // llama.cpp order: entry indices by decreasing length
  TokenizerFlavor flavor_ = TokenizerFlavor::kHf;
};

}  // namespace duet::tok
