#pragma once
// y = x W^T computed on quantized weights: x [tokens][cols] (float32, or int8 rows as
// kernels/int8_activations.hpp lays them out), W [rows][cols], y [tokens][rows] float.
//
// Work split: a thread owns strips of weight rows (output features) and multiplies each with
// register tiles of `linear_token_tile` tokens, so during prefill every weight block is read
// from memory once per chunk of tokens, never once per token. Float activations: W as the GGUF
// stores it, in any encoding; a strip of `linear_row_tile` rows is decoded once per chunk into a
// small per-thread buffer (row_tile x cols floats, L1/L2 sized). Int8 activations: W repacked
// once into 16-row strips (kernels/int8_dot.hpp), read in place by decode; a prefill chunk of
// int8_panel_min_tokens<W>() or more on AVX-512 decodes each strip once into a panel in this
// thread's scratch (kernels/int8_panels.hpp) and multiplies every token tile with it, the same
// bits; on AVX2 the formats whose strips unpack per tile take tiles of 16 and 8 tokens first
// (int8_wide_token_tile), so that more tokens share each unpacking.
//
// Threads: the *_team functions share their strips over the threads of the enclosing OpenMP
// team (an orphaned `omp for ... nowait`), so a whole forward pass runs in one parallel region
// with no fork/join per matrix; they end without a barrier, and the caller places one before
// reading y. Called outside a parallel region they run on the calling thread. `linear` wraps
// them in a region of its own for one-off calls.
//
// Batch invariance: every y[t][o] is one dot product of x row t and W row o computed in an
// order fixed by the shapes alone (float: kernels::dot's lane order; int8: int8_dot.hpp's).
// Token tiles, row strips, token chunks and threads only decide which dot products run
// together, never how one is summed, so a token's outputs are bitwise the same alone, in any
// batch, and with any thread count.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <omp.h>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kernels/int8_panels.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

