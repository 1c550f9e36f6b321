"""An independent numpy forward pass of a decoder-only GGUF model (float64 by default).

Written from the published architectures (Hugging Face transformers' Llama / Qwen2 / Gemma3
modeling and llama.cpp's graphs), not from tinfer's code. The `gguf` package is used only to read
the file and to dequantize tensors; everything else (norms, RoPE, attention, FFN) is here. Every
hyperparameter comes from the GGUF metadata; what the architecture fixes without a key (Gemma 3's
layer pattern and local RoPE base) is named below with its source.

Architectures, chosen by `general.architecture`:

  llama   h = RMSNorm(x)*attn_norm; q,k,v = h W^T (+ bias when the file has attn_{q,k,v}.bias);
          RoPE on adjacent pairs (x[2i], x[2i+1]) (llama.cpp's converter permuted the Q/K rows so
          this equals HF's rotate-half); causal softmax(q k^T / sqrt(head_dim)) v with query head
          h reading KV head h // (n_head/n_kv); x += attn Wo^T; h = RMSNorm(x)*ffn_norm;
          x += (silu(h Wg^T) * h Wu^T) Wd^T.
  qwen2   llama with NeoX RoPE (rotate halves: x[i], x[i + n_rot/2]) and, as in the Qwen2 files,
          the q/k/v biases (used when present, as for every architecture here).
  gemma3  x = embedding * sqrtf(n_embd) (the float32 value, as llama.cpp scales; HF rounds the
          scale to bf16 first); q,k = RMSNorm over head_dim (attn_q_norm / attn_k_norm) before
          NeoX RoPE; q scaled by 1/sqrt(key_length) (llama.cpp's f_attention_scale; HF's
          query_pre_attn_scalar**-0.5, 256 for every size but 27B, where llama.cpp uses
          1/sqrt(n_embd/n_head)); sandwich norms: x += RMSNorm(attn, post_attention_norm),
          h = RMSNorm(x)*ffn_norm, x += RMSNorm((gelu_tanh(h Wg^T) * h Wu^T) Wd^T, post_ffw_norm);
          sliding-window layers where (layer+1) % 6 != 0 (llama.cpp set_swa_pattern(6), HF
          layer_types), the rest global; RoPE base 10,000 on sliding layers (llama.cpp
          rope_freq_base_train_swa, HF rope_local_base_freq) and rope.freq_base on global ones.
          Norm weights are used as stored: the GGUF converter already added Gemma's +1.

Window semantics (sliding layers, window W = attention.sliding_window): a query at position p
sees keys p-W+1 .. p, W tokens including itself. That is llama.cpp's is_masked_swa (masked when
p_query - p_key >= n_swa) and HF's sliding_window_overlay (kv_idx > q_idx - sliding_window).

For every architecture: `<arch>.final_logit_softcapping` = c, when present, gives
logits = c * tanh(logits / c). The LM head is output.weight, or token_embd.weight when the file
has none (tied). Anything the reference does not implement (RoPE scaling, attention-logit
soft-capping, a tensor it does not use) is refused, never ignored.

dtype: float64 for golden data; float32 runs the same arithmetic in float32 throughout (angles,
exp, sums, matmuls) to measure what an ordinary float32 implementation's error looks like.

Usage:
    m = DecoderReference(path)                # LlamaReference is the same class
    cache = m.new_cache(max_len)
    logits = m.forward(token_ids, cache)      # [T, vocab]; cache advances by T
    h = m.forward_hidden(token_ids, cache)    # [T, n_embd], final-normed; m.logits(h[a:b])

CLI:
    python3 llama_reference.py [model.gguf]   greedy chat answer of SmolLM2 (sanity check)
    python3 llama_reference.py --logits FILE.gguf --tokens 1,2,3 --out out.bin
        [--dtype float64|float32] [--out-dtype float64|float32]
        writes the logits of every position, raw little-endian [positions][vocab] (float64 by
        default), after one prefill of all the tokens from position 0.
"""
from __future__ import annotations

