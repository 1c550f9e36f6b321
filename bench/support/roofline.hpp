#pragma once
// What this machine can do at best, measured the same way every time, so that benchmark
// figures come with a ceiling: read bandwidth (GB/s) for memory-bound kernels and a GEMM rate
// (GFLOP/s) for compute-bound ones.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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

// Read bandwidth: sum a buffer much larger than the caches with `threads` threads. Decode
// streams weights exactly like this, so this is its roofline. The sum keeps 64 independent
// partial sums (four 512-bit registers): one running float sum would measure the latency of
// its additions (about 3 GB/s), not the memory.
inline double measured_read_gbps(int threads, std::size_t bytes = std::size_t{1} << 30) {
    constexpr std::size_t lanes = 64;
    std::size_t const n = bytes / sizeof(float) / lanes * lanes;
    std::unique_ptr<float[]> data(new float[n]);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i & 1023);
    float volatile sink = 0;
    double const seconds = median_seconds(5, [&] {
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            float partial[lanes] = {};
#pragma omp for schedule(static)
            for (std::size_t i = 0; i < n; i += lanes) {
#pragma omp simd
                for (std::size_t l = 0; l < lanes; ++l) partial[l] += data[i + l];
            }
            for (float const p : partial) total += p;
        }
        sink = total;
    });
    (void)sink;
    return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
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