namespace tinfer::kernels {

inline constexpr int linear_row_tile = 4;    // weight rows decoded and used together
inline constexpr int linear_token_tile = 4;  // tokens per register tile
inline constexpr int int8_widest_token_tile = 4 * linear_token_tile;  // AVX2's unpacking tiles

// Tokens whose activations (tokens x row_bytes) stay in a core's L2 while a strip sweeps them.
constexpr int linear_token_chunk(std::size_t row_bytes) {
    constexpr std::size_t l2_bytes = 256 * 1024;
    std::size_t const fit =
        l2_bytes / std::max<std::size_t>(row_bytes, 1) / linear_token_tile * linear_token_tile;
    return static_cast<int>(std::max<std::size_t>(fit, linear_token_tile));
}

// The length of each of a step's token chunks: as even as whole tiles of `tile` tokens allow,
// none longer than `longest` rounded down to whole tiles, so that each chunk of a long prefill
// splits into whole tiles instead of ending in short ones. SmolLM2's 1536-column rows in chunks
// of 136 left each chunk of a 512-token prefill 8 tokens for a tile of 8 (those tiles took 3.9%
// of its one-thread pp512 samples on the Zen 3); chunks of 128 leave none.
constexpr int even_token_chunk(int tokens, int longest, int tile) {
    longest = std::max(longest / tile * tile, tile);
    int const chunks = std::max((tokens + longest - 1) / longest, 1);
    int const even = (tokens + chunks - 1) / chunks;
    return (even + tile - 1) / tile * tile;
}

// A prefill chunk of at least this many tokens multiplies panels (kernels/int8_panels.hpp) on
// AVX-512; fewer read the strips in place, since a panel's decode then costs more than the
// unpacking it saves. bench/int8_linear_bench, panels over strips (Intel Xeon, one thread): at
// 8 tokens 1.0-1.45x for the formats with fifth bits or K-quant scales but 0.75-0.93x for
// Q4_0, Q4_1 and Q8_0, whose strips unpack with a mask or nothing; those break even at 16-32.
template <DType W>
constexpr int int8_panel_min_tokens() {
    return W == DType::q4_0 || W == DType::q4_1 || W == DType::q8_0 ? 32 : 8;
}

// The most tokens a chunk may have to take the panel path, so that its scratch has a bound that
// grows with `cols` alone (a chunk's length comes from the activation rows' stride, and a
// narrow matrix of a wide model, or a tensor-parallel shard, gets long chunks): real models'
// chunks are at most 96-336 tokens (even_token_chunk); longer ones take the strips, the same bits.
inline constexpr int int8_panel_max_tokens = 256;

// Bytes of the panel path's per-thread scratch at `cols` input features: a 64-byte alignment
// margin, two panels (a gated pair), and for int8_panel_max_tokens tokens the sums carried
// between column slices and Q6_K's activation sums. Grows with cols, so that the scratch for a
// model's widest input covers every matrix.
constexpr std::size_t int8_panel_scratch_bytes(int cols) {
    return 64 + 2 * int8_panel_bytes(cols) +
           int8_panel_partial_floats(2, int8_panel_max_tokens) * sizeof(float) +
           int8_panel_sums_bytes(cols, int8_panel_max_tokens);
}

// Floats of per-thread scratch the linear kernels need for a matrix with `cols` input
// features: a decoded strip, twice for the gated pair, or the panel path's scratch.
constexpr std::size_t linear_scratch_floats(int cols) {
    return std::max(2 * static_cast<std::size_t>(linear_row_tile) * static_cast<std::size_t>(cols),
                    (int8_panel_scratch_bytes(cols) + sizeof(float) - 1) / sizeof(float));
}

// Float activation rows: row t at data + t * stride floats.
struct FloatRows {
    float const* data = nullptr;
    std::size_t stride = 0;
    float const* row(int t) const { return data + static_cast<std::size_t>(t) * stride; }
};

// How a product reaches y: written, or added to what y holds (a residual connection: the same
// float addition a separate pass would do).
enum class Store { assign, accumulate };

namespace detail {

// y[t * y_stride + r] = w_rows[r] . x_rows[t] for an R x T tile, each dot in kernels::dot's
// order: the (r, t) accumulator sees exactly the operations it would see in any other tile shape.
// `cols` (the input features) static or dynamic: the same source either way (core/extent.hpp).
template <int R, int T, Extent Cols>
inline void float_tile(float const* const (&w_rows)[R], float const* const (&x_rows)[T],
                       Cols cols_extent, float (&out)[R][T]) {
    int const cols = static_cast<int>(cols_extent);
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
        for (int t = 0; t < T; ++t) out[r][t] = sum_lanes(lanes[r][t]);
    }
}

// R weight rows ready for products with float activations: decoded once into `buffer`.
// `cols` is w.cols, as a static or a dynamic extent.
template <DType W, int R, Extent Cols = DynamicExtent>
struct FloatStrip {
    float const* rows[R];
    [[no_unique_address]] Cols cols;
    FloatStrip(WeightMatrix const& w, Cols c, int first_row, float* buffer) : cols(c) {
        int const width = static_cast<int>(cols);
        std::size_t const stored = row_bytes<W>(width);
        for (int r = 0; r < R; ++r) {
            std::byte const* row = w.data + static_cast<std::size_t>(first_row + r) * stored;
            if constexpr (W == DType::f32) {
                rows[r] = reinterpret_cast<float const*>(row);
            } else {
                float* decoded = buffer + static_cast<std::size_t>(r) * width;
                dequantize_row<W>(row, width, decoded);
                rows[r] = decoded;
            }
        }
    }
    template <int T>
    void products(FloatRows x, int first_token, float (&out)[R][T]) const {
        float const* x_rows[T];
        for (int t = 0; t < T; ++t) x_rows[t] = x.row(first_token + t);
        float_tile<R, T>(rows, x_rows, cols, out);
    }
};

// y[token][row] = value, or += with Store::accumulate.
inline void store_output(float* y, std::size_t y_stride, int token, int row, float value,
                         Store store) {
    float& out = y[static_cast<std::size_t>(token) * y_stride + static_cast<std::size_t>(row)];
    out = store == Store::accumulate ? out + value : value;
}

// put(count) for a strip's `rows` outputs, a full strip's count a compile-time constant once
// inlined, so that put's loops vectorize: with the count known only at run time GCC emitted
// `rep movs` for the stores, whose start-up cost per 16 floats was 2% of a Gemma 3 decode step
// (its LM head has 16,384 strips), and a call per element for the gate's activation.
template <class Put>
inline void for_strip_rows(int rows, Put&& put) {
    if (rows == int8_strip_rows) {
        put(int8_strip_rows);
    } else {
        put(rows);
    }
}

// One token's outputs of a strip into y_row [0, rows), = or += by `store`.
inline void store_strip_outputs(float* __restrict y_row, float const (&out)[int8_strip_rows],
                                int rows, Store store) {
    for_strip_rows(rows, [&](int count) {
        if (store == Store::accumulate) {
            for (int r = 0; r < count; ++r) y_row[r] += out[r];
        } else {
            for (int r = 0; r < count; ++r) y_row[r] = out[r];
        }
    });
}

// How many strips ahead of the one whose outputs are stored a token's output line is asked for
// (prefetch_for_write): a strip's tiles store a line per token, a row of y apart. Gemma 3's LM
// head at 32 sequences writes 32 x 262144 floats a step, past the L3, and each line's store miss
// held up the stores behind it (6-12% of its tiles' samples at the next call's first stores).
inline constexpr int output_prefetch_strips = 4;

// The same token's output line output_prefetch_strips strips on, if the matrix has those rows.
inline void prefetch_later_outputs(float* y_row, int first_row, int rows) {
    int constexpr ahead = output_prefetch_strips * int8_strip_rows;
    if (first_row + ahead < rows) prefetch_for_write(y_row + ahead);
}

// The gated pair's outputs of one token and strip: act(g) * u into row [0, rows).
template <GateActivation Activation>
inline void combine_strip_outputs(float* __restrict row, float const (&g)[int8_strip_rows],
                                  float const (&u)[int8_strip_rows], int rows) {
    // A vector loop: the activations' selects are branch-free (activation_math.hpp, select).
    // As branches they kept it scalar, a division per element: 5% of a SmolLM2 decode step.
    for_strip_rows(rows, [&](int count) {
#pragma omp simd
        for (int r = 0; r < count; ++r) row[r] = Activation::apply(g[r]) * u[r];
    });
}

// Tokens per register tile, first tiles of this many and then of half as many, where the AVX2
// strip kernels unpack a block once per tile for all its tokens (every format but Q8_0: the
// nibbles, the fifth bits of Q5_0 and Q5_1, K-quant scales and minima, Q6_K's six-bit values):
// more tokens share each unpacking. bench/int8_linear_bench, one thread, 2048 columns, 16
// tokens, GMAC/s on the Zen 3, tiles of 4 / 8 / 16: Q5_0 57-59 / 65-66 / 70-71, Q5_K 41 / 49 /
// 55-59, Q4_K 50-55 / 61-62 / 68, Q6_K 28-31 / 40-45 / 44-45. Q4_1 (SmolLM2's shapes, 512
// tokens, time against its former per-token unpacking at four): 0.93-0.96 at 4, 0.84-0.89 at 16,
// 32 another 2% slower than 16. Q8_0 lost (60.8 -> 52.4: its 2T sums leave the registers), so it
// keeps four.
template <DType W, Isa isa>
constexpr int int8_wide_token_tile() {
    constexpr bool unpacks = W != DType::q8_0;
    return isa == Isa::avx2 && unpacks ? int8_widest_token_tile : linear_token_tile;
}

// Strip `strip` of an int8-strip matrix times tokens [first, last): emit(t0, out[T][16]) per
// tile of tokens (int8_wide_token_tile, then linear_token_tile, then the 1-3 left).
template <DType W, Isa isa, Extent Cols, class Emit>
inline void int8_strip_products(Cols cols, WeightMatrix const& w, int strip, Int8Rows x, int first,
                                int last, Emit&& emit) {
    std::byte const* p = w.data + static_cast<std::size_t>(strip) *
                                      Int8StripFormat<W>::strip_bytes(static_cast<int>(cols));
    auto const tile = [&]<int T>(int t0) {
        Int8Row rows[T];
        for (int t = 0; t < T; ++t) rows[t] = x.row(t0 + t, static_cast<int>(cols));
        float out[T][int8_strip_rows];
        int8_strip_tile<W, T, isa>(p, cols, rows, out, t0 == first);
        emit(t0, out);
    };
    // Wider tiles first where they pay (int8_wide_token_tile), then tiles of four.
    int start = first;
    if constexpr (constexpr int wide = int8_wide_token_tile<W, isa>(); wide > linear_token_tile) {
        for (; start + wide <= last; start += wide) tile.template operator()<wide>(start);
        if (start + wide / 2 <= last) {
            tile.template operator()<wide / 2>(start);
            start += wide / 2;
        }
    }
    // The 1-3 left over in one tile, so that each strip's weights are unpacked once for them
    // (two or three decoding sequences, a speculative verify step); the outputs are the same
    // bits whatever the tile (kernels/int8_dot.hpp).
    for_each_tile<linear_token_tile>(start, last, tile);
}

// How share_int8_strips hands out strips when a step multiplies at least
// dynamic_share_min_tokens tokens (batched decode, prefill): from a counter the team shares,
// about dynamic_share_grabs of a thread's share at a time and at
// least dynamic_share_min_bytes of strips, so that a thread slowed by a neighbour on its core
// (a shared guest) leaves its last strips to the others instead of the team waiting for it at
// the next barrier. Gemma 3 batched decode, two threads, Zen 3 guest, alternated: the samples
// spent waiting in libgomp at 16 sequences 6.1-7.2% -> 3.7-4.5%, tokens/s medians of five at 8
// and 16 sequences 255 -> 283 and 270 -> 284. Fewer tokens (decode of one to three
// sequences) on several threads take guided shares instead: half the strips to the first
// thread to ask as one run, half the rest to the next, down to guided_share_min_strips, so
// that each matrix is still one long stream of memory reads a thread (a counter handing out
// an eighth of a share at a time had cost SmolLM2's two-thread decode 5-15%, 180 small
// matrices a token) while a thread slowed by a neighbour leaves the tail to the other. Against
// static halves, two threads, steps alternated one by one in one process, median time: tg128
// SmolLM2 0.97 (30 runs), Gemma 3 0.98 (30); SmolLM2 two and three sequences 0.98 and 0.97
// (10 runs of 128 steps); smallest grabs of 1, 4 or 8 strips the same. Steps of several token
// chunks (a long prefill) share dynamically too, though a thread then finds only part of its
// strips of the last chunk in its L2: pp512 on two threads, both ways alternated repetition by
// repetition in one process (11-12 each), medians Gemma 3 655 -> 711 t/s, SmolLM2 823 -> 806
// (the spreads overlap).
inline constexpr int dynamic_share_min_tokens = 4;
inline constexpr int dynamic_share_grabs = 8;
inline constexpr std::size_t dynamic_share_min_bytes = 32 * 1024;
inline constexpr int guided_share_min_strips = 4;

// Strips per grab for a matrix of `strips` strips of `strip_bytes` over `threads` (0: not from
// the counter: guided shares on several threads, static on one).
inline int dynamic_share_grain(int strips, std::size_t strip_bytes, int threads, int tokens) {
    if (threads < 2 || tokens < dynamic_share_min_tokens) return 0;
    auto const least = static_cast<int>((dynamic_share_min_bytes + strip_bytes - 1) / strip_bytes);
    int const grain = std::max(strips / (threads * dynamic_share_grabs), least);
    return std::min(grain, (strips + threads - 1) / threads);
}

// The strips of a matrix of `rows` rows.
inline int strip_count(int rows) {
    return (rows + int8_strip_rows - 1) / int8_strip_rows;
}

// Shares `strips` strips of an int8-strip matrix (`strip_bytes` each, both matrices' for a
// gated pair) over the enclosing team, chunk by chunk of tokens: prepare(first_token,
// last_token) on every thread once per chunk, then run(strip, first_token, last_token) for the
// thread's strips.
template <class Prepare, class Run>
inline void share_int8_strips(int strips, int tokens, std::size_t x_row_bytes,
                              std::size_t strip_bytes, Prepare&& prepare, Run&& run) {
    int const chunk =
        even_token_chunk(tokens, linear_token_chunk(x_row_bytes), int8_widest_token_tile);
    int const threads = omp_get_num_threads();
    int const grain = dynamic_share_grain(strips, strip_bytes, threads, tokens);
    for (int first = 0; first < tokens; first += chunk) {
        int const last = std::min(tokens, first + chunk);
        prepare(first, last);
        if (grain > 0) {
#pragma omp for schedule(dynamic, grain) nowait
            for (int strip = 0; strip < strips; ++strip) run(strip, first, last);
        } else if (threads > 1) {
#pragma omp for schedule(guided, guided_share_min_strips) nowait
            for (int strip = 0; strip < strips; ++strip) run(strip, first, last);
        } else {
#pragma omp for schedule(static) nowait
            for (int strip = 0; strip < strips; ++strip) run(strip, first, last);
        }
    }
}

// A thread's scratch as the panel path lays it out (int8_panel_scratch_bytes).
struct PanelScratch {
    std::byte* first = nullptr;
    std::byte* second = nullptr;
    float* partial = nullptr;
    int* sums = nullptr;
};
inline PanelScratch panel_scratch(float* buffer, int cols) {
    auto* base = cache_line_aligned(reinterpret_cast<std::byte*>(buffer));
    std::size_t const panel = int8_panel_bytes(cols);
    auto* partial = reinterpret_cast<float*>(base + 2 * panel);
    std::size_t const partial_floats = int8_panel_partial_floats(2, int8_panel_max_tokens);
    return {base, base + panel, partial, reinterpret_cast<int*>(partial + partial_floats)};
}

// Whether a chunk of `tokens` multiplies panels: AVX-512, scratch given, enough tokens and not
// more than the scratch holds.
template <DType W, Isa isa>
constexpr bool panels_for(int tokens, float const* buffer) {
    return isa == Isa::avx512 && TINFER_X86_TARGETS && buffer != nullptr &&
           tokens >= int8_panel_min_tokens<W>() && tokens <= int8_panel_max_tokens;
}

// The Q6_K sums of a chunk, where its panels need them.
template <DType W, Isa isa>
inline void prepare_panel_chunk(Int8Rows x, int cols, int first, int last, float* buffer) {
    if constexpr (W == DType::q6_k && isa == Isa::avx512) {
        if (panels_for<W, isa>(last - first, buffer))
            int8_panel_sums(x, cols, first, last, panel_scratch(buffer, cols).sums);
    }
}

// The rows of strip `strip` that exist (the last strip may be padding in part).
inline int strip_rows(int rows, int strip) {
    return std::min(int8_strip_rows, rows - strip * int8_strip_rows);
}

// Throws unless `w` is the strip layout of weights W.
template <DType W>
void check_int8_strips(WeightMatrix const& w) {
    check_weight_matrix<W>(w, "int8 linear weights");
    if (w.layout != WeightLayout::int8_strips) {
        throw Error("int8 linear: weights must be repacked first (kernels::repack_int8_strips)");
    }
}

// Tokens [first, last) in tiles of linear_token_tile, then one at a time; emit(t, out) gets
// each tile's products.
template <class Strip, int R, class Rows, class Emit>
inline void sweep_tokens(Strip const& strip, Rows x, int first, int last, Emit&& emit) {
    int t = first;
    for (; t + linear_token_tile <= last; t += linear_token_tile) {
        float out[R][linear_token_tile];
        strip.template products<linear_token_tile>(x, t, out);
        emit(t, out);
    }
    for (; t < last; ++t) {
        float out[R][1];
        strip.template products<1>(x, t, out);
        emit(t, out);
    }
}

// Shares the strips of a `rows`-row matrix over the enclosing team, chunk by chunk of tokens:
// full strips of linear_row_tile first, then single leftover rows (which path a row takes
// depends only on the matrix shape). run<R>(first_row, first_token, last_token).
template <class Run>
inline void share_strips(int rows, int tokens, int chunk, Run&& run) {
    int const full_strips = rows / linear_row_tile;
    int const strips = full_strips + rows % linear_row_tile;
    for (int first = 0; first < tokens; first += chunk) {
        int const last = std::min(tokens, first + chunk);
#pragma omp for schedule(static) nowait
        for (int strip = 0; strip < strips; ++strip) {
            if (strip < full_strips) {
                run.template operator()<linear_row_tile>(strip * linear_row_tile, first, last);
            } else {
                run.template operator()<1>(full_strips * linear_row_tile + (strip - full_strips),
                                           first, last);
            }
        }
    }
}

}  // namespace detail

