#!/usr/bin/env python3
"""Deterministic hard test strings for tokenizer parity checks (HF tokenizers, llama.cpp).

hard_strings(n, specials, seed) returns n strings mixing many scripts, emoji ZWJ/skin-tone
sequences, combining marks in canonical and non-canonical order, long digit runs, code, runs of
spaces/tabs/CR/LF, Unicode whitespace, contractions (incl. U+017F), special tokens embedded in
text, and unusual but valid UTF-8 (controls, noncharacters, private use, unassigned, U+10FFFF).
Only `random.Random(seed)` drives choices, so the list is stable across runs and machines.

Run directly to print a sample: python3 scripts/ref/tokenizer_hard_strings.py [N]
"""
import random
import sys

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged; don't you think? I'M SURE they'RE right, we'VE said it'LL work.",
    "Pack my box with five dozen liquor jugs!! (really) -- 100% sure...",
    "Café déjà vu: naïve façade, coöperate, Œuvre, Ærøskøbing, crème brûlée.",
    "Größenwahn: Straße, Fußgänger, ÄÖÜ äöü ẞ.",
    "¿Dónde está el niño? ¡Olé! Pingüino, año, señor.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "İstanbul'da ıspanak yedik; IĞDIR, şeker, çiçek.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Їжак ґедзь: щастя, європейський, Ґанок.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ἐν ἀρχῇ ἦν ὁ λόγος.",
    "עברית: שלום עולם, אֱלֹהִים בְּרֵאשִׁית.",
    "العربية: مَرْحَبًا بِالْعَالَمِ، كيف حالك؟ ١٢٣٤٥٦٧٨٩٠",
    "فارسی: سلام دنیا، ۱۲۳۴۵۶۷۸۹۰ کتاب‌ها",
    "हिन्दी: नमस्ते दुनिया, क्षत्रिय ज्ञान श्री ०१२३४५६७८९",
    "বাংলা: আমি বাংলায় গান গাই। ০১২৩৪৫",
    "தமிழ்: வணக்கம் உலகம், ஸ்ரீ க்ஷ",
    "తెలుగు: నమస్కారం ప్రపంచం",
    "ไทย: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง ๑๒๓",
    "ລາວ: ສະບາຍດີ ໂລກ",
    "ខ្មែរ: សួស្តីពិភពលោក",
    "မြန်မာ: မင်္ဂလာပါ ကမ္ဘာ",
    "ქართული: გამარჯობა მსოფლიო",
    "Հայերեն: Բարեւ աշխարհ",
    "አማርኛ: ሰላም ለዓለም",
    "中文：你好，世界！自然语言处理很有趣。我们今天测试分词器的速度。",
    "繁體中文：臺灣的鐵路與機場，龜鑑體驗。",
    "日本語：こんにちは世界！カタカナとひらがな、漢字を混ぜた文章です。ｶﾞｷﾞｸﾞ",
    "한국어: 안녕하세요 세계! 한글은 아름답습니다. ㄱㄴㄷ ㅏㅑ",
    "Tiếng Việt: Xin chào thế giới, người Việt Nam, Ứng dụng, đặc biệt.",
    "Монгол: Сайн байна уу? ᠮᠣᠩᠭᠣᠯ",
    "བོད་ཡིག: བཀྲ་ཤིས་བདེ་ལེགས།",
    "සිංහල: ආයුබෝවන් ලෝකය",
    "ᏣᎳᎩ: ᎣᏏᏲ ᏙᎯᏧ",
    "Ελληνικά και English mixed με 中文 and العربية in one line.",
    "Math: ∀x∈ℝ, ∃y: x²+y²≤1 ⇒ ∫₀¹ f(x)dx ≈ π/4 ± ε; ½ ¾ ⅓ Ⅻ ① ⑳",
    "Currency: $100, €99.99, £5, ¥1000, ₹500, ₿0.001, ₩30000",
    "Typography: “quotes” ‘single’ — em dash – en dash … ellipsis • bullet ‰ † ‡ §¶",
    "Fullwidth：ＡＢＣ　ａｂｃ　１２３！？",
]

