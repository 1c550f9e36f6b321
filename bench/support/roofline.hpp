#pragma once
// What this machine can do at best, measured the same way every time, so that benchmark
// figures come with a ceiling: read bandwidth (GB/s) for memory-bound kernels and a GEMM rate
// (GFLOP/s) for compute-bound ones.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <tinfer/core/huge_pages.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/core/simd_intrinsics.hpp>
#include <tinfer/kernels/int8_panels.hpp>
#include <tinfer/kernels/isa.hpp>

#if __has_include(<cblas.h>)
#include <cblas.h>
#define TINFER_BENCH_HAVE_CBLAS 1
#endif

namespace tinfer::bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class F>
double median_seconds(int runs, F&& f) {
    std::vector<double> times;
    for (int r = 0; r < runs; ++r) {
        auto const start = std::chrono::steady_clock::now();
        f();
        times.push_back(seconds_since(start));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// Read bandwidth: sum a buffer with `threads` threads, over and over. Decode streams its weights
// exactly like this, from the same kind of memory (huge pages, core/huge_pages.hpp): a buffer of
// the model's size is its roofline, read from wherever such a buffer lives between passes (the
// memory where the caches are smaller, the last-level cache where it holds the whole model),
// and a buffer much larger than the caches measures the memory. The sum keeps 64 independent
// partial sums (four 512-bit registers): one running float sum would measure the latency of its
// additions (about 3 GB/s), not the memory.
class ReadBandwidth {
  public:
    explicit ReadBandwidth(std::size_t bytes = std::size_t{1} << 30)
        : floats_(bytes / sizeof(float) / lanes * lanes),
          buffer_(allocate_huge_pages(floats_ * sizeof(float))) {
        auto* const data = reinterpret_cast<float*>(buffer_.get());
        std::size_t const n = floats_;
#pragma omp parallel for schedule(static)
        for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i & 1023);
    }

    // GB/s, the median of `runs` passes over the buffer after `warm_passes` untimed ones, or
    // as many as fit in a second. A last-level cache keeps a buffer it can hold only after a
    // number of passes, more when another buffer (the model's weights) was read over and over
    // before it: on a Xeon guest with a 480 MiB L3, a 98 MB buffer read at 16, 15, 19, 24, 27,
    // 28 and then 29 GB/s pass after pass on one thread, and a 253 MB one after another of that
    // size went from 23 to 39 GB/s over some 50 passes on two; tg128 reads its weights 128 times.
    double measure(int threads, int runs = 5, int warm_passes = 64) const {
        auto const start = std::chrono::steady_clock::now();
        for (int w = 0; w < warm_passes && seconds_since(start) < 1.0; ++w) sink_ = sum(threads);
        double const seconds = median_seconds(runs, [&] { sink_ = sum(threads); });
        return static_cast<double>(floats_ * sizeof(float)) / seconds / 1e9;
    }

  private:
    float sum(int threads) const {
        auto const* const data = reinterpret_cast<float const*>(buffer_.get());
        std::size_t const n = floats_;
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            float partial[lanes] = {};
#pragma omp for schedule(static)
            for (std::size_t i = 0; i < n; i += lanes) {
                prefetch_bytes<PrefetchOrder::pinned>(data + i + prefetch_floats,
                                                      lanes * sizeof(float));
#pragma omp simd
                for (std::size_t l = 0; l < lanes; ++l) partial[l] += data[i + l];
            }
            for (float const p : partial) total += p;
        }
        return total;
    }

    static constexpr std::size_t lanes = 64;
    // Asks for the buffer as far ahead as the decode kernels ask for their strips
    // (kernels/int8_dot.hpp), so that the ceiling has what the hint adds: 1-3% on the Xeon
    // guest, whose hardware prefetchers follow a plain scan well.
    static constexpr std::size_t prefetch_floats = 8192 / sizeof(float);
    std::size_t floats_;
    HugePageBuffer buffer_;
    mutable float volatile sink_ = 0;  // keeps the sums alive
};

inline double measured_read_gbps(int threads, std::size_t bytes = std::size_t{1} << 30) {
    return ReadBandwidth(bytes).measure(threads);
}

