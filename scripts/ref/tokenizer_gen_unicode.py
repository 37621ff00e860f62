#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_tables.inc: the Unicode data the tokenizer's hand-written
pre-tokenizer matchers and its NFC normalizer use.

Sources, and why each:
  * General categories: Unicode 16.0 via `unicodedata2==16.0.0` (Python 3.11's own unicodedata
    is 14.0). HF `tokenizers` 0.23 runs its Split regexes on Oniguruma with Unicode 16.0 tables
    (checked: Unicode 16 letters such as U+10D50 are \\p{L} there, Unicode 17 ones are not).
  * llama.cpp overrides: llama.cpp's own tables (src/unicode-data.cpp, Unicode 15.1 at the
    vendored version) differ from 16.0 on ~5k code points new in 16.0. GGUF-loaded tokenizers
    mimic llama.cpp, so the ranges where the major class differs are kept as overrides.
  * White_Space: the Unicode property (what both \\s in Oniguruma and llama.cpp use; it is not
    Python's str.isspace, which adds U+001C..U+001F).
  * NFC: HF `tokenizers` normalizes with the `unicode-normalization-alignments` crate, whose data
    is older than 16.0: marks and decompositions unknown to it are treated as ccc 0 / no
    decomposition. The script probes the installed `tokenizers` NFC to find exactly which
    entries it knows, and keeps only those (the dropped ones are printed).

Usage: python3 scripts/ref/tokenizer_gen_unicode.py [--llama-cpp-unicode-data PATH] [-o OUT]
"""
import argparse
import os
import re
import sys

import unicodedata2 as ud
import tokenizers.normalizers as hf_norm

GC_NAMES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd",
            "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf",
            "Cs", "Co"]
GC_INDEX = {n: i for i, n in enumerate(GC_NAMES)}
WHITE_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + \
              [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
MAX_CP = 0x110000
# One representative general category per llama.cpp major-class flag.
LLAMA_FLAG_TO_GC = {0x0001: "Cn", 0x0002: "No", 0x0004: "Lo", 0x0008: "Zs", 0x0010: "Mn",
                    0x0020: "Po", 0x0040: "So", 0x0080: "Cc"}


def major(gc_name):
    return "Cn" if gc_name == "Cn" else gc_name[0]


def ranges_of(values):
    """[(start, value)] run-length encoding of a per-code-point list."""
    out = []
    prev = None
    for cp, v in enumerate(values):
        if v != prev:
            out.append((cp, v))
            prev = v
    return out


def llama_cpp_overrides(path, gc16):
    txt = open(path, encoding="utf-8").read()
    start = txt.index("unicode_ranges_flags")
    body = txt[start:txt.index("};", start)]
    pairs = [(int(a, 16), int(b, 16)) for a, b in re.findall(r"\{0x([0-9A-Fa-f]+), 0x([0-9A-Fa-f]+)\}", body)]
    flags = [0] * MAX_CP
    for (s, f), (e, _) in zip(pairs, pairs[1:]):
        for cp in range(s, min(e, MAX_CP)):
            flags[cp] = f & 0xFF
    out = []  # (first, last, gc)
    for cp in range(MAX_CP):
        llama_gc = LLAMA_FLAG_TO_GC.get(flags[cp])
        if llama_gc is None:
            raise SystemExit(f"unexpected llama.cpp flags {flags[cp]:#x} at U+{cp:04X}")
        if major(llama_gc) == major(GC_NAMES[gc16[cp]]):
            continue
        if out and out[-1][1] == cp - 1 and out[-1][2] == llama_gc:
            out[-1] = (out[-1][0], cp, llama_gc)
        else:
            out.append((cp, cp, llama_gc))
    return out


def hf_known_ccc(cp, ccc16):
    """The canonical combining class HF tokenizers' NFC uses for cp (0 when unknown to it)."""
    c = chr(cp)
    nfc = hf_norm.NFC()
    # Reordering is a stable sort on ccc: 'q' + c + m swaps iff 0 < ccc(m) < ccc(c).
    if ccc16 > 1:
        s = "q" + c + "\u0334"  # U+0334 has ccc 1 in every version
        return ccc16 if nfc.normalize_str(s) != s else 0
    s = "q" + "\u0301" + c  # U+0301 has ccc 230: swaps iff 0 < ccc(c) < 230
    return ccc16 if nfc.normalize_str(s) != s else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp-unicode-data",
                    default="/tmp/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/src/unicode-data.cpp")
    ap.add_argument("-o", "--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "src",
                                                        "tokenizer", "unicode_tables.inc"))
    args = ap.parse_args()
    if ud.unidata_version != "16.0.0":
        raise SystemExit(f"need unicodedata2==16.0.0, found Unicode {ud.unidata_version}")

    gc16 = [GC_INDEX[ud.category(chr(cp))] for cp in range(MAX_CP)]
    gc_ranges = ranges_of(gc16)
    overrides = llama_cpp_overrides(args.llama_cpp_unicode_data, gc16)

    # ---- NFC data, filtered to what HF tokenizers knows.
    nfd_hf = hf_norm.NFD()
    ccc = {}
    dropped_ccc = []
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            continue
        v = ud.combining(chr(cp))
        if v:
            hv = hf_known_ccc(cp, v)
            if hv:
                ccc[cp] = hv
            else:
                dropped_ccc.append(cp)
    decomp = {}
    dropped_decomp = []
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp <= 0xD7A3:
            continue
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        full = ud.normalize("NFD", chr(cp))
        if nfd_hf.normalize_str(chr(cp)) != full:
            dropped_decomp.append(cp)
            continue
        decomp[cp] = [ord(x) for x in full]
    # Primary composites: canonical pairs that NFC recomposes.
    comp = {}
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp <= 0xD7A3 or cp in dropped_decomp:
            continue
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) != 2:
            continue
        if ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) != chr(cp):
            continue  # composition exclusion or non-starter decomposition
        comp[(parts[0], parts[1])] = cp

    # Self-check against HF on every composite/mark pair we know about.
    nfc_hf = hf_norm.NFC()
    for (a, b), c in list(comp.items())[:4000]:
        if nfc_hf.normalize_str(chr(a) + chr(b)) != chr(c):
            raise SystemExit(f"HF does not compose U+{a:04X} U+{b:04X}")

    lines = []
    w = lines.append
    w("// Generated by scripts/ref/tokenizer_gen_unicode.py; do not edit by hand.")
    w(f"// General categories: Unicode {ud.unidata_version} (what HF tokenizers' Oniguruma uses).")
    w("// llama.cpp overrides: its unicode-data.cpp major classes where they differ (15.1 vs 16.0).")
    w("// NFC: ccc/decompositions limited to those HF tokenizers' NFC knows (older Unicode data).")
    w("// clang-format off")
    w(f"static constexpr uint32_t kGcRangeCount = {len(gc_ranges)};")
    w("// (first code point << 8) | general category index (GeneralCategory order).")
    w("static const uint32_t kGcRanges[] = {")
    row = []
    for s, g in gc_ranges:
        row.append(f"0x{(s << 8) | g:08x}")
        if len(row) == 8:
            w("  " + ", ".join(row) + ",")
            row = []
    if row:
        w("  " + ", ".join(row) + ",")
    w("};")
    w(f"static constexpr uint32_t kWhiteSpaceCount = {len(WHITE_SPACE)};")
    w("static const uint32_t kWhiteSpace[] = {" + ", ".join(f"0x{c:04x}" for c in WHITE_SPACE) + "};")
    w(f"static constexpr uint32_t kLlamaCppOverrideCount = {len(overrides)};")
    w("// {first, last, general category} where llama.cpp's major class differs.")
    w("static const uint32_t kLlamaCppOverrides[][3] = {")
    for s, e, g in overrides:
        w(f"  {{0x{s:05x}, 0x{e:05x}, {GC_INDEX[g]}}},")
    w("};")
    ccc_ranges = []
    for cp in sorted(ccc):
        if ccc_ranges and ccc_ranges[-1][1] == cp - 1 and ccc_ranges[-1][2] == ccc[cp]:
            ccc_ranges[-1][1] = cp
        else:
            ccc_ranges.append([cp, cp, ccc[cp]])
    w(f"static constexpr uint32_t kCccRangeCount = {len(ccc_ranges)};")
    w("static const uint32_t kCccRanges[][3] = {  // {first, last, ccc}")
    for s, e, v in ccc_ranges:
        w(f"  {{0x{s:05x}, 0x{e:05x}, {v}}},")
    w("};")
    flat = []
    entries = []
    for cp in sorted(decomp):
        entries.append((cp, len(flat), len(decomp[cp])))
        flat.extend(decomp[cp])
    w(f"static constexpr uint32_t kDecompCount = {len(entries)};")
    w("static const uint32_t kDecompIndex[][3] = {  // {code point, offset, length} into kDecompData")
    for cp, off, n in entries:
        w(f"  {{0x{cp:05x}, {off}, {n}}},")
    w("};")
    w("static const uint32_t kDecompData[] = {")
    for i in range(0, len(flat), 10):
        w("  " + ", ".join(f"0x{c:05x}" for c in flat[i:i + 10]) + ",")
    w("};")
    w(f"static constexpr uint32_t kCompCount = {len(comp)};")
    w("static const uint32_t kComp[][3] = {  // {first, second, composite}, sorted by (first, second)")
    for (a, b), c in sorted(comp.items()):
        w(f"  {{0x{a:05x}, 0x{b:05x}, 0x{c:05x}}},")
    w("};")
    w("// clang-format on")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(gc_ranges)} gc ranges, {len(overrides)} llama.cpp overrides, "
          f"{len(ccc_ranges)} ccc ranges, {len(entries)} decompositions, {len(comp)} compositions")
    print(f"NFC entries unknown to HF tokenizers (dropped): {len(dropped_ccc)} ccc, "
          f"{len(dropped_decomp)} decompositions; first ccc: "
          + " ".join(f"U+{c:04X}" for c in dropped_ccc[:12]))


if __name__ == "__main__":
    sys.exit(main())
