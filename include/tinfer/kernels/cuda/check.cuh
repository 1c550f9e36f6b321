#pragma once
// Every CUDA runtime call goes through check(): a failure becomes tinfer::Error naming the call
// and where it was made, so a misconfigured launch is reported where it happens rather than at
// the next synchronisation.
#include <cuda_runtime.h>

#include <source_location>
#include <string>

#include <tinfer/core/error.hpp>

namespace tinfer::kernels::cuda {

// A CUDA runtime failure; `code` keeps the original error for callers that branch on it.
struct CudaError : Error {
    cudaError_t code;
    CudaError(cudaError_t error, std::string const& what)
        : Error(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")"),
          code(error) {}
};

inline void check(cudaError_t error, char const* what,
                  std::source_location where = std::source_location::current()) {
    if (error == cudaSuccess) return;
    throw CudaError(
        error, std::string(what) + " at " + where.file_name() + ":" + std::to_string(where.line()));
}

// Launch errors (bad configuration, too much shared memory) surface only through
// cudaGetLastError; call this right after every <<<...>>>.
inline void check_launch(char const* kernel,
                         std::source_location where = std::source_location::current()) {
    check(cudaGetLastError(), kernel, where);
}

// Devices visible to this process; 0 (not an error) when there is no driver or no GPU, so
// tests and benchmarks can skip cleanly.
inline int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return count;
}

// Integer division rounding up, for grid sizes.
template <class Int>
__host__ __device__ constexpr Int ceil_div(Int numerator, Int denominator) {
    return (numerator + denominator - 1) / denominator;
}

}  // namespace tinfer::kernels::cuda
