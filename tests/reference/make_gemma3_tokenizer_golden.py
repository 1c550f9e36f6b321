"""Writes Gemma 3's tokenizer golden data under tests/data/tokenizer/ from independent references.

The reference is Google's `sentencepiece` (PyPI), the library Gemma's tokenizer was trained and
shipped with, loaded with a model built from the same GGUF: every token with its score and type,
BPE, byte fallback, identity normalization, add_dummy_prefix = the file's
tokenizer.ggml.add_space_prefix. Two changes make it read the GGUF as llama.cpp does: the
user-defined runs of spaces, which the GGUF spells with ' ', are given back SentencePiece's
'▁' spelling (SentencePiece matches them after turning spaces into '▁'), and <unk> is typed
UNKNOWN (the GGUF types it CONTROL; SentencePiece insists on one unknown piece). Control tokens
(<start_of_turn>, <bos>, ...) are split out of the text by this script first (leftmost,
longest) when special tokens are parsed: SentencePiece never reads them from text.

When llama-cpp-python is installed (built outside the repository: `pip install
llama-cpp-python`), the same cases are also encoded by llama.cpp (vocab_only) and every
disagreement with SentencePiece is printed; with --hf, so are transformers' GGUF conversion's
(a Unigram model, see tests/reference/README.md). Neither changes what is written.

Run once; the outputs are committed:
    python3 tests/reference/make_gemma3_tokenizer_golden.py [model.gguf] [--hf]

Files (the formats of make_tokenizer_golden.py):
  gemma3_golden.tsv  MODE <tab> HEX(input) <tab> ids <tab> HEX(reference decode of the ids,
                     control tokens left out)
  gemma3_chat.tsv    ADD_GENERATION_PROMPT <tab> messages <tab> HEX(rendered), rendered by Gemma
                     3's chat template (below) with jinja2 and bos_token = "" (tinfer leaves BOS
                     to the tokenizer).

Invalid UTF-8 is left out: SentencePiece's Python API takes str only. The C++ test checks it on
its own (one <0xNN> per invalid byte).
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import gguf
import jinja2
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tokenizer_golden as common  # noqa: E402  (the shared case lists)

DEFAULT_MODEL = Path.home() / ".cache/tinfer/models/gemma-3-270m-q4_k_m.gguf"
OUT_DIR = Path(__file__).resolve().parent.parent / "data" / "tokenizer"
SEED = 20261201
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Gemma 3's chat template (google/gemma-3-*-it, tokenizer_config.json), verbatim.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n")


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class Reference:
    """SentencePiece over the GGUF's vocabulary.

    split_specials=True (the golden data): control tokens (when parsed) and user-defined tokens
    (always) are split out of the raw text first, leftmost-longest, as llama.cpp does, and
    SentencePiece merges the fragments between them; the GGUF's user-defined runs of spaces keep
    their ' ' spelling, which SentencePiece (matching after spaces became '▁') never matches.

    split_specials=False: SentencePiece as Gemma's original tokenizer.model has it, the runs of
    spaces spelled '▁▁'..., SentencePiece matching the user-defined tokens itself; only control
    tokens are split out first. It differs where the text holds U+2581 itself: SentencePiece then
    matches '▁▁' on it, llama.cpp (and tinfer) only on real spaces.
    """

    def __init__(self, reader, split_specials=True):
        assert field(reader, "tokenizer.ggml.model") == "llama"
        self.tokens = field(reader, "tokenizer.ggml.tokens")
        self.types = field(reader, "tokenizer.ggml.token_type")
        scores = field(reader, "tokenizer.ggml.scores")
        self.add_space_prefix = bool(field(reader, "tokenizer.ggml.add_space_prefix", True))
        assert not self.add_space_prefix  # else each fragment would need its own prefix space
        unk = field(reader, "tokenizer.ggml.unknown_token_id")
        proto = sp_model.ModelProto()
        proto.trainer_spec.model_type = sp_model.TrainerSpec.BPE
        proto.trainer_spec.vocab_size = len(self.tokens)
        proto.trainer_spec.byte_fallback = True
        proto.trainer_spec.unk_id = unk
        proto.trainer_spec.bos_id = field(reader, "tokenizer.ggml.bos_token_id")
        proto.trainer_spec.eos_id = field(reader, "tokenizer.ggml.eos_token_id")
        proto.trainer_spec.pad_id = field(reader, "tokenizer.ggml.padding_token_id", -1)
        proto.normalizer_spec.name = "identity"
        proto.normalizer_spec.add_dummy_prefix = self.add_space_prefix
        proto.normalizer_spec.remove_extra_whitespaces = False
        proto.normalizer_spec.escape_whitespaces = True
        for i, (text, score, kind) in enumerate(zip(self.tokens, scores, self.types)):
            piece = proto.pieces.add()
            if not split_specials and kind == USER_DEFINED and text.strip(" ") == "":
                text = text.replace(" ", "\u2581")
            piece.piece = text
            piece.score = float(score)
            piece.type = UNKNOWN if i == unk else kind
        self.sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        assert self.sp.get_piece_size() == len(self.tokens)
        self.id_of = {t: i for i, t in enumerate(self.tokens)}
        controls = [t for t, k in zip(self.tokens, self.types) if k == CONTROL]
        user = [t for t, k in zip(self.tokens, self.types) if k == USER_DEFINED]
        self.parsed = self.by_first_char(controls + (user if split_specials else []))
        self.plain = self.by_first_char(user if split_specials else [])

    @staticmethod
    def by_first_char(specials):
        table = {}
        for s in sorted(specials, key=len, reverse=True):  # longest first
            table.setdefault(s[0], []).append(s)
        return table

    @staticmethod
    def split(text, table):
        """Leftmost-longest split into (is_special, fragment)."""
        out, i, plain = [], 0, 0
        while i < len(text):
            best = next((c for c in table.get(text[i], []) if text.startswith(c, i)), None)
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

    def encode(self, text, parse_specials):
        ids = []
        for special, fragment in self.split(text, self.parsed if parse_specials else self.plain):
            ids += [self.id_of[fragment]] if special else self.sp.encode(fragment)
        return ids

    def decode(self, ids):
        """Control tokens left out (SentencePiece would write <unk> as ' ⁇ ')."""
        return self.sp.decode([i for i in ids if self.types[i] != CONTROL])


# ---------------------------------------------------------------------------------------------
# Cases: the byte-level BPE suite's valid texts, and Gemma's own tricky ones.

GEMMA_CASES = [
    "<start_of_turn>user\nWhat is PagedAttention?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>", "<eos>", "<pad><unk><mask>", "<bos>text<eos>",
    "<start_of_turn", "start_of_turn>", "<<start_of_turn>>", "<end_of_turn> <end_of_turn>",
    "<unused0><unused6241>", "<unused99999>", "[multimodal]", "<start_of_image><end_of_image>",
    "<table><tr><td>1</td></tr></table>", "<h1>Title</h1>\n<p>para</p>", "<b>bold</b> <i>it</i>",
    "<s>sentence</s>", "<code>x = 1</code>", "<div><span>a</span></div>", "<0x41>", "<0xFF><0x00>",
    "a\u2581b", "\u2581", "\u2581\u2581 x", "▁leading",
    " " * 31, " " * 32, " " * 33, " " * 64 + "x", "\t" * 30, "\t" * 31 + "y", "\n" * 31, "\n" * 32,
    " \n \n", "\n \n ", "\t \t", " \t\n\r\n", "x" + " " * 7 + "y" + "\t" * 3 + "z" + "\n" * 4,
    "    def f():\n        return 1\n", "\tif (x) {\n\t\ty();\n\t}\n",
    "Ünïcödé façade naïve résumé", "ß ẞ ǅ ﬁ ﬀ", "Ⅻ ⅻ ① ⑳", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀀𠀁 𪚥", "\U000E0001\U000E0067",
    "\u0000", "a\u0000b", "\u0001\u0002\u001f\u007f", "\ufffd", "\ufeff", "\U0010FFFF", "\uE000",
]


def generated_gemma_cases(rng):
    pieces = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<table>", "</td>", "\n", "\n\n",
              "  ", "   ", "\t", "\t\t", " ", "user", "model", "hello", "日本語", "😀", "1234", "▁",
              "<", ">", "_", "of", "turn", "x"]
    cases = []
    for _ in range(40):
        cases.append("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 16))))
    return cases


def chat_cases():
    sys_msg = {"role": "system", "content": "You are a pirate."}
    user = {"role": "user", "content": "What is PagedAttention?"}
    asst = {"role": "assistant", "content": "A way to store the KV cache in blocks."}
    return [
        ([user], True), ([user], False), ([sys_msg, user], True), ([sys_msg, user], False),
        ([user, asst, {"role": "user", "content": "And why?"}], True),
        ([sys_msg, user, asst], False), ([sys_msg], True),  # the template fails on []
        ([{"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "  padded \n\t"}], True),
        ([{"role": "system", "content": " spaced system \n"}, {"role": "user", "content": "x"}], True),
        ([{"role": "user", "content": "multi\nline\n\ncontent  with  spaces 日本 😀"}], True),
        ([{"role": "user", "content": "<end_of_turn> inside"}], False),
        ([user, asst], True),
    ]


def render_chat_golden():
    tmpl = jinja2.Environment().from_string(GEMMA3_CHAT_TEMPLATE)
    lines = []
    for messages, add_gen in chat_cases():
        rendered = tmpl.render(messages=messages, add_generation_prompt=add_gen, bos_token="")
        enc = ",".join(m["role"].encode().hex() + ":" + m["content"].encode().hex() for m in messages)
        lines.append(f"{int(add_gen)}\t{enc}\t{rendered.encode().hex()}")
    return lines


def cross_check(name, other_encode, texts, golden):
    disagree = 0
    for text, parse, ids in golden:
        other = other_encode(text, parse)
        if other != ids:
            disagree += 1
            if disagree <= 15:
                print(f"  {name} differs ({'specials' if parse else 'plain'}) on {text[:60]!r}:\n"
                      f"    sentencepiece {ids[:24]}\n    {name:13} {other[:24]}")
    print(f"{name}: {len(golden) - disagree} of {len(golden)} encodings agree with sentencepiece")


def llama_cpp_encoder(model):
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python not installed: no llama.cpp cross-check")
        return None
    llm = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
    return lambda text, parse: llm.tokenize(text.encode(), add_bos=False, special=parse)


def hf_encoder(reader):
    """transformers' GGUF conversion (its reader needs torch, so the metadata comes from `gguf`)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    keys = {"tokenizer_type": "model", "tokens": "tokens", "scores": "scores",
            "token_type": "token_type", "bos_token_id": "bos_token_id",
            "eos_token_id": "eos_token_id", "unk_token_id": "unknown_token_id",
            "pad_token_id": "padding_token_id", "add_prefix_space": "add_space_prefix"}
    tokenizer_dict = {name: field(reader, "tokenizer.ggml." + key) for name, key in keys.items()}
    tok, _ = convert_gguf_tokenizer(field(reader, "general.architecture"), tokenizer_dict)

    def encode(text, parse):
        tok.encode_special_tokens = not parse
        return tok.encode(text, add_special_tokens=False).ids
    return encode


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    model = Path(args[0]) if args else DEFAULT_MODEL
    reader = gguf.GGUFReader(str(model))
    ref = Reference(reader)
    rng = random.Random(SEED)
    texts = (common.HAND_PICKED + common.generated_cases(random.Random(common.SEED)) +
             [common.long_text(rng)] + GEMMA_CASES + generated_gemma_cases(rng))
    texts = list(dict.fromkeys(texts))  # unique, in order
    lines, golden = [], []
    for text in texts:
        for mode, parse in (("s", True), ("p", False)):
            ids = ref.encode(text, parse)
            golden.append((text, parse, ids))
            decoded = ref.decode(ids)
            lines.append(f"{mode}\t{text.encode().hex()}\t{' '.join(map(str, ids))}\t"
                         f"{decoded.encode().hex()}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "gemma3_golden.tsv").write_text("\n".join(lines) + "\n")
    chat = render_chat_golden()
    (OUT_DIR / "gemma3_chat.tsv").write_text("\n".join(chat) + "\n")
    print(f"{len(texts)} texts x 2 modes, {len(chat)} chat cases -> {OUT_DIR}")

    cross_check("sp-original", Reference(reader, split_specials=False).encode, texts, golden)
    if (llama := llama_cpp_encoder(model)) is not None:
        cross_check("llama.cpp", llama, texts, golden)
    if "--hf" in sys.argv:
        cross_check("transformers", hf_encoder(reader), texts, golden)


if __name__ == "__main__":
    main()
