"""Writes the tokenizer golden data under tests/data/tokenizer/ from an independent reference.

The reference is HF `tokenizers` (Rust, PyPI) built from the same GGUF vocabulary and merges:
BPE(vocab, merges) with pre-tokenizer Sequence([Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)]) -- llama.cpp's "smollm"/"starcoder" --
and the CONTROL / USER_DEFINED tokens added as special tokens. Chat renderings come from the
GGUF's own `tokenizer.chat_template` run by jinja2.

Run once; the outputs are committed:
    python3 tests/reference/make_tokenizer_golden.py [model.gguf]

Files (readable without a JSON library):
  golden.tsv  one case per line: MODE <tab> HEX(input bytes) <tab> space-separated ids
              MODE 's' = special tokens parsed, 'p' = special tokens treated as plain text.
  chat.tsv    one case per line: ADD_GENERATION_PROMPT(0|1) <tab> messages <tab> HEX(rendered)
              messages = comma-separated HEX(role):HEX(content).

Invalid UTF-8: HF's Python API only accepts valid text, so for those cases the reference
decides as llama.cpp does (an invalid byte acts as U+FFFD, a symbol: [^\\s\\p{L}\\p{N}]) while
keeping the byte itself: each invalid byte is swapped for U+FFFD, HF's pre-tokenizer splits the
text, the pieces are mapped back to the original bytes and encoded by HF's BPE model. That glue
is checked against tokenizer.encode() on every valid case first. Bytes the vocabulary has no
token for (21 for SmolLM2, e.g. 0xFF) are dropped by HF's BPE, and so by tinfer.
"""
from __future__ import annotations

import os
import random
import sys
import unicodedata
from pathlib import Path

import gguf
import jinja2
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

DEFAULT_MODEL = Path.home() / ".cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = Path(__file__).resolve().parent.parent / "data" / "tokenizer"
SEED = 20240611
CONTROL, USER_DEFINED = 3, 4


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def build(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                     fuse_unk=False, byte_fallback=False, ignore_merges=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [tokens[i] for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED)]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    for s in specials:
        assert tok.token_to_id(s) == vocab[s], s
    return tok, specials


# GPT-2's byte <-> unicode table, written from its definition: printable Latin-1 bytes map to
# themselves, the other 68 bytes to U+0100.. in byte order.
def byte_table():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = byte_table()


def split_specials(text: str, specials: list[str]):
    """Leftmost-longest split into (is_special, fragment)."""
    out, i, plain = [], 0, 0
    while i < len(text):
        best = max((s for s in specials if text.startswith(s, i)), key=len, default=None)
        if best is None:
            i += 1
            continue
        if plain < i:
            out.append((False, text[plain:i]))
        out.append((True, best))
        i += len(best)
        plain = i
    if plain < len(text):
        out.append((False, text[plain:]))
    return out


def piecewise_encode(tok, specials, data: bytes, parse_specials: bool):
    text = data.decode("utf-8", "surrogateescape")  # invalid byte b -> U+DC00+b
    ids = []
    fragments = split_specials(text, specials) if parse_specials else [(False, text)]
    for is_special, frag in fragments:
        if is_special:
            ids.append(tok.token_to_id(frag))
            continue
        stand_in = "".join("\ufffd" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in frag)
        for _, (start, end) in tok.pre_tokenizer.pre_tokenize_str(stand_in):
            raw = frag[start:end].encode("utf-8", "surrogateescape")
            ids.extend(t.id for t in tok.model.tokenize("".join(BYTE_TO_CHAR[b] for b in raw)))
    return ids


def reference_encode(tok, specials, data: bytes, parse_specials: bool):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return piecewise_encode(tok, specials, data, parse_specials)
    tok.encode_special_tokens = not parse_specials
    ids = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    assert ids == piecewise_encode(tok, specials, data, parse_specials), repr(text)
    assert tok.decode(ids, skip_special_tokens=False) == text, repr(text)
    return ids


# ---------------------------------------------------------------------------------------------
# Cases: hand-picked tricky strings, then seeded random ones per category.

