#pragma once
// y = x W^T computed directly on the stored weights: x [tokens][cols] float, W [rows][cols] in
// any weight encoding, y [tokens][rows] float.
//
// Work split: a thread owns strips of `linear_row_tile` weight rows (output features). It
// decodes a strip into a small per-thread buffer (row_tile x cols floats, L1/L2 sized) once per
// chunk of tokens and multiplies it with register tiles of `linear_token_tile` tokens, so during
// prefill every weight block is read from memory once per chunk of tokens, never once per token.
//
// Batch invariance: every y[t][o] is one dot product of x row t and W row o computed by
// kernels::dot's fixed lane order (element k into partial sum k % reduction_lanes, partial sums
// combined in one tree). Token tiles, row strips, token chunks and threads only decide which
// dot products run together, never how one is summed, so a token's outputs are bitwise the same
// alone, in any batch, and with any thread count.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <omp.h>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

namespace tinfer::kernels {

inline constexpr int linear_row_tile = 4;    // weight rows decoded and used together
inline constexpr int linear_token_tile = 4;  // tokens per register tile

// Floats of per-thread scratch linear needs for a matrix with `cols` input features.
constexpr std::size_t linear_scratch_floats(int cols) {
    return static_cast<std::size_t>(linear_row_tile) * static_cast<std::size_t>(cols);
}

// Tokens whose activations (tokens x cols floats) stay in a core's L2 while a strip sweeps them.
constexpr int linear_token_chunk(int cols) {
    constexpr int l2_floats = 64 * 1024;  // 256 KiB of activations
    int const fit = l2_floats / std::max(cols, 1) / linear_token_tile * linear_token_tile;
    return std::max(fit, linear_token_tile);
}

namespace detail {

// y[t * y_stride + r] = w_rows[r] . x_rows[t] for an R x T tile, each dot in kernels::dot's
// order: the (r, t) accumulator sees exactly the operations it would see in any other tile shape.
template <int R, int T>
inline void linear_tile(float const* const (&w_rows)[R], float const* const (&x_rows)[T], int cols,
                        float* y, std::size_t y_stride) {
    float lanes[R][T][reduction_lanes] = {};
    int const full = cols - cols % reduction_lanes;
    for (int k = 0; k < full; k += reduction_lanes) {
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
#pragma omp simd
                for (int l = 0; l < reduction_lanes; ++l)
                    lanes[r][t][l] += w_rows[r][k + l] * x_rows[t][k + l];
            }
        }
    }
    for (int k = full; k < cols; ++k) {
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) lanes[r][t][k - full] += w_rows[r][k] * x_rows[t][k];
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t)
            y[static_cast<std::size_t>(t) * y_stride + r] = sum_lanes(lanes[r][t]);
    }
}

// One strip of R decoded rows against tokens [first, last) of x.
template <int R>
inline void linear_strip(float const* const (&w_rows)[R], float const* x, int cols, int first,
                         int last, float* y, std::size_t y_stride, int first_row) {
    int t = first;
    for (; t + linear_token_tile <= last; t += linear_token_tile) {
        float const* x_rows[linear_token_tile];
        for (int i = 0; i < linear_token_tile; ++i)
            x_rows[i] = x + static_cast<std::size_t>(t + i) * cols;
        linear_tile<R, linear_token_tile>(
            w_rows, x_rows, cols, y + static_cast<std::size_t>(t) * y_stride + first_row, y_stride);
    }
    for (; t < last; ++t) {
        float const* const x_rows[1] = {x + static_cast<std::size_t>(t) * cols};
        linear_tile<R, 1>(w_rows, x_rows, cols,
                          y + static_cast<std::size_t>(t) * y_stride + first_row, y_stride);
    }
}

// Rows of strip `strip`: full strips of linear_row_tile first, then single leftover rows. Which
// path a row takes depends only on the matrix shape.
template <DType W, int R>
inline void linear_rows(WeightMatrix const& w, int first_row, float* buffer, float const* x,
                        int first, int last, float* y) {
    float const* w_rows[R];
    for (int r = 0; r < R; ++r) {
        if constexpr (W == DType::f32) {
            w_rows[r] = reinterpret_cast<float const*>(row_pointer<W>(w, first_row + r));
        } else {
            float* decoded = buffer + static_cast<std::size_t>(r) * w.cols;
            dequantize_row<W>(row_pointer<W>(w, first_row + r), w.cols, decoded);
            w_rows[r] = decoded;
        }
    }
    linear_strip<R>(w_rows, x, w.cols, first, last, y, static_cast<std::size_t>(w.rows), first_row);
}

}  // namespace detail

// y [tokens][w.rows] = x [tokens][w.cols] . W^T, on `threads` OpenMP threads. `scratch` holds
// threads * linear_scratch_floats(w.cols) floats (the workspace owns it, so nothing allocates).
template <DType W>
void linear(WeightMatrix const& w, float const* x, int tokens, float* y, int threads,
            std::span<float> scratch) {
    check_weight_matrix<W>(w, "linear weights");
    std::size_t const per_thread = linear_scratch_floats(w.cols);
    if (scratch.size() < per_thread * static_cast<std::size_t>(threads)) {
        throw Error("linear: scratch holds " + std::to_string(scratch.size()) + " floats, needs " +
                    std::to_string(per_thread * static_cast<std::size_t>(threads)));
    }
    int const full_strips = w.rows / linear_row_tile;
    int const leftover_rows = w.rows % linear_row_tile;
    int const strips = full_strips + leftover_rows;
    int const chunk = linear_token_chunk(w.cols);
#pragma omp parallel num_threads(threads)
    {
        float* buffer =
            scratch.data() + per_thread * static_cast<std::size_t>(omp_get_thread_num());
        for (int first = 0; first < tokens; first += chunk) {
            int const last = std::min(tokens, first + chunk);
#pragma omp for schedule(static) nowait
            for (int strip = 0; strip < strips; ++strip) {
                if (strip < full_strips) {
                    detail::linear_rows<W, linear_row_tile>(w, strip * linear_row_tile, buffer, x,
                                                            first, last, y);
                } else {
                    int const row = full_strips * linear_row_tile + (strip - full_strips);
                    detail::linear_rows<W, 1>(w, row, buffer, x, first, last, y);
                }
            }
        }
    }
}

// The same with its own scratch, for one-off calls (tests, experiments); a serving loop passes
// the workspace's scratch instead.
template <DType W>
void linear(WeightMatrix const& w, float const* x, int tokens, float* y, int threads = 1) {
    std::vector<float> scratch(linear_scratch_floats(w.cols) * static_cast<std::size_t>(threads));
    linear<W>(w, x, tokens, y, threads, scratch);
}

// Chooses the instantiation from the matrix's stored encoding, for matrices whose encoding is
// only known from the file (the token embedding reused as the output projection).
inline void linear_any(WeightMatrix const& w, float const* x, int tokens, float* y, int threads,
                       std::span<float> scratch) {
    dispatch_weight_type(w.type, [&]<DType W>() { linear<W>(w, x, tokens, y, threads, scratch); });
}

}  // namespace tinfer::kernels