EMOJI = [
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "👍🏿", "👋🏻", "🧑🏾‍🤝‍🧑🏼", "❤️‍🔥", "🇺🇸", "🇯🇵🇫🇷",
    "1️⃣", "#️⃣", "☺️", "✌🏽", "🤦‍♂️", "🫠", "🥲", "😀😃😄😁", "🐈‍⬛", "👁️‍🗨️", "🏃🏻‍♀️‍➡️",
    "\U0001F9D1\u200D\U0001F384", "\u2764\uFE0F", "\U0001F469\U0001F3FB\u200D\u2764\uFE0F\u200D\U0001F48B\u200D\U0001F468\U0001F3FF",
]

COMBINING = [
    "e\u0301", "a\u0308\u0301", "o\u0323\u0302", "a\u0301\u0323", "n\u0303", "A\u030A", "\u1100\u1161\u11A8",
    "\u1112\u1161\u11AB\u1100\u1173\u11AF", "Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334\u0319\u0324",
    "q\u0307\u0323", "s\u0323\u0307", "\u0915\u093C\u0937", "\u0928\u093F", "\u05D1\u05BC\u05B0", "\u0627\u064E\u0644",
    "\u0301abc", "\u0300\u0300\u0300", "x\u20DD", "\u00E9\u0301", "\u212B", "\u2126", "\uFB01", "\u1E9B\u0323",
    "i\u0307\u0301", "\u0041\u030A\u0327", "\u0063\u0327\u0301", "\u0B47\u0B3E", "\u0DD9\u0DCF\u0DCA",
    "\U000110A5\U000110BA", "\u1D15E", "\U0001D15E\U0001D165", "\u0F73", "\u0F75\u0F71",
]

CODE = [
    "def foo(x, y):\n    return [i * 2 for i in range(x) if i % y == 0]  # comment\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "const f = async (a) => { await fetch(`https://x.io/api?q=${a}&n=10`); };\r\n",
    "{\"key\": \"value\", \"list\": [1, 2.5e-10, null, true], \"nested\": {\"a\": \"\\u00e9\"}}",
    "<div class=\"x\"><p>Hello &amp; welcome</p><br/></div>",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%o%' ORDER BY id DESC;",
    "for i in $(seq 1 10); do echo \"$i\" | grep -E '^[0-9]+$' >> out.txt; done",
    "if (x != null && y !== undefined || z <= 0) { a += b; c -= d; e *= f; g /= h; }",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "    \t  mixed_indent = True\n\t\tdeep = {'a': [1,2,{'b': None}]}\n",
    "regex = r'(?i:\\d{1,3}|[^\\s\\p{L}])+'",
    "x=1;y=2;z=x**y//3%4^5|6&7~8<<9>>10",
    "__init__ __name__ == '__main__' self._private_var",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }",
    "https://example.com/path/to/page.html?query=1&lang=en#section-2",
    "user@example.com, first.last+tag@sub.domain.co.uk",
    "C:\\Users\\name\\Documents\\file (1).txt",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t\n",
    "\u00A0", "\u2003", "\u3000", "\u200B", "\uFEFF", "\u000B", "\u000C", "\u0085", "\u2028", "\u2029", "\u1680",
    "\u202F", "\u205F", "\u180E", "\u001C\u001D\u001E\u001F", " \u00A0 ", "\t \t", "\n\t\n", "\r\r\n\n",
]

CONTRACTIONS = [
    "don't", "DON'T", "it's", "IT'S", "we're", "WE'RE", "you've", "I'm", "I'M", "we'll", "WE'LL", "he'd",
    "it'ſ", "'s", "'S", "'re'", "''s", "'t'", "o'clock", "rock'n'roll", "it’s", "'ll've", "'ſt", "x'Ll", "'D",
    "'ﬆ", "'\u212A", "' s", "'\u0073\u0307",
]

WEIRD = [
    "\u0000", "\u0001\u0002\u0003", "\u007F", "\u0080\u0081\u009F", "\uFDD0", "\uFFFE", "\uFFFF", "\U0001FFFE",
    "\U0010FFFF", "\uE000\uF8FF", "\U000F0000", "\U00100000", "\u0378", "\U0002FFFF", "\uFFFD", "\U0001D400",
    "\U00011F04\U00011F05", "\U00010D50\U00010D51", "\U000323B0", "\U0001E030", "\U0001E290", "\u0897abc",
    "\u2066\u2067\u2069", "\u200E\u200F", "\u00AD", "\u034F", "\uFE0F", "\U000E0041\U000E007F", "\u061C",
    "\U0001F1E6", "\u0600\u0601", "\U00013430", "\u1FFF", "\U0002A6DF", "\U00031350", "\U0002EBF0",
]

