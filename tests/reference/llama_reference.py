"""An independent float64 numpy forward pass of a llama-architecture GGUF model.

Written from the architecture, not from tinfer's code. The `gguf` package is used only to read
the file and to dequantize tensors; everything else (norms, RoPE, attention, FFN) is here, in
float64. Every hyperparameter comes from the GGUF metadata.

Architecture (per layer l, activations x of shape [T, d]):
    h   = RMSNorm(x) * attn_norm              RMSNorm(x) = x / sqrt(mean(x^2) + eps)
    q,k,v = h Wq^T, h Wk^T, h Wv^T            W of GGUF dims [ne0=in, ne1=out] -> array [out, in]
    q,k = RoPE on adjacent pairs (x[2i], x[2i+1]), angle pos * base^(-2i/n_rot)
          (llama.cpp's converter permuted the Q/K rows so this matches HF's rotate-half)
    attn = causal softmax(q k^T / sqrt(head_dim)) v, query head h reads KV head h // (n_head/n_kv)
    x  += attn Wo^T
    h   = RMSNorm(x) * ffn_norm
    x  += (silu(h Wg^T) * (h Wu^T)) Wd^T
Finally logits = (RMSNorm(x) * output_norm) E^T where E is output.weight, or token_embd.weight
when the model ties its embeddings (no output.weight tensor).

Usage:
    m = LlamaReference(path)
    cache = m.new_cache(max_len)
    logits = m.forward(token_ids, cache)   # [T, vocab] float64; cache advances by T
"""
from __future__ import annotations

import numpy as np
import gguf
from gguf.quants import dequantize


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class KVCache:
    def __init__(self, n_layer: int, max_len: int, n_kv: int, head_dim: int):
        self.k = np.zeros((n_layer, max_len, n_kv, head_dim))
        self.v = np.zeros((n_layer, max_len, n_kv, head_dim))
        self.length = 0  # positions already stored (the next token's position)
        self.max_len = max_len


class LlamaReference:
    def __init__(self, path):
        self.reader = reader = gguf.GGUFReader(path)
        arch = _field(reader, "general.architecture")
        if arch != "llama":
            raise ValueError(f"architecture {arch!r} is not llama")

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
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        self.rope_base = float(hp("rope.freq_base", 10000.0))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        assert self.n_head % self.n_kv == 0
        assert self.n_rot % 2 == 0 and self.n_rot <= self.head_dim
        if _field(reader, f"{arch}.rope.scaling.type") not in (None, "none"):
            raise ValueError("RoPE scaling is not implemented in this reference")

        tensors = {t.name: t for t in reader.tensors}

        def weight(name):
            t = tensors[name]
            shape = tuple(int(d) for d in reversed(t.shape))  # ne0 (contiguous) is last
            w = dequantize(t.data, t.tensor_type)
            return np.asarray(w, dtype=np.float64).reshape(shape)

        self.tok_embd = weight("token_embd.weight")                # [vocab, d]
        self.vocab = self.tok_embd.shape[0]
        self.output = (weight("output.weight") if "output.weight" in tensors
                       else self.tok_embd)                          # [vocab, d]
        self.output_norm = weight("output_norm.weight")
        self.layers = []
        for l in range(self.n_layer):
            p = f"blk.{l}."
            L = dict(
                attn_norm=weight(p + "attn_norm.weight"),
                wq=weight(p + "attn_q.weight"),        # [n_head*head_dim, d]
                wk=weight(p + "attn_k.weight"),        # [n_kv*head_dim, d]
                wv=weight(p + "attn_v.weight"),        # [n_kv*head_dim, d]
                wo=weight(p + "attn_output.weight"),   # [d, n_head*head_dim]
                ffn_norm=weight(p + "ffn_norm.weight"),
                wg=weight(p + "ffn_gate.weight"),      # [n_ff, d]
                wu=weight(p + "ffn_up.weight"),        # [n_ff, d]
                wd=weight(p + "ffn_down.weight"),      # [d, n_ff]
            )
            assert L["wq"].shape == (self.n_head * self.head_dim, self.n_embd)
            assert L["wk"].shape == (self.n_kv * self.head_dim, self.n_embd)
            assert L["wd"].shape == (self.n_embd, self.n_ff)
            self.layers.append(L)
        # inverse frequencies base^(-2i/n_rot), i = 0 .. n_rot/2-1
        self.inv_freq = self.rope_base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64)
                                           / self.n_rot)

    def new_cache(self, max_len: int) -> KVCache:
        return KVCache(self.n_layer, max_len, self.n_kv, self.head_dim)

    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """x: [T, heads, head_dim]; rotates adjacent pairs of the first n_rot dims."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]    # [T, n_rot/2]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.copy()
        x0 = x[..., 0:self.n_rot:2]
        x1 = x[..., 1:self.n_rot:2]
        out[..., 0:self.n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:self.n_rot:2] = x0 * sin + x1 * cos
        return out

    def forward(self, tokens, cache: KVCache):
        """Runs tokens at positions cache.length .. cache.length+T-1; returns logits [T, vocab]."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        start = cache.length
        end = start + T
        assert end <= cache.max_len, "KV cache too small"
        pos = np.arange(start, end)
        group = self.n_head // self.n_kv
        scale = 1.0 / np.sqrt(self.head_dim)
        # causal mask: query at absolute position p sees keys 0..p
        mask = np.arange(end)[None, :] > pos[:, None]                       # [T, end]

        x = self.tok_embd[tokens]                                           # [T, d]
        for l, L in enumerate(self.layers):
            h = self.rms_norm(x, L["attn_norm"])
            q = (h @ L["wq"].T).reshape(T, self.n_head, self.head_dim)
            k = (h @ L["wk"].T).reshape(T, self.n_kv, self.head_dim)
            v = (h @ L["wv"].T).reshape(T, self.n_kv, self.head_dim)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            cache.k[l, start:end] = k
            cache.v[l, start:end] = v
            K = cache.k[l, :end]                                            # [end, n_kv, hd]
            V = cache.v[l, :end]
            attn = np.empty((T, self.n_head, self.head_dim))
            for hh in range(self.n_head):
                kv = hh // group
                s = (q[:, hh, :] @ K[:, kv, :].T) * scale                   # [T, end]
                s = np.where(mask, -np.inf, s)
                s = s - s.max(axis=1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=1, keepdims=True)
                attn[:, hh, :] = p @ V[:, kv, :]
            x = x + attn.reshape(T, -1) @ L["wo"].T
            h = self.rms_norm(x, L["ffn_norm"])
            g = h @ L["wg"].T
            u = h @ L["wu"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ L["wd"].T
        cache.length = end
        x = self.rms_norm(x, self.output_norm)
        return x @ self.output.T                                            # [T, vocab]


def greedy(model: LlamaReference, prompt, n_new: int):
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


if __name__ == "__main__":
    import sys
    import time
    from pathlib import Path
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
