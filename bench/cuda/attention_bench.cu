// Attention kernel benchmarks on the device, each against a reference measured in the same
// program (DESIGN.md: memory-bound kernels in GB/s against the machine's measured bandwidth,
// compute-bound ones in FLOP/s against a measured GEMM):
//   decode:  paged decode attention, batch 64, 4K context, Llama-3-8B's heads (32 query heads
//            over 8 KV heads, head_dim 128), bf16 KV, 16-token blocks in shuffled physical order;
//            GB/s of K and V read, against a device-to-device cudaMemcpy (bytes read + written
//            per second); bench/cuda/sdpa_reference.py times PyTorch's SDPA on the same shapes;
//   prefill: causal prefill attention of one 4K-token prompt, head_dim 128, 32 query heads in
//            groups of 4 (Llama-3-8B), bf16 KV; TFLOP/s (2 * S^2 * head_dim * heads for the causal
//            half of QK^T and PV) against cuBLAS GEMMs of 8192^3: bf16 with tensor cores
//            (cublasGemmEx) and fp32 (cublasSgemm, the same CUDA cores the kernel uses).
// Times are the median of `repeats` runs, each timed with CUDA events after warm-up. Output
// lines "RESULT <name> <value> <unit>" are what bench/gpu_suite.sh tabulates.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/decode_attention.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/prefill_attention.cuh>

namespace {

using namespace tinfer;
using namespace tinfer::kernels::cuda;

constexpr int repeats = 20;
constexpr int warmup = 3;
constexpr int block_size = 16;
constexpr int head_dim = 128;
using Codec = kv::Bf16Codec;
constexpr std::size_t vector_bytes = Codec::vector_bytes<head_dim>;

void check_cublas(cublasStatus_t status, char const* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string(what) + ": cuBLAS status " +
                    std::to_string(static_cast<int>(status)));
}

// Median milliseconds of `body` over `repeats` runs.
template <class Body>
double median_ms(Body&& body) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < warmup; ++i) body();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
        check(cudaEventRecord(start), "cudaEventRecord");
        body();
        check(cudaEventRecord(stop), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times.push_back(ms);
    }
    check(cudaEventDestroy(start), "cudaEventDestroy");
    check(cudaEventDestroy(stop), "cudaEventDestroy");
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

void result(char const* name, double value, char const* unit) {
    std::printf("RESULT %s %.4g %s\n", name, value, unit);
}

// Deterministic pseudo-random 16-bit values in [-1, 1) as bf16 (or fp16) bits: filled on the
// device, since the decode benchmark's cache is a gigabyte.
__global__ void fill_bf16_kernel(std::uint16_t* out, std::size_t count, std::uint32_t seed) {
    std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        // A murmur3-style integer hash of the index: cheap, and no visible pattern.
        constexpr std::uint32_t golden_ratio = 0x9E3779B1u;
        constexpr std::uint32_t mixer = 0x2C1B3C6Du;
        constexpr std::uint32_t low_16_bits = 0xffffu;
        constexpr float half_range = 32768.0f;  // maps 16 bits onto [0, 2)
        std::uint32_t h = static_cast<std::uint32_t>(i) * golden_ratio ^ seed;
        h ^= h >> 15;
        h *= mixer;
        h ^= h >> 12;
        float const value = static_cast<float>(h & low_16_bits) / half_range - 1.0f;
        out[i] = DeviceElement<DType::bf16>::from_float(value);
    }
}

