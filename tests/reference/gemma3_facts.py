#!/usr/bin/env python3
"""Checks what docs/model-facts.md says about the Gemma 3 270M GGUF against the file itself.

Independent of tinfer: the file is read with llama.cpp's Python package (`gguf`) and numpy.
Every fact the page records is an expectation here; the script prints what the file holds
(all metadata keys, tensor types per role and layer, tokenizer fields) and exits non-zero
naming each expectation the file contradicts.

Run: python3 tests/reference/gemma3_facts.py [path/to/gemma-3-270m-q4_k_m.gguf]
(default ~/.cache/tinfer/models/gemma-3-270m-q4_k_m.gguf, fetched by
`scripts/fetch_model.sh gemma3`; needs `pip install gguf numpy`; about 30 s on 2 cores, most of
it gguf-py reading the 262,144-entry vocabulary).
"""
import collections
import hashlib
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFValueType as V

DEFAULT_MODEL = Path.home() / ".cache/tinfer/models/gemma-3-270m-q4_k_m.gguf"

FILE_BYTES = 253_113_024
FILE_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

# Every gemma3.* key the file holds, with its value (floats as the f32 the file stores).
GEMMA3_KEYS = {
    "gemma3.context_length": 32768,
    "gemma3.embedding_length": 640,
    "gemma3.block_count": 18,
    "gemma3.feed_forward_length": 2048,
    "gemma3.attention.head_count": 4,
    "gemma3.attention.head_count_kv": 1,
    "gemma3.attention.key_length": 256,
    "gemma3.attention.value_length": 256,
    "gemma3.attention.layer_norm_rms_epsilon": np.float32(1e-6),
    "gemma3.rope.freq_base": np.float32(1e6),
    "gemma3.attention.sliding_window": 512,
}

# Keys gguf-py (0.19) defines that would carry the architecture facts the file leaves out:
# none may be present, so those facts must come from elsewhere (llama.cpp, the HF config).
ABSENT_KEYS = [
    "gemma3.attention.sliding_window_pattern",  # five local layers, then one global
    "gemma3.rope.freq_base_swa",                # 10,000 on the local layers
    "gemma3.rope.dimension_count",              # RoPE over all 256 dimensions of a head
    "gemma3.rope.dimension_count_swa",
    "gemma3.attention.key_length_swa",
    "gemma3.attention.value_length_swa",
    "gemma3.attention.scale",                   # query_pre_attn_scalar
    "gemma3.attn_logit_softcapping",
    "gemma3.final_logit_softcapping",
    "gemma3.embedding_scale",                   # sqrt(640) on the token embedding
    "gemma3.vocab_size",
    "gemma3.rope.scaling.type",
    "tokenizer.chat_template",
    "tokenizer.ggml.merges",
    "general.alignment",
]

OTHER_KEYS = {
    "general.architecture": "gemma3",
    "general.type": "model",
    "general.name": "Gemma 3 270m",
    "general.basename": "gemma-3",
    "general.size_label": "270M",
    "general.license": "gemma",
    "general.file_type": 15,  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    "general.quantization_version": 2,
    "tokenizer.ggml.model": "llama",
    "tokenizer.ggml.pre": "default",
    "tokenizer.ggml.bos_token_id": 2,
    "tokenizer.ggml.eos_token_id": 1,
    "tokenizer.ggml.unknown_token_id": 3,
    "tokenizer.ggml.padding_token_id": 0,
    "tokenizer.ggml.add_bos_token": True,
    "tokenizer.ggml.add_eos_token": False,
    "tokenizer.ggml.add_sep_token": False,
    "tokenizer.ggml.add_space_prefix": False,
}

LAYERS = 18
VOCAB = 262_144
TYPE_COUNTS = {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}

# llama.cpp's Q4_K_M mix gives attn_v and ffn_down more bits on the layers use_more_bits()
# picks: the first and last eighth, and every third layer between (i - n/8) % 3 == 2.
MORE_BITS_LAYERS = [i for i in range(LAYERS)
                    if i < LAYERS // 8 or i >= 7 * LAYERS // 8 or (i - LAYERS // 8) % 3 == 2]

# Per-layer tensors: ne0 first, and the type each has on ordinary / more-bits layers.
LAYER_TENSORS = {
    "attn_norm": ([640], "F32", "F32"),
    "attn_q": ([640, 1024], "Q5_0", "Q5_0"),
    "attn_k": ([640, 256], "Q5_0", "Q5_0"),
    "attn_v": ([640, 256], "Q5_0", "Q8_0"),
    "attn_q_norm": ([256], "F32", "F32"),
    "attn_k_norm": ([256], "F32", "F32"),
    "attn_output": ([1024, 640], "Q4_K", "Q4_K"),
    "post_attention_norm": ([640], "F32", "F32"),
    "ffn_norm": ([640], "F32", "F32"),
    "ffn_gate": ([640, 2048], "Q5_0", "Q5_0"),
    "ffn_up": ([640, 2048], "Q5_0", "Q5_0"),
    "ffn_down": ([2048, 640], "Q4_K", "Q6_K"),
    "post_ffw_norm": ([640], "F32", "F32"),
}
GLOBAL_TENSORS = {
    "token_embd.weight": ([640, VOCAB], "Q8_0"),
    "output_norm.weight": ([640], "F32"),
}

# Token texts the chat format and the tokenizer rely on.
TOKENS = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 105: "<start_of_turn>",
          106: "<end_of_turn>"}

failures = []


def expect(what, got, want):
    ok = got == want
    if isinstance(want, np.floating):
        ok = np.float32(got).view(np.uint32) == want.view(np.uint32)
    print(f"  {'ok ' if ok else 'BAD'} {what}: {got!r}" + ("" if ok else f" (expected {want!r})"))
    if not ok:
        failures.append(f"{what}: {got!r}, expected {want!r}")


