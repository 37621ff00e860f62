// Tokenizer pipeline (see tokenizer.h):
//   HF:        added tokens on raw text -> normalize -> added tokens on normalized text ->
//              pre-tokenize -> byte-level BPE per word
//   llama.cpp: special/user-defined tokens (longest first) -> pre-tokenize -> BPE, or
//              space prefix + '▁' escaping -> SPM merges by score
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "base/text.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_model.h"
#include "tokenizer/unicode.h"

namespace duet {

struct Tokenizer::Impl {
  tok::TokenIndex text_to_id;
  tok::BpeModel bpe;
  tok::SpmModel spm;
  tok::AddedTokenSplitter raw_split;   // HF non-normalized tokens; llama.cpp all
  tok::AddedTokenSplitter norm_split;  // HF normalized tokens
  tok::PreTokenizerOptions pre;
};

Tokenizer::~Tokenizer() = default;

namespace {

bool parse_byte_token(const std::string& s, uint8_t* b) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return false;
  unsigned v = 0;
  for (int k = 3; k < 5; ++k) {
    char c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return false;
  }
  *b = static_cast<uint8_t>(v);
  return true;
}

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s->size());
  size_t i = 0;
  while (true) {
    size_t j = s->find(from, i);
    if (j == std::string::npos) break;
    out.append(*s, i, j - i);
    out.append(to);
    i = j + from.size();
  }
  out.append(*s, i, std::string::npos);
  *s = std::move(out);
}

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 '▁'

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(TokenizerSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return invalid_argument("tokenizer: empty vocabulary");
  if (n > (1u << 30))
    return invalid_argument("tokenizer: vocabulary too large: " + std::to_string(n));
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return invalid_argument("tokenizer: " + std::to_string(spec.token_types.size()) +
                            " token types for " + std::to_string(n) + " tokens");
  }
  if (spec.model == TokenizerModel::kSpm && !spec.scores.empty() && spec.scores.size() < n) {
    return invalid_argument("tokenizer: " + std::to_string(spec.scores.size()) + " scores for " +
                            std::to_string(n) + " tokens");
  }
  auto check_id = [&](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return invalid_argument(std::string("tokenizer: ") + what + " id " + std::to_string(id) +
                              " outside vocabulary of " + std::to_string(n));
    }
    return Status::ok();
  };
  DUET_RETURN_IF_ERROR(check_id(spec.bos_id, "bos"));
  DUET_RETURN_IF_ERROR(check_id(spec.eos_id, "eos"));
  DUET_RETURN_IF_ERROR(check_id(spec.unk_id, "unk"));
  DUET_RETURN_IF_ERROR(check_id(spec.pad_id, "pad"));
  for (const AddedToken& a : spec.added_tokens) {
    if (a.id < 0)
      return invalid_argument("tokenizer: added token '" + printable(a.content) + "' has a negative id");
    DUET_RETURN_IF_ERROR(check_id(a.id, "added token"));
  }
  for (int32_t id : spec.eog_ids) DUET_RETURN_IF_ERROR(check_id(id, "end-of-generation"));
  if (spec.add_bos && spec.bos_id < 0) spec.add_bos = false;
  if (spec.add_eos && spec.eos_id < 0) spec.add_eos = false;

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->impl_ = std::make_unique<Impl>();
  Impl& im = *t->impl_;
  const bool hf = spec.flavor == TokenizerFlavor::kHf;
  auto type_of = [&](size_t id) {
    return spec.token_types.empty() ? TokenType::kNormal : spec.token_types[id];
  };

  // Text -> id. llama.cpp keeps the last id of duplicated texts; HF's vocabulary is a map.
  im.text_to_id.reserve(n + spec.added_tokens.size());
  for (size_t id = 0; id < n; ++id) {
    im.text_to_id.insert(spec.tokens[id], static_cast<int32_t>(id), /*overwrite=*/!hf);
  }

  // Decoded bytes and special flags.
  t->token_bytes_.resize(n);
  t->special_.assign(n, 0);
  std::string raw;
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = spec.tokens[id];
    std::string& out = t->token_bytes_[id];
    TokenType ty = type_of(id);
    uint8_t byte;
    if (hf) {
      if (spec.model == TokenizerModel::kBpe && tok::byte_level_decode(text, &raw))
        out = raw;
      else
        out = text;  // HF's ByteLevel decoder passes tokens it cannot map through verbatim
    } else if (ty == TokenType::kControl || ty == TokenType::kUnknown) {
      out = text;
      t->special_[id] = 1;
    } else if (ty == TokenType::kUserDefined) {
      out = text;
    } else if (ty == TokenType::kByte && parse_byte_token(text, &byte)) {
      out.assign(1, static_cast<char>(byte));
    } else if (ty == TokenType::kNormal) {
      if (spec.model == TokenizerModel::kSpm) {
        out = text;
        replace_all(&out, kSpmSpace, " ");
      } else if (tok::byte_level_decode(text, &raw)) {
        out = raw;
      } else {
        out = text;
      }
    }
  }
  std::vector<tok::AddedTokenSplitter::Entry> raw_entries, norm_entries;
  if (hf) {
    for (const AddedToken& a : spec.added_tokens) {
      im.text_to_id.insert(a.content, a.id, /*overwrite=*/true);
      if (a.special) t->special_[a.id] = 1;
      // HF decodes added tokens through the decoder too, so token_bytes_ stays as computed.
      tok::AddedTokenSplitter::Entry e{a.id,     a.content, a.special,
                                       a.lstrip, a.rstrip,  a.single_word};
      if (a.normalized) {
        if (spec.normalizer == Normalizer::kNfc) {
          std::string nfc;
          if (tok::nfc_normalize(e.content, &nfc)) e.content = nfc;
        }
        norm_entries.push_back(std::move(e));
      } else {
        raw_entries.push_back(std::move(e));
      }
    }
  } else {
    for (size_t id = 0; id < n; ++id) {
      TokenType ty = type_of(id);
      if (ty != TokenType::kControl && ty != TokenType::kUserDefined && ty != TokenType::kUnknown)
        continue;
      raw_entries.push_back({static_cast<int32_t>(id), spec.tokens[id],
                             ty != TokenType::kUserDefined, false, false, false});
    }
  }
  im.raw_split = tok::AddedTokenSplitter(std::move(raw_entries), spec.flavor);
  im.norm_split = tok::AddedTokenSplitter(std::move(norm_entries), spec.flavor);

  if (spec.model == TokenizerModel::kBpe) {
    auto kind = tok::pre_tokenizer_from_name(spec.pre_type);
    if (!kind.is_ok()) return kind.status();
    im.pre.kind = kind.value();
    im.pre.flavor = hf ? tok::UnicodeFlavor::kHf : tok::UnicodeFlavor::kLlamaCpp;
    DUET_RETURN_IF_ERROR(im.bpe.build(spec, im.text_to_id));
  } else {
    im.pre.kind = tok::PreTokenizerKind::kNone;
    DUET_RETURN_IF_ERROR(im.spm.build(spec, &im.text_to_id));
  }

  t->token_text_ = std::move(spec.tokens);
  spec.tokens.clear();
  spec.merges.clear();
  spec.merges.shrink_to_fit();
  spec.scores.clear();
  spec.scores.shrink_to_fit();
  t->spec_ = std::move(spec);
  return t;
}

