"""Two independent tokenizers for a GGUF SentencePiece vocabulary (`tokenizer.ggml.model` "llama",
e.g. Gemma 3), used by the reference scripts to turn prompt text into ids; a prompt is only used
when both give the same ids.

1. `SpmEncoder`: written here from the SentencePiece-BPE algorithm as llama.cpp runs it
   (llm_tokenizer_spm): the text is first cut at every CONTROL / USER_DEFINED token's text
   (longest first; control tokens only when special tokens are parsed), each remaining piece
   gets spaces escaped to U+2581 (and a leading U+2581 if `add_space_prefix`), is split into
   UTF-8 characters, and the adjacent pair whose concatenation is a token with the highest score
   (leftmost on ties) is merged until none is; a symbol that is not a token becomes its bytes'
   <0xXX> tokens.
2. `hf_tokenizer`: Hugging Face transformers' own GGUF tokenizer conversion
   (transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer, which builds a
   `tokenizers` BPE with byte fallback from the vocabulary; needs no torch when called directly).

BOS: prepended when `tokenizer.ggml.add_bos_token` says so (Gemma 3: yes, id 2).
"""
from __future__ import annotations

import heapq

import gguf

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class SpmEncoder:
    def __init__(self, reader_or_path):
        r = (reader_or_path if isinstance(reader_or_path, gguf.GGUFReader)
             else gguf.GGUFReader(reader_or_path))
        if _field(r, "tokenizer.ggml.model") != "llama":
            raise ValueError("not a SentencePiece (llama) vocabulary")
        self.tokens = list(_field(r, "tokenizer.ggml.tokens"))
        self.scores = [float(s) for s in _field(r, "tokenizer.ggml.scores")]
        self.types = [int(t) for t in _field(r, "tokenizer.ggml.token_type")]
        self.id_of = {}
        for i, t in enumerate(self.tokens):
            self.id_of.setdefault(t, i)
        self.byte_id = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty == BYTE:
                self.byte_id[int(t[3:5], 16)] = i
        self.add_bos = bool(_field(r, "tokenizer.ggml.add_bos_token", True))
        self.add_eos = bool(_field(r, "tokenizer.ggml.add_eos_token", False))
        self.add_space_prefix = bool(_field(r, "tokenizer.ggml.add_space_prefix", True))
        self.bos = _field(r, "tokenizer.ggml.bos_token_id")
        self.eos = _field(r, "tokenizer.ggml.eos_token_id")
        self.unk = _field(r, "tokenizer.ggml.unknown_token_id")
        specials = [(t, i, ty) for i, (t, ty) in enumerate(zip(self.tokens, self.types))
                    if ty in (CONTROL, USER_DEFINED) and t]
        specials.sort(key=lambda s: -len(s[0]))
        self.specials = specials

    def _partition(self, text, parse_special):
        frags = [text]  # str = raw text, int = a token id already decided
        for t, i, ty in self.specials:
            if ty == CONTROL and not parse_special:
                continue
            out = []
            for f in frags:
                if not isinstance(f, str) or t not in f:
                    out.append(f)
                    continue
                parts = f.split(t)
                for k, part in enumerate(parts):
                    if part:
                        out.append(part)
                    if k + 1 < len(parts):
                        out.append(i)
            frags = out
        return frags

    def _spm(self, text):
        sym = list(text)  # UTF-8 characters
        # doubly linked list of symbols; heap of (-score, left index, left text, right text)
        prev = list(range(-1, len(sym) - 1))
        nxt = list(range(1, len(sym) + 1))
        nxt[-1] = -1
        alive = [True] * len(sym)
        heap = []

        def push(a):
            b = nxt[a]
            if a < 0 or b < 0:
                return
            i = self.id_of.get(sym[a] + sym[b])
            if i is not None:
                heapq.heappush(heap, (-self.scores[i], a, sym[a], sym[b]))

        for a in range(len(sym) - 1):
            push(a)
        while heap:
            _, a, sa, sb = heapq.heappop(heap)
            b = nxt[a] if alive[a] else -1
            if b < 0 or not alive[b] or sym[a] != sa or sym[b] != sb:
                continue  # stale entry
            sym[a] = sa + sb
            alive[b] = False
            nxt[a] = nxt[b]
            if nxt[b] >= 0:
                prev[nxt[b]] = a
            if prev[a] >= 0:
                push(prev[a])
            push(a)
        ids = []
        a = 0 if sym else -1
        while a >= 0:
            i = self.id_of.get(sym[a])
            if i is not None:
                ids.append(i)
            else:
                for byte in sym[a].encode("utf-8"):
                    ids.append(self.byte_id.get(byte, self.unk))
            a = nxt[a]
        return ids

    def encode(self, text, add_special=True, parse_special=False):
        ids = [self.bos] if add_special and self.add_bos else []
        first = True
        for f in self._partition(text, parse_special):
            if isinstance(f, int):
                ids.append(f)
            else:
                s = f.replace(" ", SPACE)
                if first and self.add_space_prefix:
                    s = SPACE + s
                ids += self._spm(s)
            first = False
        if add_special and self.add_eos:
            ids.append(self.eos)
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t, ty = self.tokens[i], self.types[i]
            if ty == BYTE:
                out.append(int(t[3:5], 16))
            elif ty == CONTROL:
                continue
            else:
                out += t.replace(SPACE, " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")


def hf_tokenizer(reader_or_path):
    """transformers' GGUF -> `tokenizers` conversion of the same vocabulary."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)
    r = (reader_or_path if isinstance(reader_or_path, gguf.GGUFReader)
         else gguf.GGUFReader(reader_or_path))
    d = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        f = r.fields.get("tokenizer." + key)
        if f is not None:
            d[name] = f.contents()
    tok, _ = convert_gguf_tokenizer(_field(r, "general.architecture"), d)
    return tok


def hf_encode(tok, enc: SpmEncoder, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    return ([enc.bos] if enc.add_bos else []) + ids
