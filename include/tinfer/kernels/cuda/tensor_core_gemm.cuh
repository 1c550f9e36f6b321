#pragma once
// Prefill matrix products on tensor cores: y [rows][out] = x [rows][in] . W^T through cuBLAS
// (cublasGemmEx, bf16 inputs, float32 accumulation and output), W dequantized from its GGUF
// blocks into a bf16 matrix by the host's arithmetic and x rounded to bf16 first. The SIMT
// tiled GEMM of linear.cuh keeps float32 inputs and runs at about 8% of the bf16 tensor rate;
// this trades the inputs' precision (8 significant bits, ~2^-9 relative per operand) for that
// rate, so it is the caller's choice (DeviceForwardPass::set_prefill_gemm), never a default.
//
// Steps of at most LinearDecodeShape::max_tokens rows keep the weight-streaming kernel: decode
// is memory bound, and dequantizing a whole matrix to bf16 would read it once and write it twice.
//
// A plain class behind PrefillGemm (model/cuda/cuda_ops.cuh): only a program that constructs
// one includes this header and links CUDA::cublas.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/weights.cuh>
#include <tinfer/model/cuda/cuda_ops.cuh>

namespace tinfer::kernels::cuda {

inline constexpr int bf16_convert_threads = 256;

// One thread per 32-element group: the host's dequantization, then each value rounded to bf16.
template <DType W>
__global__ void __launch_bounds__(bf16_convert_threads)
    dequantize_to_bf16_kernel(WeightGroup<W> const* __restrict__ groups, std::int64_t count,
                              __nv_bfloat16* __restrict__ out) {
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         g < count; g += stride) {
        float values[weight_group_elements];
        WeightRow<W>::dequantize(groups[g], values);
#pragma unroll
        for (int i = 0; i < weight_group_elements; ++i)
            out[g * weight_group_elements + i] = __float2bfloat16_rn(values[i]);
    }
}

__global__ void __launch_bounds__(bf16_convert_threads)
    float_to_bf16_kernel(float const* __restrict__ x, std::int64_t n,
                         __nv_bfloat16* __restrict__ out) {
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = __float2bfloat16_rn(x[i]);
}

inline void check_cublas(cublasStatus_t status, char const* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string(what) + ": cuBLAS status " +
                    std::to_string(static_cast<int>(status)));
}

class CublasBf16Gemm final : public tinfer::cuda::PrefillGemm {
  public:
    // Scratch for matrices of up to `max_weights` weights and inputs of up to `max_rows` rows of
    // `max_in` features (the model's largest matrix and widest input, its step's rows).
    CublasBf16Gemm(std::size_t max_weights, int max_rows, int max_in)
        : weights_(max_weights),
          inputs_(static_cast<std::size_t>(max_rows) * static_cast<std::size_t>(max_in)),
          max_rows_(max_rows),
          max_in_(max_in) {
        check_cublas(cublasCreate(&handle_), "cublasCreate");
    }
    CublasBf16Gemm(CublasBf16Gemm const&) = delete;
    CublasBf16Gemm& operator=(CublasBf16Gemm const&) = delete;
    ~CublasBf16Gemm() override {
        if (handle_ != nullptr) (void)cublasDestroy(handle_);  // a destructor cannot report
    }

    void run(WeightMatrix const& w, float const* x, int rows, float* y,
             cudaStream_t stream) override {
        std::size_t const weights = static_cast<std::size_t>(w.rows) * w.cols;
        if (weights > weights_.size() || rows > max_rows_ || w.cols > max_in_)
            throw Error("CublasBf16Gemm: a " + std::to_string(w.rows) + " x " +
                        std::to_string(w.cols) + " matrix over " + std::to_string(rows) +
                        " rows exceeds its scratch (a sizing bug)");
        if (rows <= 0 || w.rows <= 0) return;
        std::int64_t const groups = static_cast<std::int64_t>(weights / weight_group_elements);
        int const blocks = grid_stride_blocks(groups, bf16_convert_threads);
        tinfer::cuda::dispatch_device_weight_type(w.type, [&]<DType W>() {
            check_before_launch("dequantize_to_bf16_kernel");
            dequantize_to_bf16_kernel<W><<<blocks, bf16_convert_threads, 0, stream>>>(
                reinterpret_cast<WeightGroup<W> const*>(w.data), groups, weights_.data());
            check_launch("dequantize_to_bf16_kernel");
        });
        std::int64_t const inputs = static_cast<std::int64_t>(rows) * w.cols;
        check_before_launch("float_to_bf16_kernel");
        float_to_bf16_kernel<<<grid_stride_blocks(inputs, bf16_convert_threads),
                               bf16_convert_threads, 0, stream>>>(x, inputs, inputs_.data());
        check_launch("float_to_bf16_kernel");
        // Column-major view: y^T [out x rows] = W [in x out]^T . x^T [in x rows].
        float const alpha = 1, beta = 0;
        check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
        check_cublas(
            cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, rows, w.cols, &alpha,
                         weights_.data(), CUDA_R_16BF, w.cols, inputs_.data(), CUDA_R_16BF, w.cols,
                         &beta, y, CUDA_R_32F, w.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx (bf16 prefill product)");
    }

  private:
    cublasHandle_t handle_ = nullptr;
    DeviceBuffer<__nv_bfloat16> weights_;  // the current matrix, [out][in]
    DeviceBuffer<__nv_bfloat16> inputs_;   // the current input, [rows][in]
    int max_rows_;
    int max_in_;
};

}  // namespace tinfer::kernels::cuda
