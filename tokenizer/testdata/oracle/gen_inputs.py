"""Generates the inputs for hf_oracle.py: texts and id sequences, deterministically.

Run from the tokenizer folder:  python3 testdata/oracle/gen_inputs.py > /tmp/oracle_inputs.json
"""
import json
import random

rng = random.Random(20261130)

FRAGMENTS = [
    # ASCII words, contractions (case-folded ones and the long s)
    "hello", "Hello", "HELLO", " world", "the", " quick", "brown", "I'm", "they'll", "we've", "didn't",
    "'s", "'S", "'LL", "'Re", "'ve", "'ſ", "ſ", "'d", "'x", "''", "'", "it's", "IT'S",
    # digits in many scripts and sizes
    "0", "7", "42", "12345", "3.14159", "1,000,000", "٣٤٥", "１２３", "²", "½", "Ⅻ", "४२", "๓",
    # punctuation and symbols
    ".", ",", "!", "?", "...", "--", "->", "//", "#", "$", "&&", "(", ")", "[", "]", "{", "}", "\"", "`",
    "«", "»", "—", "…", "、", "。", "！", "©", "™", "€", "±", "∑", "→",
    # whitespace of every kind
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\v", "\f", " \n ", "\t\t\n", "\u00a0", "\u2003",
    "\u3000", "\u2028", "\u2029", "\u0085", "\u200b", "\ufeff", "        ", "\n   \n",
    # letters of other scripts, with marks
    "naïve", "café", "résumé", "e\u0301", "a\u0308", "Ünïcödé", "ß", "ẞ", "İstanbul", "ǅ", "ﬁ",
    "Привет", "мир", "Ελληνικά", "日本語", "のテキスト", "数字", "中文字符", "한국어", "مرحبا", "العالم",
    "हिन्दी", "ภาษาไทย", "עברית", "ｆｕｌｌ", "ｗｉｄｔｈ",
    # emoji and sequences
    "🙂", "🤖", "🚀", "👩\u200d💻", "🇫🇷", "❤️", "👍🏽", "🏳️‍🌈",
    # private use, replacement char, noncharacters, astral letters
    "\ue000", "\ufffd", "\U0010fffd", "𝔘𝔫𝔦", "𐍈",
    # tokens that look like special tokens, and pieces of them
    "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
    "<tool_call>", "<|im_", "im_end|>", "<|", "|>", "<mask>", "[SEP]", "<0x41>",
    # characters that are special to the tokenizers themselves
    "▁", "▁▁", "Ġ", "Ċ", "##", "</w>", "_",
    # code
    "def f(x):", "    return x", "x = a[i] + b->c;", "if (n >= 0x1F) {", "}", "printf(\"%d\\n\", n);",
]


def random_text(max_frags):
    n = rng.randint(0, max_frags)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.75:
            parts.append(rng.choice(FRAGMENTS))
        elif r < 0.85:
            parts.append(" ")
        elif r < 0.95:
            # random code points from interesting ranges
            lo, hi = rng.choice([(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x52f), (0x590, 0x6ff),
                                 (0x900, 0x97f), (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3),
                                 (0x2000, 0x206f), (0xff00, 0xffef), (0x1f300, 0x1faff), (0x0, 0x1f)])
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 4))))
        else:
            parts.append(rng.choice([" " * rng.randint(2, 30), "\n" * rng.randint(2, 6), "a" * rng.randint(2, 80)]))
    return "".join(parts)


texts = ["", " ", "a", "Hello, world!", " leading space", "trailing space ", "two  spaces", "\n", "   ",
         "<s>not special?</s>", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
         "a <mask> b", "a<mask>b", " <mask> ", "<mask>", "x  <mask>  y", "<think>\nok\n</think>\n\nDone."]
texts += [random_text(12) for _ in range(700)]
texts += [random_text(60) for _ in range(60)]


def id_lists(vocab, specials, byte_ids, count):
    out = []
    for _ in range(count):
        n = rng.randint(0, 24)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.35 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif r < 0.45 and specials:
                ids.append(rng.choice(specials))
            else:
                ids.append(rng.randrange(vocab))
        out.append(ids)
    return out


inputs = {
    "texts": texts,
    "ids": {
        # llama2: ids 3..258 are the <0xXX> byte-fallback tokens; 0, 1, 2 are <unk>, <s>, </s>.
        "llama2": id_lists(32000, [0, 1, 2], list(range(3, 259)), 400),
        # qwen3: the first 256 ids are mostly single byte-level characters; specials from 151643.
        "qwen3": id_lists(151669, list(range(151643, 151669)), list(range(0, 256)), 400),
        "synthetic": id_lists(600, [], [], 120),
    },
}
print(json.dumps(inputs, ensure_ascii=False))