namespace detail {
// Independent accumulator chains: enough to cover the dot instruction's latency (4-5 cycles)
// at up to two issued per cycle.
inline constexpr int int8_chains = 12;

#if TINFER_X86_TARGETS
TINFER_BEGIN_TARGET_AVX512
// vpdpbusd on zmm: 64 u8 x s8 multiply-accumulates per instruction (the strips' inner step).
inline std::int64_t int8_macs_avx512(std::int64_t steps, int& sink) {
    __m512i acc[int8_chains];
    for (auto& a : acc) a = _mm512_setzero_si512();
    __m512i x = _mm512_set1_epi8(3), w = _mm512_set1_epi8(-2);
    for (std::int64_t i = 0; i < steps; ++i) {
        __asm__ volatile("" : "+v"(x), "+v"(w));  // no folding of the constant products
        for (auto& a : acc) a = _mm512_dpbusd_epi32(a, x, w);
    }
    __m512i total = acc[0];
    for (int k = 1; k < int8_chains; ++k) total = _mm512_add_epi32(total, acc[k]);
    sink += _mm512_reduce_add_epi32(total);
    return steps * int8_chains * 64;
}

// The panels' inner step (kernels/int8_panels.hpp, int8_panel_tile_avx512 for a format with an
// offset: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K), its operands in L1: per 32-column block,
// the 8 weight registers loaded, then for each token of a tile of 4 the activations' 8
// broadcasts, 8 vpdpbusd in two chains, their sum, its conversion to float, the scale product
// and two fused multiply-adds (one block scale per 32 weights and per 32 activations).
inline std::int64_t int8_panel_step_macs_avx512(std::int64_t steps, int& sink) {
    constexpr int tokens = 4;
    alignas(64) std::int8_t weights[8 * 64];
    alignas(64) std::int8_t x[tokens][32];
    float x_scale[tokens], x_sum[tokens];
    for (int i = 0; i < 8 * 64; ++i) weights[i] = static_cast<std::int8_t>(i % 15);
    for (int t = 0; t < tokens; ++t) {
        for (int i = 0; i < 32; ++i) x[t][i] = static_cast<std::int8_t>((i * 7 + t) % 11 - 5);
        x_scale[t] = 0.01f * static_cast<float>(t + 1);
        x_sum[t] = static_cast<float>(t);
    }
    __m512 const scale = _mm512_set1_ps(0.5f), offsets = _mm512_set1_ps(-0.25f);
    __m512 acc[tokens];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < steps; ++i) {
        // Every block loads its operands again: the arrays escape into a memory clobber.
        __asm__ volatile("" : : "r"(weights), "r"(x), "r"(x_scale), "r"(x_sum) : "memory");
        __m512i w[8];
        for (int k = 0; k < 8; ++k) w[k] = _mm512_load_si512(weights + 64 * k);
        for (int t = 0; t < tokens; ++t) {
            __m512 const token_scale = _mm512_mul_ps(scale, _mm512_set1_ps(x_scale[t]));
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 8; k += 2) {
                std::int32_t a, b;
                std::memcpy(&a, x[t] + 4 * k, 4);
                std::memcpy(&b, x[t] + 4 * k + 4, 4);
                s0 = _mm512_dpbusd_epi32(s0, w[k], _mm512_set1_epi32(a));
                s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(b));
            }
            acc[t] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), token_scale, acc[t]);
            acc[t] = _mm512_fmadd_ps(offsets, _mm512_set1_ps(x_sum[t]), acc[t]);
        }
    }
    __m512 total = acc[0];
    for (int t = 1; t < tokens; ++t) total = _mm512_add_ps(total, acc[t]);
    sink += static_cast<int>(_mm512_reduce_add_ps(total));
    return steps * tokens * 8 * 64;
}
TINFER_END_TARGET_AVX512

TINFER_BEGIN_TARGET_AVX2
// vpmaddubsw + vpmaddwd + vpaddd on ymm: 32 multiply-accumulates per three instructions (the
// AVX2 strips' inner step).
inline std::int64_t int8_macs_avx2(std::int64_t steps, int& sink) {
    __m256i acc[int8_chains];
    for (auto& a : acc) a = _mm256_setzero_si256();
    __m256i x = _mm256_set1_epi8(3), w = _mm256_set1_epi8(-2);
    __m256i const ones = _mm256_set1_epi16(1);
    for (std::int64_t i = 0; i < steps; ++i) {
        __asm__ volatile("" : "+v"(x), "+v"(w));
        for (auto& a : acc)
            a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones));
    }
    __m256i total = acc[0];
    for (int k = 1; k < int8_chains; ++k) total = _mm256_add_epi32(total, acc[k]);
    alignas(32) int lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
    for (int const l : lanes) sink += l;
    return steps * int8_chains * 32;
}
TINFER_END_TARGET_AVX2
#endif

// GMAC/s of run(sink), which returns the multiply-accumulates it did, on `threads` threads at
// once (the median of 5).
template <class Run>
double parallel_gmacs(int threads, Run&& run) {
    int sink = 0;
    std::int64_t macs = 0;
    double const seconds = median_seconds(5, [&] {
        macs = 0;
#pragma omp parallel num_threads(threads) reduction(+ : macs, sink)
        macs += run(sink);
    });
    if (sink == 42) std::fputc(' ', stderr);  // keeps the sums alive
    return static_cast<double>(macs) / seconds / 1e9;
}
}  // namespace detail

