"""Writes tests/data/reference/golden_logits.bin (SmolLM2) from the float64 reference
(llama_reference.py); also the shared writer make_gemma3_golden.py uses.

    python3 tests/reference/make_golden_logits.py [model.gguf] [out.bin]

For each prompt: tokenize (gguf_hf_tokenizer.py), prefill every position, then feed 64 greedy
tokens one at a time through the KV cache (EOS is not special: decoding always runs 64 steps).
The same token sequence (prompt, then the float64 greedy tokens, teacher-forced) is run again by
the same reference in float32, and each position records max |float32 - float64| over the whole
vocabulary divided by its max |logit|: the scale of an ordinary float32 implementation's error.
The binary format is described in tests/reference/README.md and read by golden_logits.hpp
(and golden_file.py).
"""
from __future__ import annotations

import os

# Single-threaded BLAS unless told otherwise: on a shared 2-core machine OpenBLAS's spinning
# threads made the small matmuls 4-8x slower. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import hashlib
import struct
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llama_reference import DecoderReference  # noqa: E402

MAGIC = b"TFGL"
VERSION = 2
N_DECODE = 64
N_DECODE_WITH_LOGITS = 16
N_TOP = 32
N_RANDOM = 224
SUBSET_SEED = 20240601
LOGIT_CHUNK = 64  # LM-head rows at a time (Gemma 3: 64 x 262144 float64 = 134 MB)

PLAIN = "Water boils at 100 degrees Celsius at sea level, but at higher altitudes"

CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n")

# Jane Austen, Pride and Prejudice (1813), chapter 1 (public domain).
LONG = """It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.

However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters.

"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park is let at last?"

Mr. Bennet replied that he had not.

"But it is," returned she; "for Mrs. Long has just been here, and she told me all about it."

Mr. Bennet made no answer.

"Do you not want to know who has taken it?" cried his wife impatiently.

"You want to tell me, and I have no objection to hearing it."

This was invitation enough.

"Why, my dear, you must know, Mrs. Long says that Netherfield is taken by a young man of large fortune from the north of England; that he came down on Monday in a chaise and four to see the place, and was so much delighted with it, that he agreed with Mr. Morris immediately; that he is to take possession before Michaelmas, and some of his servants are to be in the house by the end of next week."

"What is his name?"

"Bingley."

"Is he married or single?"

"Oh! Single, my dear, to be sure! A single man of large fortune; four or five thousand a year. What a fine thing for our girls!"

"How so? How can it affect them?"

"My dear Mr. Bennet," replied his wife, "how can you be so tiresome! You must know that I am thinking of his marrying one of them."
"""

CODE = '''def binary_search(items, target):
    """Return the index of target in the sorted list items, or -1."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        elif items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


def main():
    data = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    print(binary_search(data, 13))
'''

PROMPTS = [("plain", PLAIN), ("chat", CHAT), ("long_prose", LONG), ("code", CODE)]


def top2(lg):
    i2 = np.argpartition(lg, -2)[-2:]
    a, b = sorted(lg[i2], reverse=True)
    return float(a - b)


def position_record(lg, lg32, subset_random, n_top, with_logits):
    """One position: stats over the full vocabulary, the float32 error, and the stored ids."""
    lg = np.asarray(lg, dtype=np.float64)
    max_abs = float(np.max(np.abs(lg)))
    am = int(np.argmax(lg))
    margin = top2(lg)
    f32_err = float(np.max(np.abs(np.asarray(lg32, dtype=np.float64) - lg)) / max_abs)
    rec = struct.pack("<fiff", max_abs, am, margin, f32_err)
    stats = (max_abs, am, margin, f32_err, int(np.argmax(lg32)))
    if not with_logits:
        return rec + struct.pack("<I", 0), stats
    top = np.argsort(-lg, kind="stable")[:n_top]
    assert top[0] == am
    topset = set(int(i) for i in top)
    ids = [int(i) for i in top] + [int(i) for i in subset_random if int(i) not in topset]
    pairs = np.empty(len(ids), dtype=[("id", "<i4"), ("logit", "<f4")])
    pairs["id"] = ids
    pairs["logit"] = lg[ids].astype(np.float32)
    return rec + struct.pack("<I", len(ids)) + pairs.tobytes(), stats


