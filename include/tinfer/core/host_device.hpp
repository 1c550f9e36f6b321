#pragma once
// Functions shared by host code and CUDA kernels carry this annotation; under a host-only
// compiler it expands to nothing.
#if defined(__CUDACC__)
#define TINFER_HOST_DEVICE __host__ __device__
#else
#define TINFER_HOST_DEVICE
#endif
