"""An HF `tokenizers` tokenizer built from a GGUF file's byte-level BPE vocabulary and merges.

Used by the reference scripts to turn prompt text into token ids. The pre-tokenizer follows
llama.cpp's "smollm"/"starcoder" pre-tokenizer: every digit is its own piece, then the GPT-2
regex with the GPT-2 byte-to-unicode table. Control tokens (token_type 3) are added as special
tokens so they are split out of the text before pre-tokenization. No BOS is prepended when
`tokenizer.ggml.add_bos_token` is false (as for SmolLM2).
"""
from __future__ import annotations

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# gguf TokenType: 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
_CONTROL = 3
_USER_DEFINED = 4


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def build_tokenizer(reader_or_path) -> tuple[Tokenizer, bool, int | None]:
    """Returns (tokenizer, add_bos, bos_id) for a gpt2-style GGUF vocabulary."""
    reader = (reader_or_path if isinstance(reader_or_path, gguf.GGUFReader)
              else gguf.GGUFReader(reader_or_path))
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"only byte-level BPE (gpt2) vocabularies are supported, got {model!r}")
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre not in ("smollm", "starcoder"):
        raise ValueError(f"pre-tokenizer {pre!r} is not the one this module implements")
    tokens: list[str] = _field(reader, "tokenizer.ggml.tokens")
    types: list[int] = _field(reader, "tokenizer.ggml.token_type")
    merges: list[str] = _field(reader, "tokenizer.ggml.merges")

    vocab = {tok: i for i, tok in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=merge_pairs, fuse_unk=False, byte_fallback=False,
                     ignore_merges=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i, t in enumerate(types) if t == _CONTROL]
    user = [AddedToken(tokens[i], special=False, normalized=False)
            for i, t in enumerate(types) if t == _USER_DEFINED]
    tok.add_special_tokens(specials)
    if user:
        tok.add_tokens(user)
    # The added tokens must keep their GGUF ids (they are already in the vocabulary).
    for a in specials + user:
        assert tok.token_to_id(a.content) == vocab[a.content], a.content
    add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", False))
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    return tok, add_bos, bos


def encode(tok_info, text: str) -> list[int]:
    tok, add_bos, bos = tok_info
    ids = tok.encode(text, add_special_tokens=False).ids
    return ([bos] + ids) if add_bos else ids


def decode(tok_info, ids) -> str:
    return tok_info[0].decode(list(map(int, ids)), skip_special_tokens=False)