// y [tokens][y_stride] (columns 0 .. w.rows-1) = x . W^T, or += with Store::accumulate, shared
// over the enclosing team without a closing barrier. Float rows: W in the GGUF layout, buffer
// this thread's linear_scratch_floats(w.cols) floats. Int8 rows: W repacked into int8 strips
// (repack_int8_strips; needs has_int8_dot(W)), no buffer.
//
// `cols` is w.cols as an extent (core/extent.hpp): the overload without it takes it at run time,
// the form the model uses. bench/specialization measures the static form (docs/specialization.md).
template <DType W, Isa isa = Isa::native, Extent Cols>
void linear_team(Cols cols, WeightMatrix const& w, FloatRows x, int tokens, float* y,
                 std::size_t y_stride, Store store, float* buffer) {
    detail::share_strips(w.rows, tokens, linear_token_chunk(x.stride * sizeof(float)),
                         [&]<int R>(int first_row, int first, int last) {
                             detail::FloatStrip<W, R, Cols> const strip(w, cols, first_row, buffer);
                             detail::sweep_tokens<decltype(strip), R>(
                                 strip, x, first, last, [&]<int T>(int t0, float(&out)[R][T]) {
                                     for (int t = 0; t < T; ++t)
                                         for (int r = 0; r < R; ++r)
                                             detail::store_output(y, y_stride, t0 + t,
                                                                  first_row + r, out[r][t], store);
                                 });
                         });
}

