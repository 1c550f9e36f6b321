#pragma once
// Rotary position embedding: pair i at position p turns by theta = p * base^(-2i/head_dim). The
// pairs are ADJACENT elements (x[2i], x[2i+1]), the layout GGUF's llama converter gives
// attn_q/attn_k, or NeoX HALVES (x[i], x[i + head_dim/2]), as Gemma and Qwen2 files keep them.
//
// The angles and their cos/sin are computed in double and rounded once to float, so the table
// is as exact as float storage allows even at positions in the hundreds of thousands (a float
// angle p * inv_freq loses whole radians there). One table per forward pass serves every layer
// and head; rotating a pair is then 2 products and a sum each, per row independent (batch
// invariant).
#include <cmath>
#include <cstddef>

#include <string>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>

namespace tinfer::kernels {

// The largest head a DynamicExtent head_dim may have (its angle table lives on the stack).
inline constexpr int max_dynamic_rope_head_dim = 1024;

template <Extent HeadDim>
void check_rope_head_dim(HeadDim head_dim) {
    if constexpr (HeadDim::is_static) {
        static_assert(HeadDim::value % 2 == 0, "RoPE head_dim must be even: it rotates pairs");
    } else {
        int const d = head_dim;
        if (d <= 0 || d % 2 != 0 || d > max_dynamic_rope_head_dim)
            throw Error("RoPE head_dim must be even and in [2, " +
                        std::to_string(max_dynamic_rope_head_dim) + "]; got " + std::to_string(d));
    }
}

// cos_sin: [rows][head_dim / 2][2] (cos, sin) for the angle of each pair at positions[row].
template <Extent HeadDim>
void rope_table(HeadDim head_dim, double base, int const* positions, int rows, float* cos_sin) {
    check_rope_head_dim(head_dim);
    int const d = head_dim;
    int const pairs = d / 2;
    double inverse_frequency[capacity_of<HeadDim, max_dynamic_rope_head_dim>() / 2];
    for (int i = 0; i < pairs; ++i) inverse_frequency[i] = std::pow(base, -2.0 * i / d);
    for (int row = 0; row < rows; ++row) {
        float* out = cos_sin + static_cast<std::size_t>(row) * d;
        for (int i = 0; i < pairs; ++i) {
            double const angle = static_cast<double>(positions[row]) * inverse_frequency[i];
            out[2 * i] = static_cast<float>(std::cos(angle));
            out[2 * i + 1] = static_cast<float>(std::sin(angle));
        }
    }
}

template <int head_dim>
void rope_table(double base, int const* positions, int rows, float* cos_sin) {
    rope_table(StaticExtent<head_dim>{}, base, positions, rows, cos_sin);
}

// Rotates `heads` consecutive heads of one row in place; cos_sin: the row's table.
template <RopePairing pairing = RopePairing::adjacent>
inline void apply_rope_row(Extent auto head_dim, float* x, int heads, float const* cos_sin) {
    int const d = head_dim;
    int const pairs = d / 2;
    for (int head = 0; head < heads; ++head) {
        float* v = x + static_cast<std::size_t>(head) * d;
        if constexpr (pairing == RopePairing::adjacent) {
#pragma omp simd
            for (int i = 0; i < pairs; ++i) {
                float const c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
                float const x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c - x1 * s;
                v[2 * i + 1] = x0 * s + x1 * c;
            }
        } else {
#pragma omp simd
            for (int i = 0; i < pairs; ++i) {
                float const c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
                float const x0 = v[i], x1 = v[i + pairs];
                v[i] = x0 * c - x1 * s;
                v[i + pairs] = x0 * s + x1 * c;
            }
        }
    }
}

template <int head_dim, RopePairing pairing = RopePairing::adjacent>
inline void apply_rope_row(float* x, int heads, float const* cos_sin) {
    apply_rope_row<pairing>(StaticExtent<head_dim>{}, x, heads, cos_sin);
}

// Rotates `heads` heads of each row in place: x row r at x + r * row_stride, head h at
// + h * head_dim; cos_sin as rope_table made it for the same rows.
template <RopePairing pairing = RopePairing::adjacent>
void apply_rope(Extent auto head_dim, float* x, int rows, int heads, std::size_t row_stride,
                float const* cos_sin, int threads = 1) {
    auto const table_stride = static_cast<std::size_t>(static_cast<int>(head_dim));
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 16)
    for (int row = 0; row < rows; ++row) {
        apply_rope_row<pairing>(head_dim, x + static_cast<std::size_t>(row) * row_stride, heads,
                                cos_sin + static_cast<std::size_t>(row) * table_stride);
    }
}

template <int head_dim, RopePairing pairing = RopePairing::adjacent>
void apply_rope(float* x, int rows, int heads, std::size_t row_stride, float const* cos_sin,
                int threads = 1) {
    apply_rope<pairing>(StaticExtent<head_dim>{}, x, rows, heads, row_stride, cos_sin, threads);
}

}  // namespace tinfer::kernels