def value_of(field):
    value = field.contents()
    if field.types[0] == V.FLOAT32:
        return np.float32(value)
    return value


def describe(field):
    types = "/".join(t.name for t in field.types)
    if field.types[0] == V.ARRAY:
        items = field.contents()
        head = ", ".join(repr(x) for x in items[:4])
        return f"{types} [{len(items)}] {head}, ..."
    return f"{types} {value_of(field)!r}"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL
    print(f"# {path}")
    print("file")
    expect("size in bytes", path.stat().st_size, FILE_BYTES)
    expect("sha256", sha256_of(path), FILE_SHA256)

    reader = gguf.GGUFReader(path)
    fields = {name: f for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    print("header")
    expect("version", int(reader.fields["GGUF.version"].contents()), 3)
    expect("tensor count", len(reader.tensors), 236)
    expect("key/value count", len(fields), 33)
    expect("alignment", int(reader.alignment), 32)
    expect("data section offset", int(reader.data_offset), 6_525_120)

    print("all metadata keys")
    for name, f in fields.items():
        print(f"    {name} = {describe(f)}")

    print("gemma3.* keys")
    arch_keys = sorted(n for n in fields if n.startswith("gemma3."))
    expect("the gemma3.* key set", arch_keys, sorted(GEMMA3_KEYS))
    for name, want in GEMMA3_KEYS.items():
        if name in fields:
            expect(name, value_of(fields[name]), want)
    print("keys that are not in the file")
    for name in ABSENT_KEYS:
        expect(f"{name} present", name in fields, False)
    hints = [n for n in fields if any(s in n for s in ("swa", "pattern", "local", "scalar"))]
    expect("keys naming swa/pattern/local/scalar", hints, [])

    print("general and tokenizer keys")
    for name, want in OTHER_KEYS.items():
        expect(name, value_of(fields[name]) if name in fields else None, want)
    tokens = fields["tokenizer.ggml.tokens"].contents()
    expect("tokenizer.ggml.tokens count", len(tokens), VOCAB)
    expect("tokenizer.ggml.scores count", len(fields["tokenizer.ggml.scores"].contents()), VOCAB)
    token_types = fields["tokenizer.ggml.token_type"].contents()
    expect("tokenizer.ggml.token_type count", len(token_types), VOCAB)
    for token_id, text in TOKENS.items():
        expect(f"token {token_id}", tokens[token_id], text)
    kinds = collections.Counter(gguf.TokenType(t).name for t in token_types)
    expect("token types", dict(sorted(kinds.items())),
           {"BYTE": 256, "CONTROL": 6249, "NORMAL": 255474, "USER_DEFINED": 165})
    byte_tokens = [i for i, t in enumerate(token_types) if t == gguf.TokenType.BYTE]
    expect("BYTE token ids", (byte_tokens[0], byte_tokens[-1]) if byte_tokens else None, (238, 493))
    expect("BYTE tokens spell <0x00>..<0xFF> in order",
           [tokens[i] for i in byte_tokens] == [f"<0x{b:02X}>" for b in range(256)], True)

    print("tensors")
    by_name = {t.name: t for t in reader.tensors}
    counts = collections.Counter(t.tensor_type.name for t in reader.tensors)
    expect("count per type", dict(sorted(counts.items())), dict(sorted(TYPE_COUNTS.items())))
    expect("output.weight present (untied LM head)", "output.weight" in by_name, False)
    expected_names = set(GLOBAL_TENSORS) | {f"blk.{i}.{role}.weight"
                                            for i in range(LAYERS) for role in LAYER_TENSORS}
    expect("tensor names beyond the expected set", sorted(set(by_name) - expected_names), [])
    expect("expected tensors missing", sorted(expected_names - set(by_name)), [])
    for name, (dims, type_name) in GLOBAL_TENSORS.items():
        t = by_name[name]
        expect(f"{name} dims/type", ([int(d) for d in t.shape], t.tensor_type.name),
               (dims, type_name))
    print(f"  layers with more bits (attn_v Q8_0, ffn_down Q6_K): {MORE_BITS_LAYERS}")
    for role, (dims, ordinary, more) in LAYER_TENSORS.items():
        got_types = collections.defaultdict(list)
        for i in range(LAYERS):
            t = by_name[f"blk.{i}.{role}.weight"]
            got_types[t.tensor_type.name].append(i)
            if [int(d) for d in t.shape] != dims:
                expect(f"blk.{i}.{role} dims", [int(d) for d in t.shape], dims)
        want_types = collections.defaultdict(list)
        for i in range(LAYERS):
            want_types[more if i in MORE_BITS_LAYERS else ordinary].append(i)
        expect(f"{role} {dims}: layers per type", dict(got_types), dict(want_types))
    expect("parameters", sum(int(t.n_elements) for t in reader.tensors), 268_098_176)
    expect("token_embd parameters", int(by_name["token_embd.weight"].n_elements), 640 * VOCAB)

    # Gemma's RMSNorm scales by (1 + w); llama.cpp's converter stores 1 + w. The values alone
    # cannot prove that, only be consistent with it (printed for the record).
    print("norm weights (min / mean / max)")
    for name in ["output_norm.weight", "blk.0.attn_norm.weight", "blk.0.post_attention_norm.weight",
                 "blk.0.ffn_norm.weight", "blk.0.post_ffw_norm.weight",
                 "blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"]:
        w = np.asarray(by_name[name].data, dtype=np.float64)
        print(f"    {name}: {w.min():.4f} / {w.mean():.4f} / {w.max():.4f}")

    if failures:
        print(f"\n{len(failures)} expectation(s) contradicted by the file:")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("\nall expectations hold")


if __name__ == "__main__":
    main()