// Sustained int8 multiply-accumulate rate (GMAC/s) of the instruction sequence the int8 strips
// run on this CPU (kernels/isa.hpp's choice): register-resident, no loads, `threads` threads.
// 0 where only the portable kernels run.
inline double measured_int8_gmacs(int threads) {
#if TINFER_X86_TARGETS
    kernels::Isa const isa = kernels::running_isa();
    if (isa == kernels::Isa::portable) return 0;
    constexpr std::int64_t steps = std::int64_t{1} << 24;
    return detail::parallel_gmacs(threads, [&](int& sink) {
        return isa == kernels::Isa::avx512 ? detail::int8_macs_avx512(steps, sink)
                                           : detail::int8_macs_avx2(steps, sink);
    });
#else
    (void)threads;
    return 0;
#endif
}

// Sustained rate (GMAC/s) of the panels' inner step (detail::int8_panel_step_macs_avx512) on
// `threads` threads: the most the prefill's matrix products can reach with GGUF's per-block
// scales, before any weight streams in. 0 where the panels do not run (below AVX-512).
inline double measured_int8_panel_gmacs(int threads) {
#if TINFER_X86_TARGETS
    if (kernels::running_isa() != kernels::Isa::avx512) return 0;
    constexpr std::int64_t steps = std::int64_t{1} << 22;
    return detail::parallel_gmacs(
        threads, [&](int& sink) { return detail::int8_panel_step_macs_avx512(steps, sink); });
#else
    (void)threads;
    return 0;
#endif
}

#if TINFER_AMX_TARGETS
namespace detail {
TINFER_BEGIN_TARGET_AMX
// tdpbsud on the panels' tiles (kernels/int8_panels.hpp: K = 32, 16 x 16 x 32 = 8192
// multiply-accumulates each), two independent products a step, the operands held in tiles.
inline std::int64_t amx_panel_macs(std::int64_t steps, int& sink) {
    kernels::detail::load_amx_panel_tiles();
    alignas(64) std::int8_t a[16 * 32];
    alignas(64) std::uint8_t b[8 * 64];
    for (int i = 0; i < 16 * 32; ++i) a[i] = static_cast<std::int8_t>(i % 7 - 3);
    for (int i = 0; i < 8 * 64; ++i) b[i] = static_cast<std::uint8_t>(i % 5);
    _tile_loadd(1, a, 32);
    _tile_loadd(4, a, 32);
    _tile_loadd(2, b, 64);
    _tile_loadd(5, b, 64);
    _tile_zero(0);
    _tile_zero(3);
    for (std::int64_t i = 0; i < steps; ++i) {
        _tile_dpbsud(0, 1, 2);
        _tile_dpbsud(3, 4, 5);
    }
    alignas(64) std::int32_t c[16 * 16];
    _tile_stored(0, c, 64);
    sink += c[0];
    _tile_stored(3, c, 64);
    sink += c[17];
    return steps * 2 * 16 * 16 * 32;
}
TINFER_END_TARGET_AMX
}  // namespace detail
#endif

// Sustained rate (GMAC/s) of the AMX tile products the prefill panels use where
// kernels::amx_int8_ready (K = 32, half of what a tile product can take), `threads` threads; 0
// where they do not run.
inline double measured_amx_panel_gmacs(int threads) {
#if TINFER_AMX_TARGETS
    if (kernels::running_isa() != kernels::Isa::avx512 || !kernels::amx_int8_ready()) return 0;
    constexpr std::int64_t steps = std::int64_t{1} << 18;
    return detail::parallel_gmacs(threads,
                                  [&](int& sink) { return detail::amx_panel_macs(steps, sink); });
#else
    (void)threads;
    return 0;
#endif
}

// fp32 GEMM rate of the system BLAS (OpenBLAS) at a size where it is near its peak; 0 when no
// CBLAS is available.
inline double measured_sgemm_gflops(int threads, int size = 1536) {
#ifdef TINFER_BENCH_HAVE_CBLAS
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    std::vector<float> a(std::size_t(size) * size, 0.5f), b(a), c(a.size());
    auto const gemm = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.f, a.data(),
                    size, b.data(), size, 0.f, c.data(), size);
    };
    gemm();  // warm-up: thread start, page faults
    double const seconds = median_seconds(5, gemm);
    return 2.0 * size * size * double(size) / seconds / 1e9;
#else
    (void)threads;
    (void)size;
    return 0;
#endif
}

}  // namespace tinfer::bench
