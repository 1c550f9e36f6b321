"""Writes tests/data/reference/gemma3_golden_logits.bin: Gemma 3 270M (Q4_K_M) golden logits from
the float64 reference (llama_reference.py), in the format make_golden_logits.py writes and
golden_logits.hpp reads (version 2: with each position's measured float32 error).

    python3 tests/reference/make_gemma3_golden.py [gemma-3-270m-q4_k_m.gguf] [out.bin]

Gemma 3 270M is a base model, so the prompts are text to continue: a plain sentence, Python code,
and Pride and Prejudice's chapter 1 up to "...my little Lizzy." (730 tokens, so positions 512 and
later exercise the 512-token sliding window). Token ids come from two independent tokenizers
(gguf_spm_tokenizer.py: a SentencePiece encoder written from llama.cpp's algorithm, and
transformers' GGUF tokenizer conversion) and are used only where both agree; they are stored in
the file, BOS (id 2) first as tokenizer.ggml.add_bos_token says. Each prompt is followed by 64
greedy tokens, the first 32 decode steps with logits. About 8 minutes on 2 busy cores, 5 GB RAM.
"""
from __future__ import annotations

import os

# Single-threaded BLAS unless told otherwise: on a shared 2-core machine OpenBLAS's spinning
# threads made the small matmuls 4-8x slower. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gguf_spm_tokenizer as spm  # noqa: E402
from llama_reference import DecoderReference  # noqa: E402
from make_golden_logits import CODE, LONG, PLAIN, write_golden  # noqa: E402

N_DECODE = 64
N_DECODE_WITH_LOGITS = 32
N_TOP = 32
N_RANDOM = 192  # 224 stored ids per position at most: keeps the file under 2 MB
SUBSET_SEED = 20240601

# Jane Austen, Pride and Prejudice (1813), chapter 1 continued past the SmolLM2 prompt (public
# domain; written out from memory as faithfully as possible, like tests/data/text/).
LONG_REST = """"Is that his design in settling here?"

"Design! Nonsense, how can you talk so! But it is very likely that he may fall in love with one of them, and therefore you must visit him as soon as he comes."

"I see no occasion for that. You and the girls may go, or you may send them by themselves, which perhaps will be still better, for as you are as handsome as any of them, Mr. Bingley may like you the best of the party."

"My dear, you flatter me. I certainly have had my share of beauty, but I do not pretend to be anything extraordinary now. When a woman has five grown-up daughters, she ought to give over thinking of her own beauty."

"In such cases, a woman has not often much beauty to think of."

"But, my dear, you must indeed go and see Mr. Bingley when he comes into the neighbourhood."

"It is more than I engage for, I assure you."

"But consider your daughters. Only think what an establishment it would be for one of them. Sir William and Lady Lucas are determined to go, merely on that account, for in general, you know, they visit no newcomers. Indeed you must go, for it will be impossible for us to visit him if you do not."

"You are over-scrupulous, surely. I dare say Mr. Bingley will be very glad to see you; and I will send a few lines by you to assure him of my hearty consent to his marrying whichever he chooses of the girls; though I must throw in a good word for my little Lizzy."
"""
LONG_GEMMA = LONG.rstrip("\n") + "\n\n" + LONG_REST

PROMPTS = [("plain", PLAIN), ("code", CODE), ("long_prose", LONG_GEMMA)]


def main():
    model_path = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path.home() / ".cache/tinfer/models/gemma-3-270m-q4_k_m.gguf"
    out_path = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        HERE.parent / "data/reference/gemma3_golden_logits.bin"
    t0 = time.time()
    m = DecoderReference(model_path)
    assert m.arch == "gemma3", m.arch
    enc = spm.SpmEncoder(m.reader)
    hf = spm.hf_tokenizer(m.reader)
    print(f"loaded {model_path.name} in {time.time() - t0:.1f}s "
          f"(add_bos {enc.add_bos}, add_space_prefix {enc.add_space_prefix})")
    prompts = []
    for name, text in PROMPTS:
        ids = enc.encode(text)
        other = spm.hf_encode(hf, enc, text)
        assert ids == other, f"{name}: the two tokenizers disagree"
        assert enc.decode(ids) == text, f"{name}: does not round-trip"
        assert ids[0] == enc.bos == 2
        prompts.append((name, text, ids))
        print(f"{name}: {len(ids)} tokens (both tokenizers agree)")
    write_golden(m, model_path, out_path, prompts, enc.decode, n_decode=N_DECODE,
                 n_decode_with_logits=N_DECODE_WITH_LOGITS, n_top=N_TOP, n_random=N_RANDOM,
                 subset_seed=SUBSET_SEED)


if __name__ == "__main__":
    main()
