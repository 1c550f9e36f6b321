#pragma once
// Rows of a weight matrix as GGUF stores them (ne0, the input dimension, contiguous), read on
// the device. A row is a sequence of 32-element groups: a quantized block, or 32 plain values;
// either way a thread turns one group into 32 floats with the host's own arithmetic
// (quant::dequantize_block, core/half.hpp), so host and device see the same weights.
#include <cstdint>
#include <string>

#include <tinfer/core/dtype.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/kernels/weight_matrix.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace tinfer::kernels::cuda {

inline constexpr int weight_group_elements = quant::legacy_block_elements;

template <DType W>
struct WeightRow;

// Quantized legacy blocks: one block is one group.
template <DType W>
requires(W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0) struct WeightRow<W> {
    using Group = quant::BlockOfT<W>;
    __device__ static void dequantize(Group const& group, float* out) {
        quant::dequantize_block(group, out);
    }
};

template <>
struct WeightRow<DType::f32> {
    struct Group {
        float values[weight_group_elements];
    };
    __device__ static void dequantize(Group const& group, float* out) {
#pragma unroll
        for (int i = 0; i < weight_group_elements; ++i) out[i] = group.values[i];
    }
};

template <>
struct WeightRow<DType::f16> {
    struct Group {
        std::uint16_t values[weight_group_elements];
    };
    __device__ static void dequantize(Group const& group, float* out) {
#pragma unroll
        for (int i = 0; i < weight_group_elements; ++i) out[i] = f16_bits_to_float(group.values[i]);
    }
};

template <>
struct WeightRow<DType::bf16> {
    struct Group {
        std::uint16_t values[weight_group_elements];
    };
    __device__ static void dequantize(Group const& group, float* out) {
#pragma unroll
        for (int i = 0; i < weight_group_elements; ++i)
            out[i] = bf16_bits_to_float(group.values[i]);
    }
};

template <DType W>
using WeightGroup = typename WeightRow<W>::Group;

// The weight types the device linear and embedding kernels read.
template <DType W>
concept DeviceWeightType = W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0 ||
                           W == DType::f16 || W == DType::bf16 || W == DType::f32;

// A kernels::WeightMatrix whose data is in device memory, checked against the instantiation.
template <DType W, int Cols>
void check_device_weights(WeightMatrix const& w, char const* what) {
    check_weight_matrix<W>(w, what);
    if (w.cols != Cols)
        throw Error(std::string(what) + ": " + std::to_string(w.cols) +
                    " columns, kernel compiled for " + std::to_string(Cols));
}

}  // namespace tinfer::kernels::cuda
