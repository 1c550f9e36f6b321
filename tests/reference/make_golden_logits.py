"""Writes tests/data/reference/golden_logits.bin from the float64 reference (llama_reference.py).

    python3 tests/reference/make_golden_logits.py [model.gguf] [out.bin]

For each prompt: tokenize (gguf_hf_tokenizer.py), prefill every position, then feed 64 greedy
tokens one at a time through the KV cache (EOS is not special: decoding always runs 64 steps).
The binary format is described in tests/reference/README.md and read by golden_logits.hpp.
"""
from __future__ import annotations

import hashlib
import struct
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gguf_hf_tokenizer as tk  # noqa: E402
from llama_reference import LlamaReference, greedy  # noqa: E402

MAGIC = b"TFGL"
VERSION = 1
N_DECODE = 64
N_DECODE_WITH_LOGITS = 16
N_TOP = 32
N_RANDOM = 224
SUBSET_SEED = 20240601

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


def position_record(lg, subset_random, with_logits):
    lg = np.asarray(lg, dtype=np.float64)
    max_abs = float(np.max(np.abs(lg)))
    am = int(np.argmax(lg))
    margin = top2(lg)
    rec = struct.pack("<fif", max_abs, am, margin)
    if not with_logits:
        return rec + struct.pack("<I", 0), (max_abs, am, margin)
    top = np.argsort(-lg, kind="stable")[:N_TOP]
    assert top[0] == am
    topset = set(int(i) for i in top)
    ids = [int(i) for i in top] + [int(i) for i in subset_random if int(i) not in topset]
    pairs = np.empty(len(ids), dtype=[("id", "<i4"), ("logit", "<f4")])
    pairs["id"] = ids
    pairs["logit"] = lg[ids].astype(np.float32)
    return rec + struct.pack("<I", len(ids)) + pairs.tobytes(), (max_abs, am, margin)


def pack_bytes(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def pack_ids(ids) -> bytes:
    return struct.pack("<I", len(ids)) + np.asarray(ids, dtype="<i4").tobytes()


def main():
    model_path = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path.home() / ".cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        HERE.parent / "data/reference/golden_logits.bin"
    t0 = time.time()
    sha = hashlib.sha256(model_path.read_bytes()).digest()
    m = LlamaReference(model_path)
    tok = tk.build_tokenizer(m.reader)
    print(f"loaded {model_path.name} in {time.time() - t0:.1f}s")

    rng = np.random.default_rng(SUBSET_SEED)
    subset_random = np.sort(rng.choice(m.vocab, size=N_RANDOM, replace=False))

    blob = bytearray()
    blob += MAGIC + struct.pack("<IIIIII", VERSION, len(PROMPTS), m.vocab, N_DECODE,
                                N_DECODE_WITH_LOGITS, N_TOP)
    blob += sha
    blob += pack_bytes(model_path.name.encode())
    largest = 0.0
    for name, text in PROMPTS:
        t1 = time.time()
        ids = tk.encode(tok, text)
        assert tk.decode(tok, ids) == text, "tokenizer does not round-trip"
        pre, new, steps = greedy(m, ids, N_DECODE)
        # Self-check of the KV cache: one prefill over prompt + generated tokens must give the
        # same logits as the incremental decode steps.
        full = m.forward(ids + new, m.new_cache(len(ids) + N_DECODE))
        err = max(np.max(np.abs(full[len(ids) + i] - steps[i])) for i in range(N_DECODE))
        assert err < 1e-9, f"prefill vs decode mismatch {err}"
        assert np.max(np.abs(full[:len(ids)] - pre)) < 1e-9

        blob += pack_bytes(name.encode()) + pack_bytes(text.encode())
        blob += pack_ids(ids) + pack_ids(new)
        blob += struct.pack("<II", len(ids), N_DECODE)
        stats = []
        for lg in pre:
            r, s = position_record(lg, subset_random, True)
            blob += r
            stats.append(("prefill", s))
        for i, lg in enumerate(steps):
            r, s = position_record(lg, subset_random, i < N_DECODE_WITH_LOGITS)
            blob += r
            stats.append(("decode", s))
        assert stats[len(ids) - 1][1][1] == new[0]
        for i in range(N_DECODE - 1):
            assert steps[i].argmax() == new[i + 1]
        mx = max(s[0] for _, s in stats)
        largest = max(largest, mx)
        print(f"\n== {name}: {len(ids)} prompt tokens, max|logit| {mx:.3f}, "
              f"{time.time() - t1:.1f}s, prefill-vs-decode max diff {err:.2e}")
        print("continuation:", repr(tk.decode(tok, new)))
        # near-ties: top-2 margin inside the test tolerance 1e-3 * max|logit| (and 3x it)
        for j, (kind, (ma, am, mg)) in enumerate(stats):
            tol = 1e-3 * ma
            if mg <= 3 * tol:
                idx = j if kind == "prefill" else j - len(ids)
                greedy_pos = kind == "decode" or j == len(ids) - 1
                print(f"  near-tie {kind}[{idx}]: margin {mg:.5f}, tol {tol:.5f} "
                      f"({'INSIDE' if mg <= tol else 'within 3x'}"
                      f"{', on the greedy path' if greedy_pos else ''})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(bytes(blob))
    print(f"\nwrote {out_path} ({len(blob)} bytes); largest |logit| {largest:.3f}; "
          f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
