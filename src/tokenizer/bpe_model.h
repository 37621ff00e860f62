// Byte-level BPE: the GPT-2 byte<->unicode mapping and merges applied by rank (lowest rank first,
// leftmost on ties) to one pre-tokenized word. Owns the merge table and byte ids; the vocabulary
// text map belongs to Tokenizer. Immutable after build(); encode() is safe from many threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace duet::tok {

// GPT-2's byte -> code point map (printable Latin-1 maps to itself, the rest to U+0100..).
uint32_t byte_to_unicode(uint8_t b);
// Inverse of byte_to_unicode; -1 when cp is not one of the 256 images.
int unicode_to_byte(uint32_t cp);
// Token text (byte-level chars) -> raw bytes; false when some char is not a byte image.
bool byte_level_decode(std::string_view text, std::string* out);
std::string byte_level_encode(std::string_view raw);

// Open-addressing map from token text to id. Keys live in one arena; lookups take string_view
// and allocate nothing.
class TokenIndex {
 public:
  void reserve(size_t n);
  // Inserts key -> id; an existing key keeps its id unless `overwrite`.
  void insert(std::string_view key, int32_t id, bool overwrite);
  int32_t find(std::string_view key) const;  // -1 when absent
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t hash;
    int32_t id;  // -1: empty
    uint32_t off;
    uint32_t len;
  };
  static uint32_t hash(std::string_view s);
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Open-addressing map from a token-id pair to (rank, merged id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // keep_first: on duplicate pairs keep the first rank (llama.cpp) or the last (HF).
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t id, bool keep_first);
  const Entry* find(int32_t a, int32_t b) const {
    if (a < 0 || b < 0) return nullptr;
    uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    size_t i = hash(key) & mask_;
    while (true) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // `text_to_id` maps token texts (byte-level chars) to ids.
  Status build(const TokenizerSpec& spec, const TokenIndex& text_to_id);
  // Appends the ids of one word given as raw bytes.
  void encode(std::string_view word, std::vector<int32_t>* out) const;
  size_t n_merges() const { return merges_.size(); }

 private:
  void merge_small(std::vector<int32_t>* out) const;
  void merge_heap(std::vector<int32_t>* out) const;

  int32_t byte_id_[256];
  MergeTable merges_;
  TokenIndex raw_to_id_;  // raw bytes -> id, for ignore_merges
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace duet::tok