void fill_bf16(void* out, std::size_t count, std::uint32_t seed) {
    constexpr int threads = 256;
    constexpr int blocks = 2048;
    fill_bf16_kernel<<<blocks, threads>>>(static_cast<std::uint16_t*>(out), count, seed);
    check_launch("fill_bf16_kernel");
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// A one-layer paged cache of `seqs` sequences of `context` tokens, physical blocks shuffled.
struct BenchCache {
    DeviceBuffer<std::byte> storage;
    DeviceBuffer<int> tables;
    PagedKvLayer layer;
    std::size_t kv_bytes;  // K and V bytes the sequences hold

    BenchCache(int seqs, int context, int kv_heads) {
        int const blocks_per_seq = ceil_div(context, block_size);
        int const blocks = seqs * blocks_per_seq;
        std::size_t const block_bytes =
            2 * static_cast<std::size_t>(kv_heads) * block_size * vector_bytes;
        storage = DeviceBuffer<std::byte>(static_cast<std::size_t>(blocks) * block_bytes);
        fill_bf16(storage.data(), storage.bytes() / sizeof(std::uint16_t), 12345u);
        std::vector<int> physical(static_cast<std::size_t>(blocks));
        std::iota(physical.begin(), physical.end(), 0);
        std::shuffle(physical.begin(), physical.end(), std::mt19937(7));
        tables = DeviceBuffer<int>(physical);
        layer = PagedKvLayer{
            .storage = storage.data(),
            .block_bytes = block_bytes,
            .key_offset = 0,
            .value_offset = static_cast<std::size_t>(kv_heads) * block_size * vector_bytes,
            .block_size = block_size,
            .block_tables = tables.data(),
            .table_stride = blocks_per_seq};
        kv_bytes = static_cast<std::size_t>(seqs) * context * kv_heads * 2 * vector_bytes;
    }
};

double memcpy_bandwidth_gbs() {
    constexpr std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer<std::byte> source(bytes), target(bytes);
    source.fill_bytes(1);
    double const ms = median_ms([&] {
        check(cudaMemcpyAsync(target.data(), source.data(), bytes, cudaMemcpyDeviceToDevice),
              "cudaMemcpyAsync");
    });
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;  // read + written
}

void bench_decode() {
    constexpr int seqs = 64;
    constexpr int context = 4096;
    constexpr int group = 4;  // issue 15's target shape: Llama-3-8B's 32 query heads
    constexpr int kv_heads = 8;
    constexpr int heads = kv_heads * group;
    BenchCache cache(seqs, context, kv_heads);
    DeviceBuffer<float> const queries(
        random_floats(static_cast<std::size_t>(seqs) * heads * head_dim, 1));
    DeviceBuffer<float> out(static_cast<std::size_t>(seqs) * heads * head_dim);
    DeviceBuffer<int> const contexts(std::vector<int>(seqs, context));
    DeviceBuffer<float> workspace(
        decode_attention_workspace_floats<Codec, head_dim, group>(seqs, kv_heads, context));
    DecodeAttentionArguments const arguments{.queries = queries.data(),
                                             .out = out.data(),
                                             .context_lengths = contexts.data(),
                                             .seqs = seqs,
                                             .kv_heads = kv_heads,
                                             .max_context_length = context,
                                             .workspace = workspace.data()};
    double const ms =
        median_ms([&] { decode_attention<Codec, head_dim, group>(cache.layer, arguments); });
    double const bandwidth = memcpy_bandwidth_gbs();
    double const achieved = static_cast<double>(cache.kv_bytes) / (ms * 1e-3) / 1e9;
    result("decode_attention_ms", ms, "ms");
    result("decode_attention_gbs", achieved, "GB/s");
    result("memcpy_d2d_gbs", bandwidth, "GB/s");
    result("decode_attention_of_memcpy", 100.0 * achieved / bandwidth, "%");
}

void bench_prefill() {
    constexpr int tokens = 4096;
    constexpr int group = 4;
    constexpr int kv_heads = 8;
    constexpr int heads = kv_heads * group;
    BenchCache cache(1, tokens, kv_heads);
    DeviceBuffer<float> const queries(
        random_floats(static_cast<std::size_t>(tokens) * heads * head_dim, 2));
    DeviceBuffer<float> out(static_cast<std::size_t>(tokens) * heads * head_dim);
    DeviceBuffer<int> const starts(std::vector<int>{0, tokens});
    DeviceBuffer<int> const contexts(std::vector<int>{tokens});
    PrefillAttentionArguments const arguments{.queries = queries.data(),
                                              .out = out.data(),
                                              .query_starts = starts.data(),
                                              .context_lengths = contexts.data(),
                                              .seqs = 1,
                                              .kv_heads = kv_heads,
                                              .max_queries = tokens};
    double const ms =
        median_ms([&] { prefill_attention<Codec, head_dim, group>(cache.layer, arguments); });
    double const flops =
        2.0 * tokens * static_cast<double>(tokens) * head_dim * heads;  // causal half
    double const tflops = flops / (ms * 1e-3) / 1e12;

    // cuBLAS references on square 8192 GEMMs.
    constexpr int n = 8192;
    cublasHandle_t handle;
    check_cublas(cublasCreate(&handle), "cublasCreate");
    DeviceBuffer<std::uint16_t> a(static_cast<std::size_t>(n) * n),
        b(static_cast<std::size_t>(n) * n);
    DeviceBuffer<float> c(static_cast<std::size_t>(n) * n);
    fill_bf16(a.data(), a.size(), 1u);
    fill_bf16(b.data(), b.size(), 2u);
    float const one = 1, zero = 0;
    double const gemm_flops = 2.0 * n * static_cast<double>(n) * n;
    double const bf16_ms = median_ms([&] {
        check_cublas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(),
                                  CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n, &zero, c.data(),
                                  CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx bf16");
    });
    DeviceBuffer<float> af(static_cast<std::size_t>(n) * n), bf(static_cast<std::size_t>(n) * n);
    af.fill_bytes(0);  // values do not change fp32 GEMM speed
    bf.fill_bytes(0);
    check_cublas(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");  // no TF32
    double const fp32_ms = median_ms([&] {
        check_cublas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, af.data(), n,
                                 bf.data(), n, &zero, c.data(), n),
                     "cublasSgemm");
    });
    check_cublas(cublasDestroy(handle), "cublasDestroy");
    double const bf16_tflops = gemm_flops / (bf16_ms * 1e-3) / 1e12;
    double const fp32_tflops = gemm_flops / (fp32_ms * 1e-3) / 1e12;
    result("prefill_attention_ms", ms, "ms");
    result("prefill_attention_tflops", tflops, "TFLOP/s");
    result("cublas_bf16_gemm_tflops", bf16_tflops, "TFLOP/s");
    result("cublas_fp32_gemm_tflops", fp32_tflops, "TFLOP/s");
    result("prefill_attention_of_bf16_gemm", 100.0 * tflops / bf16_tflops, "%");
    result("prefill_attention_of_fp32_gemm", 100.0 * tflops / fp32_tflops, "%");
}

}  // namespace

int main(int argc, char** argv) {
    // No GPU on this machine: skipped (77); a GPU CUDA cannot use: a failure (device_probe.hpp).
    int devices = 0;
    try {
        devices = device_count();
    } catch (std::exception const& error) {
        std::printf("FAILED: %s\n", error.what());
        return 1;
    }
    if (devices == 0) {
        std::printf("no CUDA device (no GPU on this machine): skipped\n");
        return 77;
    }
    try {
        std::string const only = argc > 1 ? argv[1] : "";
        cudaDeviceProp properties{};
        check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
        std::printf("device: %s (sm_%d%d, %d SMs)\n", properties.name, properties.major,
                    properties.minor, properties.multiProcessorCount);
        if (only.empty() || only == "decode") bench_decode();
        if (only.empty() || only == "prefill") bench_prefill();
    } catch (std::exception const& error) {
        std::printf("benchmark failed: %s\n", error.what());
        return 1;
    }
    return 0;
}