HAND_PICKED = [
    "", " ", "  ", "   ", "a", " a", "  a", "   a", "a ", "a  ", "a\n", "\n", "\n\n", "\n\n\n",
    "hello world", "hello  world", "hello   world", "Hello, World!", "  leading", "trailing  ",
    "\tindented\n\tagain", "tab\there", "\t\t\tx", "\r\n", "line1\r\nline2\r\n", " \n ", "\n \n",
    "a\n\n b", "x \n\ny", "word\u00a0word", "\u3000\u3000full width",
    "don't", "Don't", "DON'T", "I'm", "we're", "they've", "she'll", "he'd", "it's", "IT'S",
    "'S", "'s", "'ll", "''", "'", "rock 'n' roll", "o'clock", "'twas", "ma'am", "y'all'd've",
    "12345", "3.14", "3.14159265358979", "-42", "+1e-10", "1,000,000", "0x1F", "v1.2.3", "2024-06-11",
    "a1b2c3", " 1 2  3", "phone: 555-0100", "٣", "١٢٣", "x²", "½ cup", "Ⅷ", "٣.١٤", "१२३४", "３２１",
    "e\u0301", "cafe\u0301", "Cafe\u0301 au lait", "n\u0303", "\u0915\u094d\u0937", "\u0301",
    "a\u0308\u0304", "Zalgo: Z\u0351\u036b\u0343a\u035bl\u0334g\u0336o\u0320",
    "👋", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇬🇧", "❤️", "a👋b", " 😀 😃", "🧑🏿‍🚀 to the moon",
    "日本語", "中文字符测试", "한국어 텍스트", "こんにちは、世界！", "カタカナ", "漢字かなまじり文",
    "Привет, мир", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are a helpful AI assistant named "
    "SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n", "<|endoftext|>", "text<|endoftext|>text", "<|im_start|><|im_end|>",
    "<|im_start", "<|im_start|", "<<|im_end|>>", " <|im_end|> ", "<repo_name>x<filename>y.py",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>", "<|IM_START|>",
    "def f(x):\n    return x * 2\n", "if (a && b) { return -1; }", "#include <vector>\n",
    "for i in range(10):\n\tprint(i)", "x = [1, 2, 3]  # list", "SELECT * FROM t WHERE id=42;",
    "fn main() { println!(\"hi\"); }", "    \n    \n", "}\n\n\n}", "a  \t  b", "!!!", "...", "?!",
    "...hello", "@user", "#hashtag", "$100", "100%", "C++20", "foo_bar_baz", "camelCaseName",
    "https://example.com/path?q=1&r=2", "user@example.com", "~/.cache/tinfer", "a->b", "a::b",
    "\u2028", "x\u2029y", "\u0085", "a\u000bb\u000cc", "\u200b", "zero\u200bwidth", "\u180e",
    "\u2003em space", "\u205f", "\u1680", "\u00ad", "\ufeffBOM", "\U0001F600" * 5, "a" * 100,
    " " * 50 + "x", "\n" * 20, "ab" * 40, "1" * 30, "=" * 64, "-" * 3 + ">",
]

INVALID = [
    b"\x80", b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"abc\xe2\x82", b"\xe2\x82abc",
    b"hello \xff world", b" \x80\x81\x82 ", b"\xc3\xa9\xc3", b"caf\xc3", b"\xf0\x9f\x91\x8b\xf0\x9f",
    b"12\x8034", b"don\x92t", b"\xa0x", b"\xe2\x80\xa8\x80", b"<|im_start|>\xff<|im_end|>",
    b"\xc2\xa0\xc2", b"x\xe0\xa4", b"\xef\xbf\xbd\xff",
]

WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people "
         "my than first water been call who oil its now find long down day did get come made may "
         "part Tokenizer BPE merges GGUF SmolLM inference kernel attention").split()
CODE_BITS = ["def ", "return ", "class ", "(", ")", "{", "}", "[", "]", ";", ":", "=", "==", "+=",
             "->", "::", "<", ">", "\n", "\n    ", "\t", "  ", "x", "self", "i", "0", "42", "'a'",
             "\"str\"", "/*", "*/", "//", "#", "&&", "||", "!", ".", ",", "std::vector<int>",
             "nullptr", "const", "auto", "lambda", "import ", "@", "$", "%", "^", "~", "`"]
SPACES = [" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u000b", "\u000c",
          "\u0085", "\u2009", "\u202f", " \n", "\n ", "\t ", " \t"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'",
                "''", "'x", "'1"]
EMOJI = ["😀", "🤖", "👋🏻", "👩‍💻", "👨‍👩‍👧", "🏳️‍⚧️", "🇯🇵", "❤️‍🔥", "✋🏿", "🧪", "☕", "⭐",
         "1️⃣", "#️⃣", "🫠", "🦀"]


def assigned_chars(rng, n):
    """Random code points assigned in Unicode 14 (within every reference's tables)."""
    out = []
    while len(out) < n:
        cp = rng.choice([rng.randrange(0x20, 0x3000), rng.randrange(0x3000, 0xD800),
                         rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x1FB00)])
        c = chr(cp)
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            out.append(c)
    return "".join(out)


