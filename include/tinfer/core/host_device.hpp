#pragma once
// Functions shared by host code and CUDA kernels carry this annotation; under a host-only
// compiler it expands to nothing.
#if defined(__CUDACC__)
#define TINFER_HOST_DEVICE __host__ __device__
#else
#define TINFER_HOST_DEVICE
#endif

#include <cmath>

namespace tinfer {

// a * b + c with one rounding on host and device alike (a plain expression could be fused on
// one side and not on the other): what exact-equality between the two sides relies on.
TINFER_HOST_DEVICE inline float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

}  // namespace tinfer
