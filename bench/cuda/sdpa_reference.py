#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on cuda_attention_bench's shapes, for the GPU suite's
side-by-side table (bench/gpu_suite.sh). Same definitions as the benchmark:

  decode:  64 sequences x 4096 cached positions, 32 query heads over 8 KV heads (GQA,
           enable_gqa=True), head_dim 128, bf16 K/V (contiguous: SDPA has no paged layout, which
           favours it); GB/s = K and V bytes read / time;
  prefill: one 4096-token causal sequence, the same heads, bf16; TFLOP/s counting the causal
           half, 2 * S^2 * head_dim * heads (QK^T and PV, each S^2/2 dot products of 2 * d).

Times are medians of 20 runs after 3 warm-ups, by CUDA events. Prints "RESULT <name> <value>
<unit>" lines; exits 77 when PyTorch or a GPU is missing (the suite reports "n/a").
"""
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("no PyTorch: skipped")
    sys.exit(77)

REPEATS, WARMUP = 20, 3
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(body):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(WARMUP):
        body()
    times = []
    for _ in range(REPEATS):
        start.record()
        body()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def result(name, value, unit):
    print(f"RESULT {name} {value:.4g} {unit}")


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 77
    torch.manual_seed(20261204)
    dev, dtype = "cuda", torch.bfloat16
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")

    seqs, context = 64, 4096
    q = torch.randn(seqs, HEADS, 1, HEAD_DIM, device=dev, dtype=dtype)
    k = torch.randn(seqs, KV_HEADS, context, HEAD_DIM, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    kv_bytes = 2 * k.numel() * k.element_size()
    result("sdpa_decode_ms", ms, "ms")
    result("sdpa_decode_gbs", kv_bytes / (ms * 1e-3) / 1e9, "GB/s")

    tokens = 4096
    q = torch.randn(1, HEADS, tokens, HEAD_DIM, device=dev, dtype=dtype)
    k = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                          enable_gqa=True))
    flops = 2.0 * tokens * tokens * HEAD_DIM * HEADS
    result("sdpa_prefill_ms", ms, "ms")
    result("sdpa_prefill_tflops", flops / (ms * 1e-3) / 1e12, "TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