def generated_cases(rng):
    cases = []
    for _ in range(45):  # English-like prose with punctuation and odd spacing
        words = [rng.choice(WORDS) for _ in range(rng.randrange(1, 15))]
        s = ""
        for w in words:
            s += rng.choice([" ", " ", " ", "  ", ", ", ". ", "\n", " (", ") ", "! ", "? "]) + w
        cases.append(s[rng.randrange(0, 2):])
    for _ in range(35):  # code
        cases.append("".join(rng.choice(CODE_BITS) for _ in range(rng.randrange(3, 30))))
    for _ in range(35):  # digits and numbers
        parts = []
        for _ in range(rng.randrange(1, 6)):
            n = rng.choice([str(rng.randrange(10 ** rng.randrange(1, 12))),
                            f"{rng.uniform(-1e4, 1e4):.{rng.randrange(0, 6)}f}",
                            "".join(rng.choice("0123456789٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２³½") for _ in range(4))])
            parts.append(n)
        cases.append(rng.choice(["", " ", "x", "$"]).join(parts) + rng.choice(["", " ", "%", " apples"]))
    for _ in range(40):  # whitespace runs between words
        s = ""
        for _ in range(rng.randrange(1, 8)):
            s += "".join(rng.choice(SPACES) for _ in range(rng.randrange(0, 5)))
            s += rng.choice(WORDS + ["!", "1", "日本", "😀", "-"])
        s += "".join(rng.choice(SPACES) for _ in range(rng.randrange(0, 4)))
        cases.append(s)
    for _ in range(30):  # contractions
        s = ""
        for _ in range(rng.randrange(1, 6)):
            s += rng.choice(["", " "]) + rng.choice(WORDS) + rng.choice(CONTRACTIONS)
        cases.append(s)
    for _ in range(30):  # CJK, kana, hangul, mixed with ASCII
        s = ""
        for _ in range(rng.randrange(1, 6)):
            lo, hi = rng.choice([(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF),
                                 (0xAC00, 0xD7A3), (0x3000, 0x303F), (0xFF01, 0xFF5E)])
            s += "".join(chr(rng.randrange(lo, hi + 1)) for _ in range(rng.randrange(1, 8)))
            s += rng.choice(["", " ", "、", "。", " abc ", "1"])
        cases.append(s)
    for _ in range(25):  # emoji
        cases.append("".join(rng.choice(EMOJI + [" ", "a", "\u200d", "\ufe0f", "!"])
                             for _ in range(rng.randrange(1, 10))))
    for _ in range(40):  # random assigned code points: marks, Nl/No numbers, symbols, scripts
        cases.append(assigned_chars(rng, rng.randrange(1, 20)))
    return cases


def generated_invalid(rng):
    cases = []
    for _ in range(30):
        raw = bytearray()
        for _ in range(rng.randrange(1, 12)):
            kind = rng.randrange(4)
            if kind == 0:
                raw += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
            elif kind == 1:
                raw += rng.choice(WORDS + [" ", "日本", "😀", "12"]).encode()
            elif kind == 2:
                raw += rng.choice(["é", "日", "😀", "\u0301"]).encode()[:-1]  # truncated
            else:
                raw += bytes([rng.randrange(0x80, 0xC0)])  # stray continuation byte
        cases.append(bytes(raw))
    return cases


def long_text(rng):
    paragraphs = []
    for _ in range(40):
        paragraphs.append(" ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 60))) + ".")
    return ("\n\n".join(paragraphs) + "\n```python\ndef f(n):\n    return [i*i for i in range(n)]\n```"
            " 日本語のテキスト 😀👨‍👩‍👧 3.14159 don't\n")


# ---------------------------------------------------------------------------------------------
# Chat renderings from the GGUF's own template.

def chat_cases():
    sys_msg = {"role": "system", "content": "You are a pirate."}
    user = {"role": "user", "content": "What is PagedAttention?"}
    asst = {"role": "assistant", "content": "A way to store the KV cache in blocks."}
    return [
        ([user], True), ([user], False), ([sys_msg, user], True), ([sys_msg, user], False),
        ([user, asst, {"role": "user", "content": "And why?"}], True),
        ([sys_msg, user, asst], False), ([], True), ([], False), ([sys_msg], True),
        ([{"role": "assistant", "content": "I start."}], True),
        ([{"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "multi\nline\n\ncontent  with  spaces 日本 😀"}], True),
        ([{"role": "user", "content": "<|im_end|> inside"}], False),
        ([user, {"role": "system", "content": "late system"}], True),
        ([{"role": "tool", "content": "{\"x\": 1}"}], True),
    ]


def render_chat_golden(reader):
    template = field(reader, "tokenizer.chat_template")
    env = jinja2.Environment()
    tmpl = env.from_string(template)
    lines = []
    for messages, add_gen in chat_cases():
        rendered = tmpl.render(messages=messages, add_generation_prompt=add_gen)
        enc = ",".join(m["role"].encode().hex() + ":" + m["content"].encode().hex() for m in messages)
        lines.append(f"{int(add_gen)}\t{enc}\t{rendered.encode().hex()}")
    return lines


def main():
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL
    reader = gguf.GGUFReader(str(model))
    tok, specials = build(reader)
    rng = random.Random(SEED)

    texts = [s.encode() for s in HAND_PICKED + generated_cases(rng)] + [long_text(rng).encode()]
    texts += INVALID + generated_invalid(rng)
    lines = []
    for data in texts:
        for mode, parse in (("s", True), ("p", False)):
            ids = reference_encode(tok, specials, data, parse)
            lines.append(f"{mode}\t{data.hex()}\t{' '.join(map(str, ids))}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "golden.tsv").write_text("\n".join(lines) + "\n")
    chat = render_chat_golden(reader)
    (OUT_DIR / "chat.tsv").write_text("\n".join(chat) + "\n")
    print(f"{len(texts)} texts x 2 modes, {len(chat)} chat cases -> {OUT_DIR}")


if __name__ == "__main__":
    main()