template <DType W, Isa isa = Isa::native>
void linear_team(WeightMatrix const& w, FloatRows x, int tokens, float* y, std::size_t y_stride,
                 Store store, float* buffer) {
    linear_team<W, isa>(DynamicExtent{w.cols}, w, x, tokens, y, y_stride, store, buffer);
}

namespace detail {
// Strip `strip` of the int8-strip matrix w times tokens [first, last) of x: y's columns of the
// strip's rows, = or += by `store`, from a panel where the chunk takes one (buffer given).
template <DType W, Isa isa, Extent Cols>
void int8_strip_outputs(Cols cols, WeightMatrix const& w, int strip, Int8Rows x, int first,
                        int last, float* y, std::size_t y_stride, Store store, float* buffer) {
    int const first_row = strip * int8_strip_rows;
    int const rows = strip_rows(w.rows, strip);
    auto const emit = [&]<int T>(int t0, float(&out)[T][int8_strip_rows]) {
        for (int t = 0; t < T; ++t) {
            float* y_row = y + static_cast<std::size_t>(t0 + t) * y_stride + first_row;
            store_strip_outputs(y_row, out[t], rows, store);
            prefetch_later_outputs(y_row, first_row, w.rows);
        }
    };
#if TINFER_X86_TARGETS
    if (panels_for<W, isa>(last - first, buffer)) {
        PanelScratch const scratch = panel_scratch(buffer, static_cast<int>(cols));
        decode_int8_panel<W>(w, strip, scratch.first);
        std::byte const* const panels[1] = {scratch.first};
        int8_panel_products<W>(panels, static_cast<int>(cols), x, first, last, scratch.sums,
                               scratch.partial,
                               [&]<int T>(int t0, float(&out)[1][T][int8_strip_rows]) {
                                   emit.template operator()<T>(t0, out[0]);
                               });
        return;
    }
#endif
    int8_strip_products<W, isa>(cols, w, strip, x, first, last, emit);
}
}  // namespace detail