DIGITS = "0123456789"
OTHER_DIGITS = ["٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹⁰", "½¼¾", "ⅠⅡⅢⅫ",
                "①②③", "𝟘𝟙𝟚", "〇一二三", "፩፪፫", "๑๒๓"]

CJK_RUNS = ["自然语言处理", "我们今天测试分词器的速度", "こんにちはせかい", "カタカナテスト", "漢字かな交じり文",
            "龥龦鿿", "가나다라마바사", "ｱｲｳｴｵ", "々〆〤"]


def _rand_cp(r):
    """A random Unicode scalar value, biased towards assigned planes."""
    while True:
        plane = r.choice([0, 0, 0, 0, 1, 2, 3, 14, 15, 16])
        cp = plane * 0x10000 + r.randrange(0x10000)
        if 0xD800 <= cp < 0xE000:
            continue
        return chr(cp)


def _digits(r):
    n = r.choice([1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 20, 33, 64])
    s = "".join(r.choice(DIGITS) for _ in range(n))
    if r.random() < 0.3:
        s = r.choice(["", "-", "+", "$", "#", "v", " "]) + s + r.choice(["", ".5", ",000", "%", "px", "th", "e10", " "])
    return s


def _fragment(r, specials):
    k = r.random()
    if k < 0.22:
        s = r.choice(SENTENCES)
        if r.random() < 0.5:
            words = s.split(" ")
            a = r.randrange(len(words))
            s = " ".join(words[a:a + r.randrange(1, 6)])
        return s
    if k < 0.32:
        return r.choice(EMOJI)
    if k < 0.40:
        return r.choice(COMBINING)
    if k < 0.50:
        return _digits(r) if r.random() < 0.75 else r.choice(OTHER_DIGITS)
    if k < 0.60:
        s = r.choice(CODE)
        return s if r.random() < 0.5 else s[r.randrange(len(s)):]
    if k < 0.72:
        return r.choice(WHITESPACE) * r.choice([1, 1, 1, 2, 3, 5, 17])
    if k < 0.77:
        return r.choice(CONTRACTIONS)
    if k < 0.82:
        return r.choice(WEIRD)
    if k < 0.87:
        return r.choice(CJK_RUNS)
    if k < 0.93 and specials:
        t = r.choice(specials)
        m = r.random()
        if m < 0.6:
            return t
        if m < 0.8:
            return t[: r.randrange(1, len(t))] if len(t) > 1 else t  # a partial token
        return " " + t + " "
    return "".join(_rand_cp(r) for _ in range(r.randrange(1, 6)))


def hard_strings(n=3000, specials=(), seed=20240611):
    """n deterministic hard strings; `specials` are the tokenizer's added/special token texts."""
    r = random.Random(seed)
    specials = list(specials)
    out = []
    # Fixed edge cases first.
    fixed = ["", " ", "a", "\n", "  \n\n  ", "'s", "I'm", "hello world", "Hello World!", "   leading", "trailing   ",
             "\t\tindented", "a\r\nb", "a\rb", "1234567890", "12345678901234567890123", "ab12cd345ef6789",
             "e\u0301", "\u00e9", "\u1100\u1161", "👨‍👩‍👧‍👦", "\U0010FFFF", "\u0000", "\uFEFFbom", "x" * 300,
             " " * 100, "\n" * 40, "9" * 200, "自然语言处理" * 20, "\u0301" * 10, "a\u0301" * 30, "!!!???...",
             "'''", "' s", "don't stop", "IT'S", "it'ſ"] + list(specials)
    out.extend(fixed)
    while len(out) < n:
        k = r.random()
        if k < 0.08:  # pure code-point soup
            s = "".join(_rand_cp(r) for _ in range(r.randrange(1, 30)))
        elif k < 0.12:  # long strings
            s = "".join(_fragment(r, specials) for _ in range(r.randrange(30, 120)))
        elif k < 0.16:  # runs of one kind
            unit = r.choice([" ", "\t", "\n", "\r\n", "\u3000", "0", "a", "中", "é", "e\u0301", "👍🏽", "-", "=", "<|"])
            s = r.choice(["", "x", "  ", "\n"]) + unit * r.randrange(2, 200) + r.choice(["", "y", " z", "\n", "1"])
        else:
            s = "".join(_fragment(r, specials) for _ in range(r.randrange(1, 9)))
        out.append(s)
    return out[:n]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for s in hard_strings(n, ["<|im_start|>", "<|im_end|>"]):
        print(repr(s))