def pack_bytes(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def pack_ids(ids) -> bytes:
    return struct.pack("<I", len(ids)) + np.asarray(ids, dtype="<i4").tobytes()


def run_sequence(m: DecoderReference, prompt, n_decode, greedy_ids=None):
    """Prefill `prompt`, then decode n_decode tokens one at a time: greedily (greedy_ids None)
    or teacher-forced on greedy_ids. Returns (prefill hidden [n, d], ids, decode logits [n_decode,
    vocab]) where decode row i is the logits after feeding ids[i]."""
    cache = m.new_cache(len(prompt) + n_decode)
    h = m.forward_hidden(prompt, cache)
    ids = [int(np.argmax(m.logits(h[-1:])[0]))] if greedy_ids is None else list(greedy_ids)
    steps = np.empty((n_decode, m.vocab), dtype=m.dtype)
    for i in range(n_decode):
        steps[i] = m.logits(m.forward_hidden([ids[i]], cache))[0]
        if greedy_ids is None and i + 1 < n_decode:
            ids.append(int(np.argmax(steps[i])))
    return h, ids, steps


def write_golden(m: DecoderReference, model_path: Path, out_path: Path, prompts, decode_text,
                 n_decode=N_DECODE, n_decode_with_logits=N_DECODE_WITH_LOGITS, n_top=N_TOP,
                 n_random=N_RANDOM, subset_seed=SUBSET_SEED, rtol=1e-3):
    """prompts: [(name, text, ids)]. Writes the golden file; returns {name: per-prompt summary}."""
    t0 = time.time()
    m32 = m.converted(np.float32)
    sha = hashlib.sha256(model_path.read_bytes()).digest()
    rng = np.random.default_rng(subset_seed)
    subset_random = np.sort(rng.choice(m.vocab, size=n_random, replace=False))

    blob = bytearray()
    blob += MAGIC + struct.pack("<IIIIII", VERSION, len(prompts), m.vocab, n_decode,
                                n_decode_with_logits, n_top)
    blob += sha
    blob += pack_bytes(model_path.name.encode())
    summary = {}
    for name, text, ids in prompts:
        t1 = time.time()
        n = len(ids)
        h_pre, new, steps = run_sequence(m, ids, n_decode)
        h32_pre, _, steps32 = run_sequence(m32, ids, n_decode, greedy_ids=new)
        # Self-check of the KV cache: one prefill over prompt + generated tokens must give the
        # same results as the incremental decode steps.
        full = m.forward_hidden(ids + new, m.new_cache(n + n_decode))
        err_h = np.max(np.abs(full[:n] - h_pre)) / np.max(np.abs(h_pre))
        err = np.max(np.abs(m.logits(full[n:]) - steps))
        assert err < 1e-9 and err_h < 1e-12, f"prefill vs decode mismatch {err} {err_h}"

        blob += pack_bytes(name.encode()) + pack_bytes(text.encode())
        blob += pack_ids(ids) + pack_ids(new)
        blob += struct.pack("<II", n, n_decode)
        stats = []
        for a in range(0, n, LOGIT_CHUNK):
            lg = m.logits(h_pre[a:a + LOGIT_CHUNK])
            lg32 = m32.logits(h32_pre[a:a + LOGIT_CHUNK])
            for j in range(lg.shape[0]):
                r, s = position_record(lg[j], lg32[j], subset_random, n_top, True)
                blob += r
                stats.append(("prefill", s))
        for i in range(n_decode):
            r, s = position_record(steps[i], steps32[i], subset_random, n_top,
                                   i < n_decode_with_logits)
            blob += r
            stats.append(("decode", s))
        assert stats[n - 1][1][1] == new[0]
        for i in range(n_decode - 1):
            assert steps[i].argmax() == new[i + 1]
        mx = max(s[0] for _, s in stats)
        f32 = np.array([s[3] for _, s in stats])
        # float32's own argmax along the greedy path (teacher-forced): first disagreement
        path = [stats[n - 1][1]] + [s for _, s in stats[n:n + n_decode - 1]]
        agree = next((k for k, s in enumerate(path) if s[4] != s[1]), len(path))
        summary[name] = dict(n_prompt=n, max_abs=mx, f32_max=float(f32.max()),
                             f32_median=float(np.median(f32)),
                             f32_prefill_max=float(f32[:n].max()),
                             f32_decode_max=float(f32[n:].max()), f32_greedy_agree=agree,
                             continuation=decode_text(new))
        print(f"\n== {name}: {n} prompt tokens, max|logit| {mx:.3f}, "
              f"{time.time() - t1:.1f}s, prefill-vs-decode max diff {err:.2e} (hidden {err_h:.1e})")
        print("continuation:", repr(decode_text(new)))
        print(f"float32 vs float64, max|diff|/max|logit|: max {f32.max():.2e} "
              f"(prefill {f32[:n].max():.2e}, decode {f32[n:].max():.2e}), "
              f"median {np.median(f32):.2e}; float32 argmax follows the greedy path for "
              f"{agree} of {len(path)} tokens")
        # near-ties: top-2 margin inside the tolerance rtol * max|logit| (and 3x it)
        for j, (kind, (ma, am, mg, _, _)) in enumerate(stats):
            tol = rtol * ma
            if mg <= 3 * tol:
                idx = j if kind == "prefill" else j - n
                greedy_pos = kind == "decode" or j == n - 1
                print(f"  near-tie {kind}[{idx}]: margin {mg:.5f}, tol {tol:.5f} "
                      f"({'INSIDE' if mg <= tol else 'within 3x'}"
                      f"{', on the greedy path' if greedy_pos else ''})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(bytes(blob))
    print(f"\nwrote {out_path} ({len(blob)} bytes); total {time.time() - t0:.1f}s")
    return summary


def main():
    import gguf_hf_tokenizer as tk
    model_path = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path.home() / ".cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        HERE.parent / "data/reference/golden_logits.bin"
    t0 = time.time()
    m = DecoderReference(model_path)
    tok = tk.build_tokenizer(m.reader)
    print(f"loaded {model_path.name} in {time.time() - t0:.1f}s")
    prompts = []
    for name, text in PROMPTS:
        ids = tk.encode(tok, text)
        assert tk.decode(tok, ids) == text, "tokenizer does not round-trip"
        prompts.append((name, text, ids))
    write_golden(m, model_path, out_path, prompts, lambda ids: tk.decode(tok, ids))


if __name__ == "__main__":
    main()