// One of the matrices stacked_linear_team multiplies, and where its outputs go.
struct StackedOutput {
    WeightMatrix const* w;
    float* y;
    std::size_t y_stride;
};

// Several matrices of one weight type and width times the same int8 rows (a layer's Q, K and
// V), y_i = x . W_i^T: their strips are shared over the team as one list, the matrices' rows
// stacked, instead of matrix after matrix. In a decode step each `omp for` hands out its
// strips in guided shares and ends in a tail where one thread finishes alone; SmolLM2's K and V
// are 12 strips each, so three loops were three starts and three tails for 60 strips. Decode
// steps alternated token by token in one process (Xeon guest): SmolLM2 on two threads 0.96-0.99
// of the time (15 runs of 128 tokens), on one 1.00; Gemma 3 on two 1.00. The same dot products
// as linear_team's, so the same bits. Every matrix: W's int8 strips, `cols` wide (the caller
// checks; a parallel region cannot throw).
template <DType W, Isa isa = Isa::native, Extent Cols, std::size_t N>
void stacked_linear_team(Cols cols, StackedOutput const (&outputs)[N], Int8Rows x, int tokens,
                         Store store, float* buffer = nullptr) {
    static_assert(has_int8_dot(W),
                  "stacked_linear_team: int8 activations need weights with an "
                  "int8 dot (has_int8_dot)");
    if constexpr (isa == Isa::native) {  // chosen once per call, not per strip
        with_running_isa([&]<Isa chosen>() {
            stacked_linear_team<W, chosen>(cols, outputs, x, tokens, store, buffer);
        });
    } else {
        int const width = static_cast<int>(cols);
        int strips = 0;
        for (StackedOutput const& out : outputs) strips += detail::strip_count(out.w->rows);
        detail::share_int8_strips(
            strips, tokens, x.stride, Int8StripFormat<W>::strip_bytes(width),
            [&](int first, int last) {
                detail::prepare_panel_chunk<W, isa>(x, width, first, last, buffer);
            },
            [&](int strip, int first, int last) {
                std::size_t m = 0;
                for (; strip >= detail::strip_count(outputs[m].w->rows); ++m)
                    strip -= detail::strip_count(outputs[m].w->rows);
                detail::int8_strip_outputs<W, isa>(cols, *outputs[m].w, strip, x, first, last,
                                                   outputs[m].y, outputs[m].y_stride, store,
                                                   buffer);
            });
    }
}

