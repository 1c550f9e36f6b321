#!/usr/bin/env python3
"""Golden data for tinfer's GGUF reader, made with llama.cpp's own Python package (`gguf`).

Independent of tinfer: files are written by gguf.GGUFWriter, quantized by gguf.quants.quantize
and decoded by gguf.quants.dequantize. Outputs go to tests/data/gguf/:

  golden_v3.gguf           every metadata value type, one tensor of each decodable type
  golden_<tensor>.f32      that tensor dequantized by gguf.quants (raw little-endian float32)
  golden_<tensor>.input.f32  the floats a quantized tensor was made from (legacy types only)
  smollm2_metadata.tsv     the real model's metadata, as gguf.GGUFReader reads it
  golden_<tensor>.offset.f32  affine types (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K): the decoded values
                           with d = 0

K-quant tensors hold random blocks with moderate f16 scales; Q2_K, Q3_K and Q5_K add a row of
blocks at the format's edges (see edge_k_blocks).
  smollm2_rows.tsv / .f32  a few dequantized rows of the real model's tensors (+ .offset.f32)

Run: python3 tests/reference/make_gguf_golden.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import os
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

SEED = 20240611
OUT = Path(__file__).resolve().parents[1] / "data" / "gguf"
DEFAULT_MODEL = Path.home() / ".cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def random_k_blocks(rng, n_blocks, block_bytes, scale_offsets):
    """Random K-quant blocks whose f16 scales are finite and moderate (random bytes could be
    NaN or Inf there, which says nothing about the decoder)."""
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        scale = rng.uniform(1e-3, 2e-2, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw


def f16_bytes(value):
    return np.array([value], dtype=np.float16).view(np.uint8)


def edge_k_blocks(rng, block_bytes, scale_offsets):
    """Four K-quant blocks at the edges of the format: every bit set, then every bit clear (the
    largest and smallest codes and sub-block scales: Q3_K's +31 and -32, its hmask's both
    meanings), then random codes under the largest negative f16 scale and under the smallest
    subnormal one. Formats with a minimum (two scale offsets) pair them with a subnormal minimum,
    then a zero scale with a negative minimum (only the minimum's term is left)."""
    blocks = np.zeros((4, block_bytes), dtype=np.uint8)
    blocks[0, :] = 0xFF
    blocks[2:, :] = rng.integers(0, 256, size=(2, block_bytes), dtype=np.uint8)
    if len(scale_offsets) == 2:
        scales = [(1.0, 0.5), (1.0, 0.5), (-65504.0, 2.0**-24), (0.0, -0.75)]
    else:
        scales = [(1.0,), (1.0,), (-65504.0,), (2.0**-24,)]
    for b, values in enumerate(scales):
        for off, v in zip(scale_offsets, values):
            blocks[b, off:off + 2] = f16_bytes(v)
    return blocks


def write_golden():
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(OUT / "golden_v3.gguf", arch="tinfertest")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62) - 3)
    w.add_float64("test.f64", 2.718281828459045)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo wörld")
    w.add_key_value("test.array_u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.array_i16", [-32768, 0, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.array_i32", [-7, 0, 7, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.array_u64", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.array_f32", [1.5, -0.25, 3.0e38], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.array_f64", [1e-300, -2.5], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("test.array_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_array("test.array_string", ["a", "bc", "", "ünï ✓"])

    tensors = {}
    # Plain types.
    tensors["t_f32"] = (rng.standard_normal((3, 64)).astype(np.float32), Q.F32, None)
    tensors["t_f16"] = (rng.standard_normal((4, 32)).astype(np.float16), Q.F16, None)
    bf16_src = rng.standard_normal((2, 32)).astype(np.float32)
    tensors["t_bf16"] = (gguf.quants.quantize(bf16_src, Q.BF16), Q.BF16, None)
    tensors["t_f32_3d"] = (rng.standard_normal((3, 2, 32)).astype(np.float32), Q.F32, None)
    # Legacy block types, quantized from random floats (several magnitudes per row).
    inputs = {}
    for name, qtype in [("t_q4_0", Q.Q4_0), ("t_q4_1", Q.Q4_1), ("t_q5_0", Q.Q5_0),
                        ("t_q5_1", Q.Q5_1), ("t_q8_0", Q.Q8_0)]:
        floats = (rng.standard_normal((3, 128)) * rng.uniform(0.01, 4, size=(3, 1))).astype(np.float32)
        inputs[name] = floats
        tensors[name] = (gguf.quants.quantize(floats, qtype), qtype, None)
    # K-quants: the gguf package only decodes them, so the blocks are random bytes.
    tensors["t_q4_k"] = (random_k_blocks(rng, 2 * 2, 144, [0, 2]).reshape(2, 2 * 144), Q.Q4_K, None)
    tensors["t_q6_k"] = (random_k_blocks(rng, 2 * 2, 210, [208]).reshape(2, 2 * 210), Q.Q6_K, None)
    # Q2_K (d, dmin at bytes 80, 82), Q3_K (d at 108), Q5_K (d, dmin at 0, 2): two rows of random
    # blocks, then two rows of edge blocks. Drawn after the tensors above, which stay unchanged.
    for name, qtype, block_bytes, scale_offsets in [("t_q2_k", Q.Q2_K, 84, [80, 82]),
                                                    ("t_q3_k", Q.Q3_K, 110, [108]),
                                                    ("t_q5_k", Q.Q5_K, 176, [0, 2])]:
        blocks = np.concatenate([random_k_blocks(rng, 4, block_bytes, scale_offsets),
                                 edge_k_blocks(rng, block_bytes, scale_offsets)])
        tensors[name] = (blocks.reshape(4, 2 * block_bytes), qtype, None)

    for name, (data, qtype, _) in tensors.items():
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Decode through the reader, so the expected values come from what is in the file.
    reader = gguf.GGUFReader(OUT / "golden_v3.gguf")
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        values.tofile(OUT / f"golden_{t.name}.f32")
        if t.tensor_type in AFFINE_BLOCKS:
            affine_offset(t.data, t.tensor_type).astype("<f4").tofile(OUT / f"golden_{t.name}.offset.f32")
    for name, floats in inputs.items():
        floats.astype("<f4").reshape(-1).tofile(OUT / f"golden_{name}.input.f32")


# Affine block types decode as d*q + offset; ggml's C and a C++ compiler may fuse that into one
# FMA, so tests need the size of d*q to bound the difference. Zeroing d leaves the offset.
# Per type: bytes per block, offset of the f16 d in it.
AFFINE_BLOCKS = {Q.Q4_1: (20, 0), Q.Q5_1: (24, 0), Q.Q2_K: (84, 80), Q.Q4_K: (144, 0),
                 Q.Q5_K: (176, 0)}


def affine_offset(data, qtype):
    block_bytes, d_at = AFFINE_BLOCKS[qtype]
    raw = np.array(data, dtype=np.uint8, copy=True).reshape(-1, block_bytes)
    raw[:, d_at:d_at + 2] = 0
    return gguf.quants.dequantize(raw.reshape(-1), qtype).reshape(-1)


def describe(value_type, value):
    """One metadata value as text the C++ test parses: integers in decimal, floats as the hex
    bits of their stored width, strings as hex UTF-8."""
    if value_type == V.STRING:
        return "s:" + bytes(value).hex() if isinstance(value, (bytes, np.ndarray)) else "s:" + value.encode().hex()
    if value_type == V.FLOAT32:
        return "f:" + np.float32(value).view(np.uint32).item().to_bytes(4, "big").hex()
    if value_type == V.FLOAT64:
        return "d:" + np.float64(value).view(np.uint64).item().to_bytes(8, "big").hex()
    if value_type == V.BOOL:
        return "b:" + str(int(bool(value)))
    return "i:" + str(int(value))


def write_model_excerpt(model):
    reader = gguf.GGUFReader(model)
    lines = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        main = field.types[0]
        if main == V.ARRAY:
            sub = field.types[-1]
            items = field.contents()
            lines.append("\t".join([field.name, "array", sub.name, str(len(items)),
                                    describe(sub, items[0]), describe(sub, items[-1])]))
        else:
            lines.append("\t".join([field.name, main.name, describe(main, field.contents())]))
    (OUT / "smollm2_metadata.tsv").write_text("\n".join(lines) + "\n")

    picks = [("token_embd.weight", [0, 1, 12345, 49151]),
             ("blk.0.attn_q.weight", [0, 575]),
             ("blk.0.attn_k.weight", [191]),
             ("blk.15.ffn_gate.weight", [1000]),
             ("blk.29.ffn_down.weight", [575]),
             ("output_norm.weight", [0])]
    tensors = {t.name: t for t in reader.tensors}
    rows_out, values, offsets = [], [], []
    header = ["#name\ttype\tdims\tn_tensors=" + str(len(reader.tensors))]
    for t in reader.tensors:
        header.append("\t".join(["tensor", t.name, t.tensor_type.name,
                                 ",".join(str(int(d)) for d in t.shape)]))
    for name, rows in picks:
        t = tensors[name]
        decoded = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))
        offset = (affine_offset(t.data, t.tensor_type) if t.tensor_type in AFFINE_BLOCKS
                  else np.zeros(decoded.size, dtype=np.float32)).reshape(decoded.shape)
        for r in rows:
            rows_out.append("\t".join(["row", name, str(r), str(decoded.shape[1])]))
            values.append(decoded[r].astype("<f4"))
            offsets.append(offset[r].astype("<f4"))
    (OUT / "smollm2_rows.tsv").write_text("\n".join(header + rows_out) + "\n")
    np.concatenate(values).tofile(OUT / "smollm2_rows.f32")
    np.concatenate(offsets).tofile(OUT / "smollm2_rows.offset.f32")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write_golden()
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL
    if model.exists():
        write_model_excerpt(model)
    else:
        print(f"model not found at {model}: skipped the real-model excerpt", file=sys.stderr)


if __name__ == "__main__":
    main()