import os

# Single-threaded BLAS unless told otherwise: on a shared 2-core machine OpenBLAS's spinning
# threads made the small matmuls 4-8x slower. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import gguf
from gguf.quants import dequantize

SUPPORTED_ARCHS = ("llama", "qwen2", "gemma3")
# llama.cpp (llama-model.cpp, LLM_ARCH_GEMMA3): swa pattern 6, rope_freq_base_train_swa 10000.
GEMMA3_SWA_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10000.0


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class KVCache:
    def __init__(self, n_layer: int, max_len: int, n_kv: int, head_dim: int, dtype=np.float64):
        self.k = np.zeros((n_layer, max_len, n_kv, head_dim), dtype=dtype)
        self.v = np.zeros((n_layer, max_len, n_kv, head_dim), dtype=dtype)
        self.length = 0  # positions already stored (the next token's position)
        self.max_len = max_len


class DecoderReference:
    def __init__(self, path, dtype=np.float64):
        self.dtype = dt = np.dtype(dtype)
        self.reader = reader = gguf.GGUFReader(path)
        self.arch = arch = _field(reader, "general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ValueError(f"architecture {arch!r} is not one of {SUPPORTED_ARCHS}")

        def hp(name, default=None):
            v = _field(reader, f"{arch}.{name}", default)
            if v is None:
                raise KeyError(f"{arch}.{name} missing from the GGUF metadata")
            return v

        self.n_layer = int(hp("block_count"))
        self.n_embd = int(hp("embedding_length"))
        self.n_ff = int(hp("feed_forward_length"))
        self.n_head = int(hp("attention.head_count"))
        self.n_kv = int(hp("attention.head_count_kv", self.n_head))
        self.head_dim = int(hp("attention.key_length", self.n_embd // self.n_head))
        v_dim = int(hp("attention.value_length", self.head_dim))
        if v_dim != self.head_dim:
            raise ValueError(f"value_length {v_dim} != key_length {self.head_dim}: not implemented")
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        rope_base = float(hp("rope.freq_base", 10000.0))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        assert self.n_head % self.n_kv == 0
        assert self.n_rot % 2 == 0 and self.n_rot <= self.head_dim
        if _field(reader, f"{arch}.rope.scaling.type") not in (None, "none"):
            raise ValueError("RoPE scaling is not implemented in this reference")
        if _field(reader, f"{arch}.attention.logit_softcapping") is not None:
            raise ValueError("attention-logit soft-capping is not implemented in this reference")
        cap = _field(reader, f"{arch}.final_logit_softcapping")
        self.final_softcap = None if cap is None or float(cap) == 0.0 else float(cap)

        gemma = arch == "gemma3"
        self.rope_neox = arch in ("qwen2", "gemma3")  # llama.cpp LLAMA_ROPE_TYPE_NEOX
        self.gelu_ffn = gemma                          # HF hidden_activation gelu_pytorch_tanh
        self.sandwich_norms = gemma
        self.qk_norm = gemma
        # float32 sqrtf(n_embd), the value llama.cpp's ggml_scale uses
        self.embd_scale = float(np.sqrt(np.float32(self.n_embd))) if gemma else None
        if gemma and self.n_layer == 62:   # llama.cpp: 27B scales by 1/sqrt(n_embd/n_head)
            self.q_scale = 1.0 / np.sqrt(self.n_embd // self.n_head)
        else:
            self.q_scale = 1.0 / np.sqrt(self.head_dim)
        window = _field(reader, f"{arch}.attention.sliding_window")
        if gemma:
            self.window = int(hp("attention.sliding_window"))
            self.layer_window = [self.window if (l + 1) % GEMMA3_SWA_PATTERN != 0 else None
                                 for l in range(self.n_layer)]
            local_base = float(hp("rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE))
            self.layer_rope_base = [local_base if w is not None else rope_base
                                    for w in self.layer_window]
        else:
            if window is not None:
                raise ValueError(f"{arch}.attention.sliding_window: a window is not part of {arch} "
                                 "in this reference (llama.cpp's graph has none)")
            self.window = None
            self.layer_window = [None] * self.n_layer
            self.layer_rope_base = [rope_base] * self.n_layer

        tensors = {t.name: t for t in reader.tensors}
        used = set()

        def weight(name):
            t = tensors[name]
            used.add(name)
            shape = tuple(int(d) for d in reversed(t.shape))  # ne0 (contiguous) is last
            w = dequantize(t.data, t.tensor_type)
            return np.asarray(w, dtype=dt).reshape(shape)

        def optional(name):
            return weight(name) if name in tensors else None

        self.tok_embd = weight("token_embd.weight")                # [vocab, d]
        self.vocab = self.tok_embd.shape[0]
        self.output = optional("output.weight")                     # [vocab, d]
        if self.output is None:
            self.output = self.tok_embd
        self.output_norm = weight("output_norm.weight")
        self.layers = []
        hd = self.head_dim
        for l in range(self.n_layer):
            p = f"blk.{l}."
            L = dict(
                attn_norm=weight(p + "attn_norm.weight"),
                wq=weight(p + "attn_q.weight"),        # [n_head*head_dim, d]
                wk=weight(p + "attn_k.weight"),        # [n_kv*head_dim, d]
                wv=weight(p + "attn_v.weight"),        # [n_kv*head_dim, d]
                bq=optional(p + "attn_q.bias"),        # [n_head*head_dim] or None
                bk=optional(p + "attn_k.bias"),
                bv=optional(p + "attn_v.bias"),
                wo=weight(p + "attn_output.weight"),   # [d, n_head*head_dim]
                ffn_norm=weight(p + "ffn_norm.weight"),
                wg=weight(p + "ffn_gate.weight"),      # [n_ff, d]
                wu=weight(p + "ffn_up.weight"),        # [n_ff, d]
                wd=weight(p + "ffn_down.weight"),      # [d, n_ff]
            )
            if self.qk_norm:
                L["q_norm"] = weight(p + "attn_q_norm.weight")   # [head_dim]
                L["k_norm"] = weight(p + "attn_k_norm.weight")
            if self.sandwich_norms:
                L["post_attn_norm"] = weight(p + "post_attention_norm.weight")
                L["post_ffn_norm"] = weight(p + "post_ffw_norm.weight")
            assert L["wq"].shape == (self.n_head * hd, self.n_embd)
            assert L["wk"].shape == (self.n_kv * hd, self.n_embd)
            assert L["wv"].shape == (self.n_kv * hd, self.n_embd)
            assert L["wo"].shape == (self.n_embd, self.n_head * hd)
            assert L["wg"].shape == (self.n_ff, self.n_embd)
            assert L["wd"].shape == (self.n_embd, self.n_ff)
            for b, n in (("bq", self.n_head), ("bk", self.n_kv), ("bv", self.n_kv)):
                assert L[b] is None or L[b].shape == (n * hd,), (b, L[b].shape)
            self.layers.append(L)
        unused = sorted(set(tensors) - used)
        if unused:
            raise ValueError(f"tensors this reference does not implement: {unused[:8]}")
        self.has_qkv_bias = any(L["bq"] is not None for L in self.layers)
        # inverse frequencies base^(-2i/n_rot), i = 0 .. n_rot/2-1, per layer (in dtype)
        exps = np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot
        self.inv_freq = [(b ** -exps).astype(dt) for b in self.layer_rope_base]

    def converted(self, dtype) -> "DecoderReference":
        """The same model computing in another dtype, without reading the file again (the
        dequantized weights are float32 values, so float32 holds them exactly)."""
        import copy
        dt = np.dtype(dtype)
        m = copy.copy(self)
        m.dtype = dt
        m.tok_embd = self.tok_embd.astype(dt)
        m.output = m.tok_embd if self.output is self.tok_embd else self.output.astype(dt)
        m.output_norm = self.output_norm.astype(dt)
        m.layers = [{k: None if v is None else v.astype(dt) for k, v in L.items()}
                    for L in self.layers]
        exps = np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot
        m.inv_freq = [(b ** -exps).astype(dt) for b in self.layer_rope_base]
        return m

    def new_cache(self, max_len: int) -> KVCache:
        return KVCache(self.n_layer, max_len, self.n_kv, self.head_dim, self.dtype)

    def rms_norm(self, x, w):
        eps = self.dtype.type(self.eps)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(self, x, pos, inv_freq):
        """x: [T, heads, head_dim]; rotates the first n_rot dims: adjacent pairs (llama) or
        halves (NeoX: dim i with dim i + n_rot/2)."""
        ang = pos[:, None].astype(self.dtype) * inv_freq[None, :]          # [T, n_rot/2]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.copy()
        if self.rope_neox:
            half = self.n_rot // 2
            x0 = x[..., 0:half]
            x1 = x[..., half:self.n_rot]
            out[..., 0:half] = x0 * cos - x1 * sin
            out[..., half:self.n_rot] = x0 * sin + x1 * cos
        else:
            x0 = x[..., 0:self.n_rot:2]
            x1 = x[..., 1:self.n_rot:2]
            out[..., 0:self.n_rot:2] = x0 * cos - x1 * sin
            out[..., 1:self.n_rot:2] = x0 * sin + x1 * cos
        return out

    def activation(self, g):
        if self.gelu_ffn:  # tanh approximation (HF gelu_pytorch_tanh, ggml_gelu)
            c = self.dtype.type(np.sqrt(2.0 / np.pi))
            return self.dtype.type(0.5) * g * (1 + np.tanh(c * (g + self.dtype.type(0.044715)
                                                                 * g * g * g)))
        return g / (1 + np.exp(-g))  # silu

    def forward_hidden(self, tokens, cache: KVCache):
        """Runs tokens at positions cache.length .. cache.length+T-1; returns the final-normed
        hidden states [T, n_embd] (the LM head's input)."""
        dt = self.dtype.type
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        if T and (tokens.min() < 0 or tokens.max() >= self.vocab):
            raise ValueError(f"token id out of range [0, {self.vocab})")
        start = cache.length
        end = start + T
        assert end <= cache.max_len, "KV cache too small"
        pos = np.arange(start, end)
        group = self.n_head // self.n_kv
        scale = dt(self.q_scale)
        kpos = np.arange(end)
        causal = kpos[None, :] > pos[:, None]                               # [T, end] masked
        masks = {}
        for w in set(self.layer_window):
            # window W: a query at p sees keys p-W+1 .. p
            masks[w] = causal if w is None else causal | (kpos[None, :] <= pos[:, None] - w)

        x = self.tok_embd[tokens]                                           # [T, d]
        if self.embd_scale is not None:
            x = x * dt(self.embd_scale)
        hd = self.head_dim
        for l, L in enumerate(self.layers):
            h = self.rms_norm(x, L["attn_norm"])
            q = h @ L["wq"].T
            k = h @ L["wk"].T
            v = h @ L["wv"].T
            if L["bq"] is not None:
                q = q + L["bq"]
            if L["bk"] is not None:
                k = k + L["bk"]
            if L["bv"] is not None:
                v = v + L["bv"]
            q = q.reshape(T, self.n_head, hd)
            k = k.reshape(T, self.n_kv, hd)
            v = v.reshape(T, self.n_kv, hd)
            if self.qk_norm:
                q = self.rms_norm(q, L["q_norm"])
                k = self.rms_norm(k, L["k_norm"])
            q = self.rope(q, pos, self.inv_freq[l])
            k = self.rope(k, pos, self.inv_freq[l])
            cache.k[l, start:end] = k
            cache.v[l, start:end] = v
            K = cache.k[l, :end]                                            # [end, n_kv, hd]
            V = cache.v[l, :end]
            mask = masks[self.layer_window[l]]
            attn = np.empty((T, self.n_head, hd), dtype=self.dtype)
            for hh in range(self.n_head):
                kv = hh // group
                s = (q[:, hh, :] * scale) @ K[:, kv, :].T                   # [T, end]
                s = np.where(mask, -np.inf, s)
                s = s - s.max(axis=1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=1, keepdims=True)
                attn[:, hh, :] = p @ V[:, kv, :]
            o = attn.reshape(T, -1) @ L["wo"].T
            if self.sandwich_norms:
                o = self.rms_norm(o, L["post_attn_norm"])
            x = x + o
            h = self.rms_norm(x, L["ffn_norm"])
            f = (self.activation(h @ L["wg"].T) * (h @ L["wu"].T)) @ L["wd"].T
            if self.sandwich_norms:
                f = self.rms_norm(f, L["post_ffn_norm"])
            x = x + f
        cache.length = end
        return self.rms_norm(x, self.output_norm)

    def logits(self, hidden):
        """LM head (+ final soft-capping) of final-normed hidden states [T, d] -> [T, vocab]."""
        out = hidden @ self.output.T
        if self.final_softcap is not None:
            c = self.dtype.type(self.final_softcap)
            out = c * np.tanh(out / c)
        return out

    def forward(self, tokens, cache: KVCache):
        """Runs tokens at positions cache.length .. cache.length+T-1; returns logits [T, vocab]."""
        return self.logits(self.forward_hidden(tokens, cache))


LlamaReference = DecoderReference


def greedy(model: DecoderReference, prompt, n_new: int):
    """Greedy continuation (EOS is not special). Returns (prefill_logits, new_ids, step_logits)
    where step_logits[i] are the logits after feeding new_ids[i]."""
    cache = model.new_cache(len(prompt) + n_new)
    pre = model.forward(prompt, cache)
    ids = [int(np.argmax(pre[-1]))]
    steps = []
    for i in range(n_new):
        lg = model.forward([ids[-1]], cache)[0]
        steps.append(lg)
        if i + 1 < n_new:
            ids.append(int(np.argmax(lg)))
    return pre, ids, steps


def _logits_cli(argv):
    import argparse
    ap = argparse.ArgumentParser(description="logits of every position of a token sequence")
    ap.add_argument("--logits", required=True, metavar="FILE.gguf", help="model file")
    ap.add_argument("--tokens", required=True,
                    help="comma-separated token ids, fed from position 0")
    ap.add_argument("--out", required=True, help="output: raw little-endian [positions][vocab]")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"),
                    help="arithmetic of the forward pass")
    ap.add_argument("--out-dtype", default="float64", choices=("float64", "float32"))
    a = ap.parse_args(argv)
    tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    if not tokens:
        ap.error("--tokens is empty")
    m = DecoderReference(a.logits, dtype=np.float64 if a.dtype == "float64" else np.float32)
    lg = m.forward(tokens, m.new_cache(len(tokens)))
    out = np.ascontiguousarray(lg, dtype="<f8" if a.out_dtype == "float64" else "<f4")
    with open(a.out, "wb") as f:
        f.write(out.tobytes())


if __name__ == "__main__":
    import sys
    import time
    from pathlib import Path

    if "--logits" in sys.argv[1:]:
        _logits_cli(sys.argv[1:])
        sys.exit(0)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gguf_hf_tokenizer as tk

    path = sys.argv[1] if len(sys.argv) > 1 else \
        str(Path.home() / ".cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    t0 = time.time()
    m = LlamaReference(path)
    tok = tk.build_tokenizer(m.reader)
    text = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n")
    ids = tk.encode(tok, text)
    cache = m.new_cache(len(ids) + 32)
    lg = m.forward(ids, cache)
    out = [int(np.argmax(lg[-1]))]
    for _ in range(31):
        out.append(int(np.argmax(m.forward([out[-1]], cache)[0])))
    print(repr(tk.decode(tok, out)), f"({time.time() - t0:.1f}s)")