// Int8 rows: buffer is this thread's linear_scratch_floats(w.cols) floats for the panel path,
// or null for the strips alone (the same bits). One matrix is a stack of one.
template <DType W, Isa isa = Isa::native, Extent Cols>
void linear_team(Cols cols, WeightMatrix const& w, Int8Rows x, int tokens, float* y,
                 std::size_t y_stride, Store store, float* buffer = nullptr) {
    static_assert(has_int8_dot(W),
                  "linear_team: int8 activations need weights with an int8 dot (has_int8_dot)");
    StackedOutput const output[] = {{&w, y, y_stride}};
    stacked_linear_team<W, isa>(cols, output, x, tokens, store, buffer);
}

template <DType W, Isa isa = Isa::native>
void linear_team(WeightMatrix const& w, Int8Rows x, int tokens, float* y, std::size_t y_stride,
                 Store store, float* buffer = nullptr) {
    linear_team<W, isa>(DynamicExtent{w.cols}, w, x, tokens, y, y_stride, store, buffer);
}

// The gated FFN's first half: out [tokens][out_stride] = act(x . G^T) * (x . U^T), act SiLU
// (SwiGLU) or GELU-tanh (GeGLU), both products of a row computed by the same thread and
// combined before they are stored. Float rows: buffer is linear_scratch_floats(cols) floats of
// this thread. Int8 rows: both matrices repacked into int8 strips.
// `cols` is the matrices' cols as an extent, as for linear_team.
template <DType W, Isa isa = Isa::native, GateActivation Activation = SiluGate, Extent Cols>
void gated_linear_team(Cols cols, WeightMatrix const& gate, WeightMatrix const& up, FloatRows x,
                       int tokens, float* out, std::size_t out_stride, float* buffer) {
    std::size_t const second = static_cast<std::size_t>(linear_row_tile) * static_cast<int>(cols);
    detail::share_strips(gate.rows, tokens, linear_token_chunk(x.stride * sizeof(float)),
                         [&]<int R>(int first_row, int first, int last) {
                             using Strip = detail::FloatStrip<W, R, Cols>;
                             Strip const gate_strip(gate, cols, first_row, buffer);
                             Strip const up_strip(up, cols, first_row, buffer + second);
                             detail::sweep_tokens<Strip, R>(
                                 gate_strip, x, first, last, [&]<int T>(int t0, float(&g)[R][T]) {
                                     float u[R][T];
                                     up_strip.template products<T>(x, t0, u);
                                     for (int t = 0; t < T; ++t) {
                                         float* row =
                                             out + static_cast<std::size_t>(t0 + t) * out_stride +
                                             first_row;
                                         for (int r = 0; r < R; ++r)
                                             row[r] = Activation::apply(g[r][t]) * u[r][t];
                                     }
                                 });
                         });
}

