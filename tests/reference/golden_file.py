"""Python reader of the golden-logits format (TFGL versions 1 and 2, see README.md;
golden_logits.hpp is the C++ reader). Used to check a freshly written file and to compare a
reference against one."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Position:
    max_abs_logit: float
    argmax: int
    top2_margin: float
    float32_error: float  # NaN in version 1 files
    ids: np.ndarray      # int32, the stored ids (top ids first, then the fixed subset)
    logits: np.ndarray   # float32, the reference logits of those ids


@dataclass
class Prompt:
    name: str
    text: str
    prompt: list
    greedy: list
    prefill: list = field(default_factory=list)
    decode: list = field(default_factory=list)


@dataclass
class GoldenFile:
    version: int
    vocab_size: int
    n_decode: int
    n_decode_with_logits: int
    n_top: int
    model_sha256: bytes
    model_file: str
    prompts: list


def read(path) -> GoldenFile:
    b = open(path, "rb").read()
    pos = 0

    def take(n):
        nonlocal pos
        if n > len(b) - pos:
            raise ValueError(f"truncated at byte {pos}")
        s = b[pos:pos + n]
        pos += n
        return s

    def u32():
        return struct.unpack("<I", take(4))[0]

    def string():
        return take(u32()).decode()

    def ids():
        n = u32()
        return np.frombuffer(take(4 * n), dtype="<i4").tolist()

    def position():
        ma, am, mg = struct.unpack("<fif", take(12))
        f32 = struct.unpack("<f", take(4))[0] if version >= 2 else float("nan")
        n = u32()
        pairs = np.frombuffer(take(8 * n), dtype=[("id", "<i4"), ("logit", "<f4")])
        return Position(ma, am, mg, f32, pairs["id"].copy(), pairs["logit"].copy())

    if take(4) != b"TFGL":
        raise ValueError("bad magic")
    version, n_prompts, vocab, n_dec, n_dec_l, n_top = struct.unpack("<6I", take(24))
    if version not in (1, 2):
        raise ValueError(f"unsupported version {version}")
    sha = take(32)
    name = string()
    prompts = []
    for _ in range(n_prompts):
        p = Prompt(string(), string(), ids(), ids())
        n_prefill, n_decode = u32(), u32()
        assert n_prefill == len(p.prompt) and n_decode == len(p.greedy)
        p.prefill = [position() for _ in range(n_prefill)]
        p.decode = [position() for _ in range(n_decode)]
        prompts.append(p)
    if pos != len(b):
        raise ValueError("trailing bytes")
    return GoldenFile(version, vocab, n_dec, n_dec_l, n_top, sha, name, prompts)
