"""Self-checks of llama_reference.py on tiny random GGUF files written with the `gguf` package.

    python3 tests/reference/test_reference.py

Runs the `--logits` CLI on a tiny llama file, one with q/k/v biases, one with final-logit
soft-capping, a qwen2 and a gemma3 file, and checks what must hold whatever the weights:
the CLI's output is [positions][vocab] float64 and equals the in-process forward pass; one
prefill equals token-by-token decoding; zero biases equal no biases and non-zero ones matter;
soft-capped logits are cap * tanh(uncapped / cap); in a gemma3 file whose layers are all
sliding-window (block_count < 6), token 0 changes the logits at positions 0 .. L*(W-1) and no
later ones (window = W keys including the query's own); float32 stays close to float64.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llama_reference import DecoderReference  # noqa: E402

SEED = 20261201


def write_tiny_gguf(path, arch="llama", *, qkv_bias=False, zero_bias=False, softcap=None,
                    n_layer=2, n_embd=32, n_head=4, n_kv=2, head_dim=8, n_ff=48, vocab=64,
                    window=4, seed=SEED):
    """A random model of the given architecture, all tensors F32 (gguf dims: ne0 = input)."""
    rng = np.random.default_rng(seed)
    bias_rng = np.random.default_rng(seed + 1)  # so biases leave the other weights as they are
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_context_length(128)
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0 if arch != "gemma3" else 1e6)
    if arch == "gemma3":
        w.add_sliding_window(window)
    if softcap is not None:
        w.add_float32(f"{arch}.final_logit_softcapping", softcap)

    def t(name, *shape, scale=None, offset=0.0, gen=rng):
        s = (1.0 / np.sqrt(shape[-1])) if scale is None else scale
        w.add_tensor(name, (offset + s * gen.standard_normal(shape)).astype(np.float32))

    t("token_embd.weight", vocab, n_embd, scale=1.0)
    t("output_norm.weight", n_embd, scale=0.1, offset=1.0)
    if arch == "llama":
        t("output.weight", vocab, n_embd)
    for l in range(n_layer):
        p = f"blk.{l}."
        t(p + "attn_norm.weight", n_embd, scale=0.1, offset=1.0)
        t(p + "attn_q.weight", n_head * head_dim, n_embd)
        t(p + "attn_k.weight", n_kv * head_dim, n_embd)
        t(p + "attn_v.weight", n_kv * head_dim, n_embd)
        if qkv_bias:
            for name, n in (("attn_q", n_head), ("attn_k", n_kv), ("attn_v", n_kv)):
                t(p + name + ".bias", n * head_dim, scale=0.0 if zero_bias else 0.5,
                  gen=bias_rng)
        t(p + "attn_output.weight", n_embd, n_head * head_dim)
        t(p + "ffn_norm.weight", n_embd, scale=0.1, offset=1.0)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)
        if arch == "gemma3":
            t(p + "attn_q_norm.weight", head_dim, scale=0.1, offset=1.0)
            t(p + "attn_k_norm.weight", head_dim, scale=0.1, offset=1.0)
            t(p + "post_attention_norm.weight", n_embd, scale=0.1, offset=1.0)
            t(p + "post_ffw_norm.weight", n_embd, scale=0.1, offset=1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cli_logits(path, tokens, out, dtype="float64"):
    subprocess.run([sys.executable, str(HERE / "llama_reference.py"), "--logits", str(path),
                    "--tokens", ",".join(map(str, tokens)), "--out", str(out),
                    "--dtype", dtype], check=True)
    return np.fromfile(out, dtype="<f8")


def main():
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")

    rng = np.random.default_rng(SEED)
    tokens = [int(x) for x in rng.integers(0, 64, size=12)]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        files = {
            "llama": write_tiny_gguf(d / "llama.gguf"),
            "llama_bias": write_tiny_gguf(d / "llama_bias.gguf", qkv_bias=True),
            "llama_zero_bias": write_tiny_gguf(d / "llama_zero_bias.gguf", qkv_bias=True,
                                               zero_bias=True),
            "llama_softcap": write_tiny_gguf(d / "llama_softcap.gguf", softcap=3.0),
            "qwen2": write_tiny_gguf(d / "qwen2.gguf", "qwen2", qkv_bias=True),
            "gemma3": write_tiny_gguf(d / "gemma3.gguf", "gemma3", n_kv=1),
        }
        ref = {}
        for name, path in files.items():
            m = DecoderReference(path)
            lg = m.forward(tokens, m.new_cache(len(tokens)))
            ref[name] = lg
            out = cli_logits(path, tokens, d / f"{name}.bin")
            check(f"{name}: CLI writes [positions][vocab] float64 equal to forward()",
                  out.size == len(tokens) * m.vocab and
                  np.array_equal(out.reshape(len(tokens), m.vocab), lg))
            cache = m.new_cache(len(tokens))
            steps = np.concatenate([m.forward([t], cache) for t in tokens])
            e = np.max(np.abs(steps - lg))
            check(f"{name}: prefill equals token-by-token decode", e < 1e-12, f"({e:.1e})")
            lg32 = m.converted(np.float32).forward(tokens, m.new_cache(len(tokens)))
            e32 = np.max(np.abs(lg32 - lg)) / np.max(np.abs(lg))
            check(f"{name}: float32 run within 1e-5 of max|logit|", lg32.dtype == np.float32
                  and e32 < 1e-5, f"({e32:.1e})")
        check("zero q/k/v biases equal no biases",
              np.max(np.abs(ref["llama_zero_bias"] - ref["llama"])) < 1e-12)
        check("non-zero q/k/v biases change the logits",
              np.max(np.abs(ref["llama_bias"] - ref["llama"])) > 1e-3)
        capped = 3.0 * np.tanh(ref["llama"] / 3.0)
        check("soft-capped logits are cap * tanh(logits / cap)",
              np.max(np.abs(ref["llama_softcap"] - capped)) < 1e-12 and
              np.max(np.abs(ref["llama"])) > 3.0)

        # Window: 2 sliding layers (W = 4): position p depends on tokens p - 2*(W-1) .. p.
        m = DecoderReference(files["gemma3"])
        assert m.layer_window == [4, 4]
        long = [int(x) for x in rng.integers(0, 64, size=16)]
        other = [(long[0] + 1) % 64] + long[1:]
        a = m.forward(long, m.new_cache(len(long)))
        b = m.forward(other, m.new_cache(len(long)))
        changed = np.max(np.abs(a - b), axis=1) > 0
        reach = 2 * (4 - 1)
        check("gemma3 window: token 0 reaches positions 0 .. L*(W-1) exactly",
              changed[:reach + 1].all() and not changed[reach + 1:].any(),
              f"(changed positions {np.nonzero(changed)[0].tolist()})")
        # 6 layers: layer 5 is global, so token 0 reaches every position.
        p6 = write_tiny_gguf(d / "gemma3_6.gguf", "gemma3", n_kv=1, n_layer=6)
        m6 = DecoderReference(p6)
        check("gemma3 layer pattern: layers 0-4 sliding, 5 global; RoPE bases 1e4 / file's",
              m6.layer_window == [4] * 5 + [None] and
              m6.layer_rope_base == [10000.0] * 5 + [1e6])
        a = m6.forward(long, m6.new_cache(len(long)))
        b = m6.forward(other, m6.new_cache(len(long)))
        check("gemma3 global layer: token 0 reaches every position",
              (np.max(np.abs(a - b), axis=1) > 0).all())
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