template <DType W, Isa isa = Isa::native, GateActivation Activation = SiluGate>
void gated_linear_team(WeightMatrix const& gate, WeightMatrix const& up, FloatRows x, int tokens,
                       float* out, std::size_t out_stride, float* buffer) {
    gated_linear_team<W, isa, Activation>(DynamicExtent{gate.cols}, gate, up, x, tokens, out,
                                          out_stride, buffer);
}

template <DType W, Isa isa = Isa::native, GateActivation Activation = SiluGate, Extent Cols>
void gated_linear_team(Cols cols, WeightMatrix const& gate, WeightMatrix const& up, Int8Rows x,
                       int tokens, float* out, std::size_t out_stride, float* buffer = nullptr) {
    static_assert(
        has_int8_dot(W),
        "gated_linear_team: int8 activations need weights with an int8 dot (has_int8_dot)");
    if constexpr (isa == Isa::native) {  // chosen once per matrix pair, not per strip
        with_running_isa([&]<Isa chosen>() {
            gated_linear_team<W, chosen, Activation>(cols, gate, up, x, tokens, out, out_stride,
                                                     buffer);
        });
    } else {
        int const width = static_cast<int>(cols);
        std::size_t const strip_bytes = Int8StripFormat<W>::strip_bytes(width);
        detail::share_int8_strips(
            detail::strip_count(gate.rows), tokens, x.stride, 2 * strip_bytes,
            [&](int first, int last) {
                detail::prepare_panel_chunk<W, isa>(x, width, first, last, buffer);
            },
            [&](int strip, int first, int last) {
                int const first_row = strip * int8_strip_rows;
                int const rows = detail::strip_rows(gate.rows, strip);
                auto const combine = [&]<int T>(int t0, float(&g)[T][int8_strip_rows],
                                                float(&u)[T][int8_strip_rows]) {
                    for (int t = 0; t < T; ++t)
                        detail::combine_strip_outputs<Activation>(
                            out + static_cast<std::size_t>(t0 + t) * out_stride + first_row, g[t],
                            u[t], rows);
                };
#if TINFER_X86_TARGETS
                if (detail::panels_for<W, isa>(last - first, buffer)) {
                    detail::PanelScratch const scratch = detail::panel_scratch(buffer, width);
                    decode_int8_panel<W>(gate, strip, scratch.first);
                    decode_int8_panel<W>(up, strip, scratch.second);
                    std::byte const* const panels[2] = {scratch.first, scratch.second};
                    int8_panel_products<W>(panels, width, x, first, last, scratch.sums,
                                           scratch.partial,
                                           [&]<int T>(int t0, float(&out)[2][T][int8_strip_rows]) {
                                               combine.template operator()<T>(t0, out[0], out[1]);
                                           });
                    return;
                }
#endif
                std::byte const* up_strip = up.data + static_cast<std::size_t>(strip) * strip_bytes;
                detail::int8_strip_products<W, isa>(
                    cols, gate, strip, x, first, last,
                    [&]<int T>(int t0, float(&g)[T][int8_strip_rows]) {
                        Int8Row x_rows[T];
                        for (int t = 0; t < T; ++t) x_rows[t] = x.row(t0 + t, width);
                        float u[T][int8_strip_rows];
                        int8_strip_tile<W, T, isa>(up_strip, cols, x_rows, u, t0 == first);
                        combine.template operator()<T>(t0, g, u);
                    });
            });
    }
}

