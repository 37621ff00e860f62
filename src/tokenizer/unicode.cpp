// Unicode tables behind unicode.h: a two-stage lookup built once from the generated range tables,
// UTF-8 coding with maximal-subpart error handling, and NFC (decompose, reorder, compose).
// The tables are built on first use under a function-local static (thread-safe init).
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace duet::tok {
namespace {

#include "tokenizer/unicode_tables.inc"

constexpr uint32_t kMaxCp = 0x110000;
constexpr uint32_t kBlockShift = 7;
constexpr uint32_t kBlockSize = 1u << kBlockShift;
constexpr uint32_t kNumBlocks = kMaxCp >> kBlockShift;

// Stored per code point: bits 0-4 general category, bit 5 "may change under NFC", bit 7
// White_Space.
constexpr uint8_t kGcMask = 0x1f;
constexpr uint8_t kNfcActiveBit = 0x20;
constexpr uint8_t kSpaceBit = 0x80;

constexpr uint8_t class_of_gc(GeneralCategory gc) {
  switch (gc) {
    case GeneralCategory::kLu:
    case GeneralCategory::kLl:
    case GeneralCategory::kLt:
    case GeneralCategory::kLm:
    case GeneralCategory::kLo:
      return kClassL;
    case GeneralCategory::kMn:
    case GeneralCategory::kMc:
    case GeneralCategory::kMe:
      return kClassM;
    case GeneralCategory::kNd:
    case GeneralCategory::kNl:
    case GeneralCategory::kNo:
      return kClassN;
    case GeneralCategory::kPc:
    case GeneralCategory::kPd:
    case GeneralCategory::kPs:
    case GeneralCategory::kPe:
    case GeneralCategory::kPi:
    case GeneralCategory::kPf:
    case GeneralCategory::kPo:
      return kClassP;
    case GeneralCategory::kSm:
    case GeneralCategory::kSc:
    case GeneralCategory::kSk:
    case GeneralCategory::kSo:
      return kClassS;
    case GeneralCategory::kZs:
    case GeneralCategory::kZl:
    case GeneralCategory::kZp:
      return kClassZ;
    default:
      return kClassC;
  }
}

struct Tables {
  // stage1[flavor][block] -> index of a 128-byte block in `blocks`.
  std::vector<uint16_t> stage1[2];
  std::vector<uint8_t> blocks;
  std::array<uint8_t, 256> class_of_value{};  // stored byte -> CpClass bits
  std::unordered_map<uint32_t, uint8_t> ccc;
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomp;  // cp -> (offset, len)
  std::unordered_map<uint64_t, uint32_t> comp;

  Tables() {
    std::vector<uint8_t> flat(kMaxCp);
    for (uint32_t r = 0; r < kGcRangeCount; ++r) {
      uint32_t first = kGcRanges[r] >> 8;
      uint32_t last = r + 1 < kGcRangeCount ? (kGcRanges[r + 1] >> 8) : kMaxCp;
      uint8_t gc = static_cast<uint8_t>(kGcRanges[r] & 0xff);
      std::fill(flat.begin() + first, flat.begin() + last, gc);
    }
    for (uint32_t i = 0; i < kWhiteSpaceCount; ++i) flat[kWhiteSpace[i]] |= kSpaceBit;
    for (uint32_t i = 0; i < kCccRangeCount; ++i) {
      for (uint32_t cp = kCccRanges[i][0]; cp <= kCccRanges[i][1]; ++cp) {
        ccc[cp] = static_cast<uint8_t>(kCccRanges[i][2]);
        flat[cp] |= kNfcActiveBit;
      }
    }
    for (uint32_t i = 0; i < kDecompCount; ++i) {
      decomp[kDecompIndex[i][0]] = {kDecompIndex[i][1], kDecompIndex[i][2]};
      flat[kDecompIndex[i][0]] |= kNfcActiveBit;
    }
    for (uint32_t i = 0; i < kCompCount; ++i) {
      comp[(uint64_t{kComp[i][0]} << 32) | kComp[i][1]] = kComp[i][2];
      flat[kComp[i][1]] |= kNfcActiveBit;  // may compose with what precedes it
    }
    // Hangul: syllables decompose; medial vowels and trailing consonants compose backwards.
    for (uint32_t cp = 0xAC00; cp <= 0xD7A3; ++cp) flat[cp] |= kNfcActiveBit;
    for (uint32_t cp = 0x1161; cp <= 0x1175; ++cp) flat[cp] |= kNfcActiveBit;
    for (uint32_t cp = 0x11A8; cp <= 0x11C2; ++cp) flat[cp] |= kNfcActiveBit;

    std::vector<uint8_t> llama = flat;
    for (uint32_t i = 0; i < kLlamaCppOverrideCount; ++i) {
      for (uint32_t cp = kLlamaCppOverrides[i][0]; cp <= kLlamaCppOverrides[i][1]; ++cp) {
        llama[cp] = static_cast<uint8_t>((llama[cp] & ~kGcMask) | kLlamaCppOverrides[i][2]);
      }
    }
    std::unordered_map<std::string, uint16_t> seen;
    const std::vector<uint8_t>* sources[2] = {&flat, &llama};
    for (int f = 0; f < 2; ++f) {
      stage1[f].resize(kNumBlocks);
      for (uint32_t b = 0; b < kNumBlocks; ++b) {
        std::string key(reinterpret_cast<const char*>(sources[f]->data() + b * kBlockSize),
                        kBlockSize);
        auto it = seen.find(key);
        if (it == seen.end()) {
          uint16_t id = static_cast<uint16_t>(blocks.size() / kBlockSize);
          blocks.insert(blocks.end(), key.begin(), key.end());
          it = seen.emplace(std::move(key), id).first;
        }
        stage1[f][b] = it->second;
      }
    }
    for (int v = 0; v < 256; ++v) {
      uint8_t gc = static_cast<uint8_t>(v & kGcMask);
      uint8_t c = gc < 30 ? class_of_gc(static_cast<GeneralCategory>(gc)) : uint8_t{kClassC};
      if (v & kSpaceBit) c |= kClassSpace;
      class_of_value[v] = c;
    }
  }

  uint8_t raw(uint32_t cp, UnicodeFlavor flavor) const {
    if (cp >= kMaxCp) return 0;
    int f = flavor == UnicodeFlavor::kHf ? 0 : 1;
    return blocks[size_t{stage1[f][cp >> kBlockShift]} * kBlockSize + (cp & (kBlockSize - 1))];
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// ASCII fast path: class bits for 0..127 (identical in both flavors).
struct AsciiClasses {
  uint8_t v[128];
  AsciiClasses() {
    for (uint32_t c = 0; c < 128; ++c)
      v[c] = tables().class_of_value[tables().raw(c, UnicodeFlavor::kHf)];
  }
};

}  // namespace

GeneralCategory general_category(uint32_t cp, UnicodeFlavor flavor) {
  return static_cast<GeneralCategory>(tables().raw(cp, flavor) & kGcMask);
}

uint8_t cp_class(uint32_t cp, UnicodeFlavor flavor) {
  static const AsciiClasses ascii;
  if (cp < 128) return ascii.v[cp];
  const Tables& t = tables();
  return t.class_of_value[t.raw(cp, flavor)];
}

bool is_white_space(uint32_t cp) { return (tables().raw(cp, UnicodeFlavor::kHf) & kSpaceBit) != 0; }

size_t utf8_valid_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size();
  uint8_t b0 = p[i];
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  if (p[i + 1] < lo || p[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Length of the maximal invalid subpart at s[i] (the longest prefix of a well-formed sequence
// that is present), at least 1.
static size_t utf8_invalid_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size();
  uint8_t b0 = p[i];
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  if (i + k < n && p[i + k] >= lo && p[i + k] <= hi) {
    ++k;
    while (k < len && i + k < n && (p[i + k] & 0xC0) == 0x80) ++k;
  }
  return k;
}

uint32_t utf8_decode(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *i;
  if (p[0] < 0x80) {
    *i += 1;
    return p[0];
  }
  size_t len = utf8_valid_len(s, *i);
  if (len == 0) {
    *i += utf8_invalid_len(s, *i);
    return kReplacementChar;
  }
  uint32_t cp;
  if (len == 2) {
    cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  } else if (len == 3) {
    cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  } else {
    cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
  *i += len;
  return cp;
}

void utf8_append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = utf8_valid_len(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    size_t len = utf8_valid_len(s, i);
    if (len == 0) {
      i += utf8_invalid_len(s, i);
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

// ---- NFC

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

uint8_t ccc_of(const Tables& t, uint32_t cp) {
  if (cp < 0x300) return 0;
  auto it = t.ccc.find(cp);
  return it == t.ccc.end() ? 0 : it->second;
}

void decompose(const Tables& t, uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  auto it = t.decomp.find(cp);
  if (it == t.decomp.end()) {
    out->push_back(cp);
    return;
  }
  // The generator stores full (recursive) decompositions.
  for (uint32_t k = 0; k < it->second.second; ++k)
    out->push_back(kDecompData[it->second.first + k]);
}

uint32_t compose_pair(const Tables& t, uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = t.comp.find((uint64_t{a} << 32) | b);
  return it == t.comp.end() ? 0 : it->second;
}

}  // namespace

bool nfc_normalize(std::string_view s, std::string* out) {
  const Tables& t = tables();
  bool active = false;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<uint8_t>(s[i]);
    if (b < 0xCC) {  // below U+0300 (and all bytes < 0xCC that lead) nothing changes under NFC
      i += b < 0x80 ? 1 : (b >= 0xC2 ? 2 : 1);
      continue;
    }
    size_t j = i;
    uint32_t cp = utf8_decode(s, &j);
    if (t.raw(cp, UnicodeFlavor::kHf) & kNfcActiveBit) {
      active = true;
      break;
    }
    i = j;
  }
  if (!active) return false;

  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) decompose(t, utf8_decode(s, &i), &cps);
  // Canonical ordering: stable sort of each run of non-starters by ccc.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(t, cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(t, cps[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(cps.begin() + i, cps.begin() + j,
                       [&](uint32_t a, uint32_t b) { return ccc_of(t, a) < ccc_of(t, b); });
    }
    i = j;
  }
  // Canonical composition.
  std::vector<uint32_t> res;
  res.reserve(cps.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (uint32_t cp : cps) {
    int c = ccc_of(t, cp);
    if (starter != SIZE_MAX) {
      bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= c);
      if (!blocked) {
        uint32_t composed = compose_pair(t, res[starter], cp);
        if (composed) {
          res[starter] = composed;
          continue;
        }
      }
    }
    if (c == 0) {
      starter = res.size();
      last_ccc = -1;
    } else {
      last_ccc = c;
    }
    res.push_back(cp);
  }
  out->clear();
  out->reserve(s.size() + 8);
  for (uint32_t cp : res) utf8_append(cp, out);
  return true;
}

}  // namespace duet::tok