int32_t Tokenizer::token_to_id(std::string_view text) const { return impl_->text_to_id.find(text); }

bool Tokenizer::is_eog(int32_t id) const {
  if (id < 0) return false;
  if (id == spec_.eos_id) return true;
  return std::find(spec_.eog_ids.begin(), spec_.eog_ids.end(), id) != spec_.eog_ids.end();
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  const Impl& im = *impl_;
  if (spec_.model == TokenizerModel::kSpm) {
    im.spm.encode(text, out);
    return;
  }
  thread_local std::string prefixed;
  if (spec_.add_prefix_space && text[0] != ' ') {
    prefixed.clear();
    prefixed.push_back(' ');
    prefixed.append(text.data(), text.size());
    text = prefixed;
  }
  thread_local std::vector<std::pair<uint32_t, uint32_t>> words;
  words.clear();
  tok::pre_tokenize(im.pre, text, &words);
  for (const auto& [b, e] : words) im.bpe.encode(text.substr(b, e - b), out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> ids;
  encode(text, opts, &ids);
  return ids;
}

void Tokenizer::encode(std::string_view text, const EncodeOptions& opts,
                       std::vector<int32_t>* out) const {
  constexpr size_t kMaxPiece = size_t{1} << 31;
  if (text.size() > kMaxPiece) {
    EncodeOptions inner = opts;
    inner.add_special = false;
    if (opts.add_special && spec_.add_bos) out->push_back(spec_.bos_id);
    while (!text.empty()) {
      size_t cut = std::min(text.size(), kMaxPiece);
      while (cut < text.size() && cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80)
        --cut;
      encode(text.substr(0, cut), inner, out);
      text.remove_prefix(cut);
    }
    if (opts.add_special && spec_.add_eos) out->push_back(spec_.eos_id);
    return;
  }
  std::string repaired;
  if (!tok::utf8_is_valid(text)) {
    repaired = tok::utf8_lossy(text);
    text = repaired;
  }
  const Impl& im = *impl_;
  if (opts.add_special && spec_.add_bos) out->push_back(spec_.bos_id);
  std::vector<tok::Segment> segs;
  im.raw_split.split(text, opts.parse_special, &segs);

  if (spec_.flavor == TokenizerFlavor::kHf) {
    std::string normalized;
    std::vector<tok::Segment> segs2;
    for (const tok::Segment& s : segs) {
      if (s.token >= 0) {
        out->push_back(s.token);
        continue;
      }
      std::string_view piece = text.substr(s.begin, s.end - s.begin);
      if (spec_.normalizer == Normalizer::kNfc && tok::nfc_normalize(piece, &normalized))
        piece = normalized;
      if (im.norm_split.empty()) {
        encode_text(piece, out);
        continue;
      }
      segs2.clear();
      im.norm_split.split(piece, opts.parse_special, &segs2);
      for (const tok::Segment& s2 : segs2) {
        if (s2.token >= 0)
          out->push_back(s2.token);
        else
          encode_text(piece.substr(s2.begin, s2.end - s2.begin), out);
      }
    }
  } else if (spec_.model == TokenizerModel::kBpe) {
    for (const tok::Segment& s : segs) {
      if (s.token >= 0)
        out->push_back(s.token);
      else
        encode_text(text.substr(s.begin, s.end - s.begin), out);
    }
  } else {
    // llama.cpp SPM: a space is prefixed to text that follows a special token (or the start).
    bool prev_special = true;
    std::string buf;
    for (const tok::Segment& s : segs) {
      if (s.token >= 0) {
        out->push_back(s.token);
        prev_special = true;
        continue;
      }
      if (s.begin == s.end) continue;
      buf.clear();
      if (spec_.add_space_prefix && prev_special) buf.push_back(' ');
      buf.append(text.substr(s.begin, s.end - s.begin));
      replace_all(&buf, " ", kSpmSpace);
      encode_text(buf, out);
      prev_special = false;
    }
  }
  if (opts.add_special && spec_.add_eos) out->push_back(spec_.eos_id);
}

void Tokenizer::append_token_bytes(int32_t id, size_t index, const DecodeOptions& opts,
                                   std::string* out) const {
  if (!valid_id(id)) return;
  if (opts.skip_special && special_[id]) return;
  const std::string& b = token_bytes_[id];
  if (index == 0 && spec_.model == TokenizerModel::kSpm && spec_.add_space_prefix && !b.empty() &&
      b[0] == ' ') {
    out->append(b, 1, std::string::npos);
    return;
  }
  out->append(b);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, const DecodeOptions& opts) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) append_token_bytes(ids[i], i, opts, &bytes);
  if (tok::utf8_is_valid(bytes)) return bytes;
  return tok::utf8_lossy(bytes);
}

}  // namespace duet