template <DType W, Isa isa = Isa::native, GateActivation Activation = SiluGate>
void gated_linear_team(WeightMatrix const& gate, WeightMatrix const& up, Int8Rows x, int tokens,
                       float* out, std::size_t out_stride, float* buffer = nullptr) {
    gated_linear_team<W, isa, Activation>(DynamicExtent{up.cols}, gate, up, x, tokens, out,
                                          out_stride, buffer);
}

// The checks a caller runs before entering a parallel region (which cannot throw).
template <DType W>
void check_linear(WeightMatrix const& w, std::size_t scratch_floats, int threads) {
    check_weight_matrix<W>(w, "linear weights");
    if (w.layout != WeightLayout::gguf) {
        throw Error(
            "linear: float activations read the GGUF layout; this matrix is int8 strips "
            "(use linear_int8)");
    }
    std::size_t const needed = linear_scratch_floats(w.cols) * static_cast<std::size_t>(threads);
    if (scratch_floats < needed) {
        throw Error("linear: scratch holds " + std::to_string(scratch_floats) + " floats, needs " +
                    std::to_string(needed));
    }
}

// y [tokens][w.rows] = x [tokens][w.cols] . W^T, on `threads` OpenMP threads. `scratch` holds
// threads * linear_scratch_floats(w.cols) floats (the workspace owns it, so nothing allocates).
template <DType W>
void linear(WeightMatrix const& w, float const* x, int tokens, float* y, int threads,
            std::span<float> scratch) {
    check_linear<W>(w, scratch.size(), threads);
    std::size_t const per_thread = linear_scratch_floats(w.cols);
#pragma omp parallel num_threads(threads)
    linear_team<W>(w, FloatRows{x, static_cast<std::size_t>(w.cols)}, tokens, y,
                   static_cast<std::size_t>(w.rows), Store::assign,
                   scratch.data() + per_thread * static_cast<std::size_t>(omp_get_thread_num()));
}

// The same with its own scratch, for one-off calls (tests, experiments); a serving loop passes
// the workspace's scratch instead.
template <DType W>
void linear(WeightMatrix const& w, float const* x, int tokens, float* y, int threads = 1) {
    std::vector<float> scratch(linear_scratch_floats(w.cols) * static_cast<std::size_t>(threads));
    linear<W>(w, x, tokens, y, threads, scratch);
}

// y [tokens][w.rows] = x . W^T with int8 activation rows (quantize_row_int8), on `threads`.
// W: repacked into int8 strips (repack_int8_strips).
// Scratch of its own where a chunk can take the panel path, as the model's prefill does.
template <DType W, Isa isa = Isa::native>
void linear_int8(WeightMatrix const& w, Int8Rows x, int tokens, float* y, int threads = 1) {
    static_assert(has_int8_dot(W), "linear_int8: weights need an int8 dot (has_int8_dot)");
    detail::check_int8_strips<W>(w);
    std::size_t const per_thread =
        tokens >= int8_panel_min_tokens<W>() ? linear_scratch_floats(w.cols) : 0;
    std::vector<float> scratch(per_thread * static_cast<std::size_t>(threads));
#pragma omp parallel num_threads(threads)
    linear_team<W, isa>(
        w, x, tokens, y, static_cast<std::size_t>(w.rows), Store::assign,
        per_thread ? scratch.data() + per_thread * static_cast<std::size_t>(omp_get_thread_num())
                   : nullptr);
}

// Chooses the instantiation from the matrix's stored encoding, for matrices whose encoding is
// only known from the file (the token embedding reused as the output projection).
inline void linear_any(WeightMatrix const& w, float const* x, int tokens, float* y, int threads,
                       std::span<float> scratch) {
    dispatch_weight_type(w.type, [&]<DType W>() { linear<W>(w, x, tokens, y, threads, scratch); });
}

}  // namespace tinfer::kernels
