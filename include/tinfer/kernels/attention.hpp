#pragma once
// Causal attention over a KV view, FlashAttention style: keys and values are loaded tile by tile
// (as float, through kv::KvView, so contiguous and paged caches look the same) and each query
// keeps an online softmax (running maximum, running sum, unnormalised output) instead of a row
// of scores. One routine serves prefill chunks (many queries, attending to the cached prefix and
// to themselves) and decode (one query).
//
// GQA: a task takes one KV head and a block of queries, and runs all `group_size` query heads of
// that KV head against each tile it loads, so K/V are read once per group rather than per head.
//
// Batch invariance: tiles start at absolute positions (multiples of kv_tile), and a query only
// ever sees the keys of its own causal (and sliding-window) range within each tile, so the
// sequence of operations on one query's state depends on its position and the cached keys and
// values, never on which other queries share its block, chunk or batch, or on threads. A token
// prefilled inside a chunk and the same token decoded alone give bitwise the same output.
//
// Segments (split-KV decode): the keys are also cut into segments of kv_segment positions, at
// absolute multiples of it, and a query runs a fresh online softmax over each segment, the
// segments' states then folded into one in increasing order (merge_state). A one-query decode
// step can so hand its segments to different threads (attend_segment) and fold them after
// (merge_segments), with the bits every other path computes: Gemma 3's one KV head at long
// contexts was otherwise read whole by each thread.
//
// Scores, each dot's bits whichever way they are computed (the sums of kernels::dot: lane
// l % 16 of d, then its fixed tree): a block of several queries transposes its K tile once per
// tile (key j's dimension d at keys_t[d][j]), so that one register holds 16 keys' partial sums
// and a band of up to four query heads shares every loaded row, with no horizontal sum per
// key; a block of one to three queries (decode) takes eight keys at a time row by row
// (dot_rows), where the transpose would cost more than it saves. Where the build's floor is AVX2
// (no AVX-512) every block goes row by row, four keys' sums a register (dot_rows4_avx2), and
// fold keeps its output slice in AVX registers (fold_slice_avx2): the band's chains and the
// Lanes form's output rows did not fit AVX2's 16 registers and ran from the stack.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <span>
#include <string>

#include <omp.h>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kv/kv_view.hpp>

namespace tinfer::kernels {

// One sequence's chunk of queries, at positions first_position .. first_position + queries - 1,
// whose keys and values are already in the view. Query row i, head h at q + i*q_stride +
// h*head_dim; the output the same way in `out`.
struct AttentionChunk {
    int first_position = 0;
    int queries = 0;
    float const* q = nullptr;  // [queries][heads * head_dim] with row stride q_stride
    std::size_t q_stride = 0;
    float* out = nullptr;  // [queries][heads * head_dim] with row stride out_stride
    std::size_t out_stride = 0;
};

// Query heads [first, first + count) of a KV head's group; count 0: the whole group. Each head's
// scores and softmax depend on nothing but its own query, so a group split into slices run as
// separate tasks gives the same bits as the group in one task: decode splits the group where a
// step has fewer tasks than threads (Gemma 3: one KV head).
struct HeadSlice {
    int first = 0;
    int count = 0;
};

namespace detail {

// Sixteen lanes of floats, the unit of prefill attention's inner loops: sixteen keys' partial
// scores (band_scores) or sixteen dimensions of a value row and of the outputs (fold). An
// AVX-512 register where the build has one, two AVX registers where it has AVX2, else sixteen
// floats in loops the compiler vectorizes. GCC's own vectorization of these loops reloaded the
// shared row (of keys, of values) from memory for every head's multiply-add; load_lanes keeps it
// in a register. All forms add the same products in the same order as kernels::dot and the scalar
// loops they replace, as a multiply and an add that the compiler contracts (or not) as it does
// those loops, so their bits agree at every optimization level (the tests build at -O1, where none
// is fused).
#if TINFER_X86_TARGETS && defined(__AVX512F__)
using Lanes = __m512;
inline Lanes zero_lanes() {
    return _mm512_setzero_ps();
}
inline Lanes load_lanes(float const* from) {
    Lanes row = _mm512_loadu_ps(from);
    // An empty asm that "changes" the register, so GCC cannot fold the load into its users.
    asm("" : "+v"(row));
    return row;
}
inline void store_lanes(float* to, Lanes a) {
    _mm512_storeu_ps(to, a);
}
inline Lanes multiply_add_lanes(float x, Lanes row, Lanes sum) {
    return _mm512_add_ps(sum, _mm512_mul_ps(_mm512_set1_ps(x), row));
}
inline Lanes add_lanes(Lanes a, Lanes b) {
    return _mm512_add_ps(a, b);
}
inline Lanes scale_lanes(Lanes a, float scale) {
    return _mm512_mul_ps(a, _mm512_set1_ps(scale));
}
#elif TINFER_X86_TARGETS && defined(__AVX2__)
// Two AVX registers. With the sixteen-float struct below GCC 12 kept these rows on the stack
// and moved them through 16-byte halves: on a Zen 3 (AVX2 only) fold was a fifth of a SmolLM2
// decode step at 64 cached positions, and pp512 ran at 71-73 t/s against 293-294 with these.
struct Lanes {
    __m256 half[2];
};
inline Lanes zero_lanes() {
    return {_mm256_setzero_ps(), _mm256_setzero_ps()};
}
inline Lanes load_lanes(float const* from) {
    Lanes row{_mm256_loadu_ps(from), _mm256_loadu_ps(from + 8)};
    asm("" : "+x"(row.half[0]), "+x"(row.half[1]));  // as the AVX-512 form's
    return row;
}
inline void store_lanes(float* to, Lanes a) {
    _mm256_storeu_ps(to, a.half[0]);
    _mm256_storeu_ps(to + 8, a.half[1]);
}
inline Lanes multiply_add_lanes(float x, Lanes row, Lanes sum) {
    __m256 const factor = _mm256_set1_ps(x);
    return {_mm256_add_ps(sum.half[0], _mm256_mul_ps(factor, row.half[0])),
            _mm256_add_ps(sum.half[1], _mm256_mul_ps(factor, row.half[1]))};
}
inline Lanes add_lanes(Lanes a, Lanes b) {
    return {_mm256_add_ps(a.half[0], b.half[0]), _mm256_add_ps(a.half[1], b.half[1])};
}
inline Lanes scale_lanes(Lanes a, float scale) {
    __m256 const factor = _mm256_set1_ps(scale);
    return {_mm256_mul_ps(a.half[0], factor), _mm256_mul_ps(a.half[1], factor)};
}
#else
struct Lanes {
    float lane[16];
};
inline Lanes zero_lanes() {
    return {};
}
inline Lanes load_lanes(float const* from) {
    Lanes row;
    std::copy_n(from, 16, row.lane);
    return row;
}
inline void store_lanes(float* to, Lanes a) {
    std::copy_n(a.lane, 16, to);
}
inline Lanes multiply_add_lanes(float x, Lanes row, Lanes sum) {
#pragma omp simd
    for (int l = 0; l < 16; ++l) sum.lane[l] += x * row.lane[l];
    return sum;
}
inline Lanes add_lanes(Lanes a, Lanes b) {
#pragma omp simd
    for (int l = 0; l < 16; ++l) a.lane[l] += b.lane[l];
    return a;
}
inline Lanes scale_lanes(Lanes a, float scale) {
#pragma omp simd
    for (int l = 0; l < 16; ++l) a.lane[l] *= scale;
    return a;
}
#endif

// keys_t[d * padded + j] = keys[j * head_dim + d] for `count` keys, and 0 for count <= j <
// padded (a multiple of 16). Blocks of 16 keys x 16 dimensions go through sixteen AVX-512
// registers where the build has them: the scalar copy, one strided load per element, was 15% of
// SmolLM2's prefill attention (a 64-key tile per block of 21 queries).
inline void transpose_keys(float const* keys, int count, int head_dim, float* keys_t, int padded) {
    int d0 = 0;
#if TINFER_X86_TARGETS && defined(__AVX512F__)
    for (; d0 + 16 <= head_dim; d0 += 16) {
        for (int j0 = 0; j0 < padded; j0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = j0 + i < count ? _mm512_loadu_ps(keys + (j0 + i) * head_dim + d0)
                                      : _mm512_setzero_ps();
            // Within each 128-bit quarter: rows interleaved by element, then by pairs, so r[4k + m]
            // holds element 4q + m of rows 4k .. 4k + 3 in quarter q; then the quarters are
            // gathered across registers: row o of the result is element o of the sixteen rows.
            __m512 t[16];
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            }
            for (int k = 0; k < 16; k += 4) {
                for (int e = 0; e < 2; ++e) {
                    __m512d const a = _mm512_castps_pd(t[k + e]),
                                  b = _mm512_castps_pd(t[k + e + 2]);
                    r[k + 2 * e] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
                    r[k + 2 * e + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
                }
            }
            for (int m = 0; m < 4; ++m) {
                __m512 const low01 = _mm512_shuffle_f32x4(r[m], r[m + 4], 0x44);
                __m512 const low23 = _mm512_shuffle_f32x4(r[m + 8], r[m + 12], 0x44);
                __m512 const high01 = _mm512_shuffle_f32x4(r[m], r[m + 4], 0xee);
                __m512 const high23 = _mm512_shuffle_f32x4(r[m + 8], r[m + 12], 0xee);
                constexpr int even = _MM_SHUFFLE(2, 0, 2, 0), odd = _MM_SHUFFLE(3, 1, 3, 1);
                float* out = keys_t + (d0 + m) * padded + j0;
                _mm512_storeu_ps(out, _mm512_shuffle_f32x4(low01, low23, even));
                _mm512_storeu_ps(out + 4 * padded, _mm512_shuffle_f32x4(low01, low23, odd));
                _mm512_storeu_ps(out + 8 * padded, _mm512_shuffle_f32x4(high01, high23, even));
                _mm512_storeu_ps(out + 12 * padded, _mm512_shuffle_f32x4(high01, high23, odd));
            }
        }
    }
#endif
    for (; d0 < head_dim; ++d0) {
        float* row = keys_t + static_cast<std::size_t>(d0) * padded;
        float const* column = keys + d0;
        for (int j = 0; j < count; ++j) row[j] = column[static_cast<std::size_t>(j) * head_dim];
        std::fill(row + count, row + padded, 0.0f);
    }
}

}  // namespace detail

// The largest head a DynamicExtent head_dim may have (a query's output row lives on the stack).
inline constexpr int max_dynamic_attention_head_dim = 512;

// sliding_window: 0 attends to every earlier position; W > 0 lets a query at p see keys
// p - W + 1 .. p (W tokens, itself included), as Mistral's and Gemma's windows.
// query_scale_dim: scores are q.k / sqrt(query_scale_dim) (head_dim, or Gemma's
// query_pre_attn_scalar). Each dimension is an Extent: static (generated for the shape) or
// dynamic (one instantiation for every shape), from this one source.
template <Extent HeadDim, Extent GroupSize, Extent SlidingWindow = StaticExtent<0>,
          Extent QueryScaleDim = HeadDim>
class AttentionKernel {
  public:
    constexpr AttentionKernel(HeadDim head_dim = {}, GroupSize group_size = {},
                              SlidingWindow sliding_window = {}, QueryScaleDim query_scale_dim = {})
        : head_dim_(head_dim),
          group_size_(group_size),
          sliding_window_(sliding_window),
          query_scale_dim_(query_scale_dim) {
        if constexpr (!HeadDim::is_static || !GroupSize::is_static || !SlidingWindow::is_static ||
                      !QueryScaleDim::is_static) {
            int const d = head_dim_, g = group_size_, w = sliding_window_, q = query_scale_dim_;
            if (d <= 0 || d % 2 != 0 || d > max_dynamic_attention_head_dim || g <= 0 || w < 0 ||
                q <= 0)
                throw Error("attention: head_dim " + std::to_string(d) + " (even, at most " +
                            std::to_string(max_dynamic_attention_head_dim) + "), group_size " +
                            std::to_string(g) + ", sliding_window " + std::to_string(w) +
                            ", query_scale_dim " + std::to_string(q) + " is not a valid shape");
        }
    }

    // Keys per tile: a K tile and a V tile of 16 KiB each, whatever head_dim, so both stay in L1.
    constexpr int kv_tile() const { return std::max(8, 4096 / head_dim()); }
    // Positions per segment: whole tiles, at least segment_positions.
    constexpr int kv_segment() const {
        return (segment_positions + kv_tile() - 1) / kv_tile() * kv_tile();
    }
    // Segments holding positions 0 .. position: those a query at `position` may see.
    constexpr int segments(int position) const { return position / kv_segment() + 1; }
    // One query head's softmax state in attend_segment's output: the unnormalised output
    // [head_dim], then the running maximum and the sum (0: the segment held none of its keys).
    constexpr int segment_state_floats() const { return head_dim() + 2; }
    // Queries per task: about 64 (query, head) states of head_dim floats, also L1 sized.
    constexpr int query_block() const { return std::max(1, 64 / group_size()); }
    constexpr int state_rows() const { return query_block() * group_size(); }
    // Softmax in base 2: exp(s / sqrt(d)) = exp2(s * log2(e) / sqrt(d)). A constant where d is
    // static: GCC left the square root's Newton loop (a double division per step) in every
    // query's tile update, 13% of Gemma 3's prefill attention; a dynamic d pays it once per
    // segment of a block (fold_keys).
    constexpr float score_scale() const {
        if constexpr (QueryScaleDim::is_static) {
            constexpr float scale = static_cast<float>(
                std::numbers::log2e / constexpr_sqrt(static_cast<double>(QueryScaleDim::value)));
            return scale;
        } else {
            return static_cast<float>(std::numbers::log2e /
                                      constexpr_sqrt(static_cast<int>(query_scale_dim_)));
        }
    }
    // Keys per register of scores, and the transposed K tile's row length (kv_tile rounded up
    // to whole registers, the padding zero).
    static constexpr int key_lanes = 16;
    static_assert(key_lanes == reduction_lanes &&
                      sizeof(detail::Lanes) == key_lanes * sizeof(float),
                  "a register of keys is a register of lane sums (weigh, band_scores)");
    constexpr int padded_tile() const {
        return (kv_tile() + key_lanes - 1) / key_lanes * key_lanes;
    }
    // Per-thread scratch: K tile, its transpose, V tile, a band's tiles of scores, and the
    // block's softmax states twice (the segment's, and the earlier segments' folded).
    constexpr std::size_t scratch_floats() const {
        return 2 * static_cast<std::size_t>(kv_tile()) * head_dim() +
               static_cast<std::size_t>(padded_tile()) * (head_dim() + band_heads) +
               2 * static_cast<std::size_t>(state_rows()) * (head_dim() + 2);
    }
    // Tasks that `attend_block` splits a chunk into, per KV head.
    constexpr int blocks(int queries) const {
        return (queries + query_block() - 1) / query_block();
    }

    // Queries [block * query_block, ...) of the chunk, the group of query heads of `kv_head` (or
    // its `slice`).
    // Precondition (check_cached checks it; this runs inside parallel regions, which cannot
    // throw): the view caches every position up to the chunk's last query.
    template <kv::KvView View>
    void attend_block(View const& view, int kv_head, AttentionChunk const& chunk, int block,
                      float* scratch, HeadSlice slice = {}) const {
        int const head_dim = this->head_dim(), group_size = this->group_size();
        int const segment = kv_segment();
        QueryRange const queries = queries_of_block(chunk.queries, block);
        KeyRange const keys_seen = keys_of_block(chunk.first_position, chunk.queries, block);
        int const count = queries.end - queries.begin;
        BlockStates const running = block_states(scratch, 0), folded = block_states(scratch, 1);
        int const first_segment = keys_seen.first / segment;
        bool const one_segment = first_segment == (keys_seen.end - 1) / segment;
        if (!one_segment) folded.clear(count * group_size, head_dim);
        for (int s = first_segment; s * segment < keys_seen.end; ++s) {
            running.clear(count * group_size, head_dim);
            fold_keys(view, kv_head, chunk, queries,
                      {std::max(s * segment, keys_seen.first),
                       std::min((s + 1) * segment, keys_seen.end)},
                      scratch, slice, running);
            if (one_segment) break;
            for (int i = 0; i < count; ++i) {
                for (int g = first_head(slice); g < end_head(slice); ++g) {
                    int const row = i * group_size + g;
                    merge_state(running.output(row, head_dim), running.maxima[row],
                                running.sums[row], folded.output(row, head_dim), folded.maxima[row],
                                folded.sums[row]);
                }
            }
        }
        BlockStates const& result = one_segment ? running : folded;
        for (int i = 0; i < count; ++i) {
            float* out_row = chunk.out +
                             static_cast<std::size_t>(queries.begin + i) * chunk.out_stride +
                             static_cast<std::size_t>(kv_head) * group_size * head_dim;
            for (int g = first_head(slice); g < end_head(slice); ++g) {
                int const row = i * group_size + g;
                normalize_output(result.output(row, head_dim), result.sums[row],
                                 out_row + g * head_dim);
            }
        }
    }

    // Split-KV decode, part one: the one query of `chunk` (a decode step) over the keys of
    // segment `segment` alone, the query heads of `slice`; head g's state (segment_state_floats)
    // goes to states + g * segment_state_floats(). A segment holding none of the query's keys
    // (before its window, or past it) leaves a state of sum 0, which merge_segments skips.
    template <kv::KvView View>
    void attend_segment(View const& view, int kv_head, AttentionChunk const& chunk, int segment,
                        float* scratch, float* states, HeadSlice slice = {}) const {
        int const head_dim = this->head_dim(), group_size = this->group_size();
        KeyRange const keys = keys_of_segment(chunk.first_position, segment);
        BlockStates const running = block_states(scratch, 0);
        running.clear(group_size, head_dim);
        if (keys.first < keys.end)
            fold_keys(view, kv_head, chunk, {0, 1}, keys, scratch, slice, running);
        for (int g = first_head(slice); g < end_head(slice); ++g) {
            float* state = states + static_cast<std::size_t>(g) * segment_state_floats();
            std::copy_n(running.output(g, head_dim), head_dim, state);
            state[head_dim] = running.maxima[g];
            state[head_dim + 1] = running.sums[g];
        }
    }

    // Split-KV decode, part two: folds the `segments` states attend_segment left for segments
    // 0 .. segments - 1 (each `group_size * segment_state_floats()` floats after the last) in
    // order, and writes the KV head's group of outputs of the chunk's one query: bitwise what
    // attend_block writes for it.
    void merge_segments(float const* states, int segments, int kv_head,
                        AttentionChunk const& chunk) const {
        int const head_dim = this->head_dim(), group_size = this->group_size();
        std::size_t const stride = static_cast<std::size_t>(group_size) * segment_state_floats();
        float* out_row = chunk.out + static_cast<std::size_t>(kv_head) * group_size * head_dim;
        for (int g = 0; g < group_size; ++g) {
            float* output = out_row + g * head_dim;
            float maximum = negative_infinity, sum = 0;
            for (int s = 0; s < segments; ++s) {
                float const* state = states + s * stride + g * segment_state_floats();
                merge_state(state, state[head_dim], state[head_dim + 1], output, maximum, sum);
            }
            normalize_output(output, sum, output);
        }
    }

    // The chunk's queries [begin, end) in query block `block`, counted from the chunk's first.
    struct QueryRange {
        int begin, end;
    };
    constexpr QueryRange queries_of_block(int queries, int block) const {
        int const begin = block * query_block();
        return {begin, std::min(queries, begin + query_block())};
    }

    // The cached positions [first, end) that query block `block` of a chunk attends to.
    struct KeyRange {
        int first, end;
    };
    constexpr KeyRange keys_of_block(int first_position, int queries, int block) const {
        QueryRange const block_queries = queries_of_block(queries, block);
        int const first_query = first_position + block_queries.begin;
        int const window = sliding_window_;
        return {window > 0 ? std::max(0, first_query - window + 1) : 0,
                first_position + block_queries.end};
    }

    // The positions [first, end) of segment `segment` that a query at `position` attends to
    // (empty where the segment lies before its window or after it).
    constexpr KeyRange keys_of_segment(int position, int segment) const {
        KeyRange const seen = keys_of_block(position, 1, 0);
        return {std::max(seen.first, segment * kv_segment()),
                std::min(seen.end, (segment + 1) * kv_segment())};
    }

    // Asks for the keys and values attend_block(view, kv_head, chunk, block) will read, the
    // first `max_positions` of those already cached, where the view can (kv::KvPrefetchView);
    // returns how many positions it asked for.
    template <kv::KvView View>
    int prefetch_block(View const& view, int kv_head, AttentionChunk const& chunk, int block,
                       int max_positions) const {
        return prefetch_keys(view, kv_head,
                             keys_of_block(chunk.first_position, chunk.queries, block),
                             max_positions);
    }
    // The same for attend_segment(view, kv_head, chunk, segment).
    template <kv::KvView View>
    int prefetch_segment(View const& view, int kv_head, AttentionChunk const& chunk, int segment,
                         int max_positions) const {
        return prefetch_keys(view, kv_head, keys_of_segment(chunk.first_position, segment),
                             max_positions);
    }

    // Every KV head and query block of one chunk, spread over `threads`; scratch holds
    // threads * scratch_floats() floats.
    template <kv::KvView View>
    void attend(View const& view, int kv_heads, AttentionChunk const& chunk, int threads,
                std::span<float> scratch) const {
        require_scratch(scratch, threads);
        check_cached(view, chunk);
        int const per_head = blocks(chunk.queries);
        std::size_t const per_thread = scratch_floats();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int task = 0; task < kv_heads * per_head; ++task) {
            float* mine =
                scratch.data() + per_thread * static_cast<std::size_t>(omp_get_thread_num());
            attend_block(view, task / per_head, chunk, task % per_head, mine);
        }
    }

    template <kv::KvView View>
    static void check_cached(View const& view, AttentionChunk const& chunk) {
        int const last_query = chunk.first_position + chunk.queries - 1;
        if (chunk.first_position < 0 || view.tokens() <= last_query) {
            throw Error("attention: the view caches " + std::to_string(view.tokens()) +
                        " positions, the query at position " + std::to_string(last_query) +
                        " needs its own key and value cached first");
        }
    }

    void require_scratch(std::span<float> scratch, int threads) const {
        if (scratch.size() < scratch_floats() * static_cast<std::size_t>(threads)) {
            throw Error("attention: scratch holds " + std::to_string(scratch.size()) +
                        " floats, needs " + std::to_string(scratch_floats() * threads));
        }
    }

    constexpr int head_dim() const {
        return head_dim_;
    }
    constexpr int group_size() const {
        return group_size_;
    }

  private:
    // Each segment a block starts clears a state per (query, head) and folds it into the
    // earlier segments' (about four passes over head_dim floats), where the segment's keys cost
    // 2 x segment_positions multiply-adds per dimension. At 64 positions prefill attention ran
    // 6-10% slower than before segments (Gemma 3's and SmolLM2's shapes, 512 queries from an
    // empty cache, one thread), and splitting decode at tg128 gained 0-1%; at 256 the whole
    // change costs it 2-5% (runs interleaved, within this machine's drift), and decode splits
    // from 256 positions on, where the keys start to weigh.
    static constexpr int segment_positions = 256;

    template <kv::KvView View>
    static int prefetch_keys(View const& view, int kv_head, KeyRange keys, int max_positions) {
        if constexpr (kv::KvPrefetchView<View>) {
            int const end = std::min({keys.end, view.tokens(), keys.first + max_positions});
            if (end <= keys.first) return 0;
            view.prefetch(kv_head, keys.first, end - keys.first);
            return end - keys.first;
        } else {
            return 0;
        }
    }

    static constexpr int first_head(HeadSlice slice) {
        return slice.first;
    }
    constexpr int end_head(HeadSlice slice) const {
        return slice.count > 0 ? slice.first + slice.count : group_size();
    }

    // A block's online softmax states in its scratch: outputs [state_rows][head_dim], then
    // maxima and sums [state_rows]; `set` 0 the current segment's, 1 the earlier segments'
    // folded.
    struct BlockStates {
        float* outputs;
        float* maxima;
        float* sums;
        float* output(int row, int head_dim) const { return outputs + row * head_dim; }
        void clear(int rows, int head_dim) const {
            std::fill_n(maxima, rows, negative_infinity);
            std::fill_n(sums, rows, 0.0f);
            std::fill_n(outputs, static_cast<std::size_t>(rows) * head_dim, 0.0f);
        }
    };
    BlockStates block_states(float* scratch, int set) const {
        std::size_t const tiles =
            2 * static_cast<std::size_t>(kv_tile()) * head_dim() +
            static_cast<std::size_t>(padded_tile()) * (head_dim() + band_heads);
        float* const outputs =
            scratch + tiles + static_cast<std::size_t>(set) * state_rows() * (head_dim() + 2);
        float* const maxima = outputs + state_rows() * head_dim();
        return {outputs, maxima, maxima + state_rows()};
    }

    // Folds a segment's state (output a, maximum m, sum l) into the state of the segments before
    // it (A, M, L), in segment order: the one way segments combine, in attend_block and in
    // merge_segments alike. A sum of 0 is a segment (or a fold) without keys.
    void merge_state(float const* a, float m, float l, float* A, float& M, float& L) const {
        int const head_dim = this->head_dim();
        if (l == 0) return;
        if (L == 0) {
            std::copy_n(a, head_dim, A);
            M = m;
            L = l;
            return;
        }
        float const top = std::max(M, m);
        float const earlier = fast_exp2(M - top), later = fast_exp2(m - top);
        L = L * earlier + l * later;
#pragma omp simd
        for (int d = 0; d < head_dim; ++d) A[d] = A[d] * earlier + a[d] * later;
        M = top;
    }

    void normalize_output(float const* acc, float sum, float* out) const {
        int const head_dim = this->head_dim();
        float const inverse_sum = 1.0f / sum;
#pragma omp simd
        for (int d = 0; d < head_dim; ++d) out[d] = acc[d] * inverse_sum;
    }

    // The keys [keys.first, keys.end) of one segment folded into the states of the queries of
    // `queries` (each only its causal and window range of them), tile by tile.
    template <kv::KvView View>
    void fold_keys(View const& view, int kv_head, AttentionChunk const& chunk, QueryRange queries,
                   KeyRange keys, float* scratch, HeadSlice slice,
                   BlockStates const& states) const {
        int const head_dim = this->head_dim(), group_size = this->group_size();
        int const sliding_window = sliding_window_, kv_tile = this->kv_tile();
        float const scale = score_scale();
        int const count = queries.end - queries.begin;
        int const first_query = chunk.first_position + queries.begin;
        int const padded = padded_tile();
        float* keys_buffer = scratch;                      // [kv_tile][head_dim]
        float* keys_t = keys_buffer + kv_tile * head_dim;  // [head_dim][padded]
        float* values = keys_t + padded * head_dim;        // [kv_tile][head_dim]
        float* scores = values + kv_tile * head_dim;       // [band_heads][padded]

        bool const transposed = count >= transposed_min_queries;
        for (int tile = keys.first / kv_tile * kv_tile; tile < keys.end; tile += kv_tile) {
            int const tile_keys = std::min(kv_tile, keys.end - tile);
            float const* const tile_k =
                tile_rows<true>(view, kv_head, tile, tile_keys, keys_buffer);
            float const* const tile_v = tile_rows<false>(view, kv_head, tile, tile_keys, values);
            if (transposed) detail::transpose_keys(tile_k, tile_keys, head_dim, keys_t, padded);
            for (int i = 0; i < count; ++i) {
                int const position = first_query + i;
                // This query's keys within the tile, tile-relative and inclusive.
                int const window_start = sliding_window > 0 ? position - sliding_window + 1 : 0;
                int const lo = std::max(tile, window_start) - tile;
                int const hi = std::min(tile_keys - 1, position - tile);
                if (lo > hi) continue;
                float const* q_row = chunk.q +
                                     static_cast<std::size_t>(queries.begin + i) * chunk.q_stride +
                                     static_cast<std::size_t>(kv_head) * group_size * head_dim;
                int const first_row = i * group_size;
                for_each_tile<band_heads>(first_head(slice), end_head(slice), [&]<int H>(int g0) {
                    if (transposed) {
                        band_scores<H>(q_row + g0 * head_dim, keys_t, lo, hi, scale, scores);
                    } else {
                        for (int h = 0; h < H; ++h)
                            row_scores(q_row + (g0 + h) * head_dim, tile_k, lo, hi, scale,
                                       scores + h * padded);
                    }
                    int const row = first_row + g0;
                    if (count == 1) {
                        fold_one_query<H>(scores, tile_v, lo, hi, states.maxima + row,
                                          states.sums + row, states.output(row, head_dim));
                    } else {
                        fold<H>(scores, tile_v, lo, hi, states.maxima + row, states.sums + row,
                                states.output(row, head_dim));
                    }
                });
            }
        }
    }

    // Query heads whose scores are computed together (a band), sharing each loaded row of the
    // transposed keys: 4 heads x 2 residues are 8 chains of 16 keys' sums in flight.
    static constexpr int band_heads = 4;
    // Queries in a block from which the K tile is transposed. Measured on Zen 4, one thread,
    // 512 queries over 512 keys: Gemma 3's shape 17 -> 25 GMAC/s, SmolLM2's 12 -> 15; one
    // decoding query over 1024 keys transposing too: Gemma 3 13 -> 11, SmolLM2 8.5 -> 7.
#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
    // With AVX2 never: on a Zen 3, one thread, 512 queries over 512 keys (bench/specialization's
    // attention prefill), the rows (dot_rows4_avx2, fold_slice_avx2) take SmolLM2's shape in
    // 6.8-7.1 ms and Gemma 3's in 10.5-10.8, where the band took 13.4-14.6 and 18.0-20.0; a
    // band rewritten on AVX registers (its chains in registers, an 8 x 8 transpose) still lost
    // to the rows (9.2 against 8.3 ms and 17.7 against 13.4, before fold shared value rows).
    static constexpr int transposed_min_queries = std::numeric_limits<int>::max();
#else
    static constexpr int transposed_min_queries = 4;
#endif
    // Output dimensions a head accumulates at once: four AVX-512 registers; 32 elsewhere, where
    // a band's heads' 64 would be 32 AVX registers of sixteen (on a Zen 3, SmolLM2 tg128 at
    // depth 512: 78.6-90.5 t/s at 16, 90.8-98.4 at 32). The slice only groups dimensions:
    // each still adds its keys in order, so the bits do not depend on it.
#if defined(__AVX512F__)
    static constexpr int row_slice = 64;
#else
    static constexpr int row_slice = 32;
#endif

    // A tile's keys (Keys) or values: in place where the view can hand them out
    // (kv::KvRowsView), else loaded into the scratch `buffer`.
    template <bool Keys, kv::KvView View>
    static float const* tile_rows(View const& view, int kv_head, int first, int count,
                                  float* buffer) {
        if constexpr (kv::AlwaysInPlaceRows<View>) {
            return Keys ? view.key_rows(kv_head, first, count)
                        : view.value_rows(kv_head, first, count);
        } else {
            if constexpr (kv::KvRowsView<View>) {
                float const* rows = Keys ? view.key_rows(kv_head, first, count)
                                         : view.value_rows(kv_head, first, count);
                if (rows) return rows;
            }
            if constexpr (Keys) {
                view.load_keys(kv_head, first, count, buffer);
            } else {
                view.load_values(kv_head, first, count, buffer);
            }
            return buffer;
        }
    }

    // scores[h * padded_tile + j] = dot(q_h, k_j) * scale, bitwise, for the band's H query heads
    // (their q rows contiguous from q) and the registers of keys covering lo..hi (keys_t
    // transposed, lanes outside lo..hi computed and not read). dot's lane l sums the d with
    // d % 16 == l in increasing d (the tail past the last multiple of 16 last); here lane l is
    // a key and that sum is a chain of multiply-adds over the rows d of keys_t, two residues at
    // a time; the 16 sums then go through sum_lanes' tree as whole registers.
    template <int H>
    void band_scores(float const* q, float const* keys_t, int lo, int hi, float scale,
                     float* scores) const {
        int const head_dim = this->head_dim(), padded = padded_tile();
        int const full = head_dim - head_dim % reduction_lanes;
        using detail::Lanes, detail::zero_lanes, detail::load_lanes, detail::multiply_add_lanes,
            detail::add_lanes;
        // The chains of residues base and base + 8 for every head of the band, added: sum_lanes'
        // first level. Each row of keys is loaded once for the band's H multiply-adds.
        auto const residue_pair = [&](int j0, int base, Lanes(&level8)[H]) {
            Lanes chain[H][2];
            for (int h = 0; h < H; ++h) chain[h][0] = chain[h][1] = zero_lanes();
            auto const step = [&](int d, int r) {
                Lanes const row = load_lanes(keys_t + d * padded + j0);
                for (int h = 0; h < H; ++h)
                    chain[h][r] = multiply_add_lanes(q[h * head_dim + d], row, chain[h][r]);
            };
            for (int k = 0; k < full; k += reduction_lanes) {
                step(k + base, 0);
                step(k + base + 8, 1);
            }
            if (full + base < head_dim) step(full + base, 0);
            if (full + base + 8 < head_dim) step(full + base + 8, 1);
            for (int h = 0; h < H; ++h) level8[h] = add_lanes(chain[h][0], chain[h][1]);
        };
        for (int j0 = lo / key_lanes * key_lanes; j0 <= hi; j0 += key_lanes) {
            // Residues in the order the tree consumes them (0 and 8, 4 and 12, 2 and 10, ...),
            // each level's sum formed as soon as both its halves exist: no level on the stack.
            Lanes level2[2][H];
            for (int half = 0; half < 2; ++half) {
                Lanes level4[2][H];
                for (int quarter = 0; quarter < 2; ++quarter) {
                    int const m = half + 2 * quarter;
                    Lanes level8[2][H];
                    residue_pair(j0, m, level8[0]);
                    residue_pair(j0, m + 4, level8[1]);
                    for (int h = 0; h < H; ++h)
                        level4[quarter][h] = add_lanes(level8[0][h], level8[1][h]);
                }
                for (int h = 0; h < H; ++h) level2[half][h] = add_lanes(level4[0][h], level4[1][h]);
            }
            for (int h = 0; h < H; ++h)
                detail::store_lanes(
                    scores + h * padded + j0,
                    detail::scale_lanes(add_lanes(level2[0][h], level2[1][h]), scale));
        }
    }

    // Keys whose dot products row_scores computes together: sixteen on AVX-512; eight on AVX2,
    // where sixteen keys' lane sums are 32 registers and spilled (dot_rows<16> on a Zen 3, 64
    // dimensions: 14 cycles a key against 7.2 at eight).
#if defined(__AVX512F__)
    static constexpr int widest_score_rows = 16;
#else
    static constexpr int widest_score_rows = 8;
#endif
    // scores[j] = dot(q, k_j) * scale for keys lo..hi of the tile (row-major), widest_score_rows
    // keys (one batched reduction, sum_lanes_rows), then eight, four, one at a time: the same
    // bits as band_scores.
    void row_scores(float const* q, float const* keys, int lo, int hi, float scale,
                    float* scores) const {
        int const head_dim = this->head_dim();
        auto const rows = [&]<int R>(int j) {
            float dots[R];
            dot_rows<R>(head_dim_, q, keys + j * head_dim, static_cast<std::size_t>(head_dim),
                        dots);
            for (int r = 0; r < R; ++r) scores[j + r] = dots[r] * scale;
        };
        int j = lo;
#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
        // Four keys' sums stay in a register through the scaling: stored as dot_rows' floats
        // and read back as one vector they missed store forwarding (a third of row_scores).
        if (head_dim % reduction_lanes == 0) {
            __m128 const factor = _mm_set1_ps(scale);
            for (; j + 3 <= hi; j += 4)
                _mm_storeu_ps(scores + j,
                              _mm_mul_ps(dot_rows4_avx2(head_dim_, q, keys + j * head_dim,
                                                        static_cast<std::size_t>(head_dim)),
                                         factor));
        }
#endif
        if constexpr (widest_score_rows == 16)
            for (; j + 15 <= hi; j += 16) rows.template operator()<16>(j);
        for (; j + 7 <= hi; j += 8) rows.template operator()<8>(j);
        for (; j + 3 <= hi; j += 4) rows.template operator()<4>(j);
        for (; j <= hi; ++j) scores[j] = dot(head_dim_, q, keys + j * head_dim) * scale;
    }

    // Turns one query head's scores of keys lo..hi of the tile into weights exp2(score -
    // maximum) in place, updating its running maximum and sum; returns the factor that rescales
    // what its output row accumulated so far. The maximum, the weights and their sum run over
    // whole registers of 16 keys (from lo's register; a scores row is padded_tile long), the keys
    // outside lo..hi masked: a scalar maximum and a scalar sum, one dependent add per key, were a
    // quarter of prefill's fold. The sum adds key j into lane j % 16 in increasing j, then
    // sum_lanes' tree: an order fixed by lo and hi alone, so a query's bits still do not depend
    // on its block. The loops name their width: GCC 12 otherwise vectorizes them at its tuning's
    // preferred 256 bits, two registers and a mask per 16 keys; at 512, pp512 on SmolLM2's shape
    // (64-key tiles) ran 1.05-1.08x the tokens/s at one thread, 1.02-1.06x at two (alternated
    // repetition by repetition in one process, Xeon guest); Gemma 3's 16-key tiles 1.00.
    static float weigh(float* scores, int lo, int hi, float& maximum, float& sum) {
        int const first_register = lo / key_lanes * key_lanes;
        float lane_maxima[key_lanes];
        std::fill_n(lane_maxima, key_lanes, negative_infinity);
        for (int j0 = first_register; j0 <= hi; j0 += key_lanes) {
#pragma omp simd simdlen(key_lanes)
            for (int l = 0; l < key_lanes; ++l) {
                int const j = j0 + l;
                float const score = select(j >= lo && j <= hi, scores[j], negative_infinity);
                lane_maxima[l] = select(lane_maxima[l] < score, score, lane_maxima[l]);  // max
            }
        }
        float const tile_maximum = max_lanes(lane_maxima);
        float const new_maximum = std::max(maximum, tile_maximum);
        // Rescales what was accumulated against the old maximum; exp2(-inf) = 0 on the first tile.
        float const correction = fast_exp2(maximum - new_maximum);
        float lane_sums[reduction_lanes] = {};
        for (int j0 = first_register; j0 <= hi; j0 += key_lanes) {
#pragma omp simd simdlen(key_lanes)
            for (int l = 0; l < key_lanes; ++l) {
                int const j = j0 + l;
                float const weight =
                    select(j >= lo && j <= hi, fast_exp2(scores[j] - new_maximum), 0.0f);
                scores[j] = weight;
                lane_sums[l] += weight;
            }
        }
        sum = sum * correction + sum_lanes(lane_sums);
        maximum = new_maximum;
        return correction;
    }

    // Folds the scores of keys lo..hi of the tile into the online softmax states of a band of H
    // query heads of one query (scores rows padded_tile apart, states and output rows
    // consecutive). The output rows go in slices of row_slice dimensions, all keys per slice, the
    // band's heads together: each value row is loaded once for the H heads, and a slice of a
    // constant width stays in registers. Each dimension of each head still adds its keys in
    // order.
    template <int H>
    void fold(float* scores, float const* values, int lo, int hi, float* maxima, float* sums,
              float* acc) const {
        using detail::Lanes, detail::load_lanes, detail::multiply_add_lanes;
        int const head_dim = this->head_dim(), padded = padded_tile();
        float correction[H];
        for (int h = 0; h < H; ++h)
            correction[h] = weigh(scores + h * padded, lo, hi, maxima[h], sums[h]);
        constexpr int slice_registers = row_slice / key_lanes;
        int d0 = 0;
#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
        // AVX2: at most 8 registers of output (8 dimensions each) over the band's heads, so
        // that a key's value registers stay loaded for all of them; the Lanes form below (12
        // or 16 registers of output and 4 of values) kept every sum on the stack (GCC 12, Zen
        // 3). Three heads at 32 dimensions (12 outputs) left no room for the values, each
        // multiply-add then loading its own: 16 dimensions took SmolLM2's 512-query prefill
        // attention 9-10% faster.
        constexpr int registers = H == 1 ? 8 : H == 2 ? 4 : 2;
        for (; d0 + 8 * registers <= head_dim; d0 += 8 * registers)
            fold_slice_avx2<H, registers>(scores, values + d0, lo, hi, correction, acc + d0);
#endif
        for (; d0 + row_slice <= head_dim; d0 += row_slice) {
            Lanes row[H][slice_registers];
            for (int h = 0; h < H; ++h)
                for (int r = 0; r < slice_registers; ++r)
                    row[h][r] = detail::scale_lanes(
                        load_lanes(acc + h * head_dim + d0 + r * key_lanes), correction[h]);
            for (int j = lo; j <= hi; ++j) {
                Lanes v[slice_registers];
                for (int r = 0; r < slice_registers; ++r)
                    v[r] = load_lanes(values + j * head_dim + d0 + r * key_lanes);
                for (int h = 0; h < H; ++h) {
                    float const p = scores[h * padded + j];
                    for (int r = 0; r < slice_registers; ++r)
                        row[h][r] = multiply_add_lanes(p, v[r], row[h][r]);
                }
            }
            for (int h = 0; h < H; ++h)
                for (int r = 0; r < slice_registers; ++r)
                    detail::store_lanes(acc + h * head_dim + d0 + r * key_lanes, row[h][r]);
        }
        // The rest of a head_dim that is not a multiple of row_slice.
        fold_tail<H>(scores, values, lo, hi, correction, acc, d0);
    }

    // Dimensions d0 .. head_dim of the band's H output rows, element by element: rescaled, then
    // every key's weight times its value added in key order (fold's and fold_one_query's tail).
    template <int H>
    void fold_tail(float const* scores, float const* values, int lo, int hi,
                   float const (&correction)[H], float* acc, int d0) const {
        int const head_dim = this->head_dim(), padded = padded_tile();
        if (d0 >= head_dim) return;
        for (int h = 0; h < H; ++h) {
            float* const out = acc + h * head_dim;
#pragma omp simd
            for (int d = d0; d < head_dim; ++d) out[d] *= correction[h];
            for (int j = lo; j <= hi; ++j) {
                float const p = scores[h * padded + j];
                float const* v = values + static_cast<std::size_t>(j) * head_dim;
#pragma omp simd
                for (int d = d0; d < head_dim; ++d) out[d] += p * v[d];
            }
        }
    }

    // fold for a block of one query (a decode step): head by head, its output row in registers
    // a slice of decode_slice_lanes registers at a time, every key of the tile added to the
    // slice before the next; with a head_dim of at most the slice's (SmolLM2's 64) each value
    // row is so read whole, in key order. The version before updated the band's output rows in
    // L1 key by key, whole value rows at a time: GCC 12 kept those rows in registers, on the
    // stack and in L1 at once (a spill and a store per register and key), and decode attention
    // from the L2 took 1.3-1.6 times as long (one query over 128 cached keys, old and new
    // alternated in one process, Zen 3, one thread: Gemma 3's shape 0.75 of the time, SmolLM2's
    // 0.62); over keys evicted from the L2 first, SmolLM2's 0.81-0.93, Gemma 3's 1.03-1.04.
    // Each dimension still rescales once and then adds its keys in order, a multiply and an add
    // as fold's (contracted alike): fold's bits.
    template <int H>
    void fold_one_query(float* scores, float const* values, int lo, int hi, float* maxima,
                        float* sums, float* acc) const {
        int const head_dim = this->head_dim(), padded = padded_tile();
        float correction[H];
        for (int h = 0; h < H; ++h)
            correction[h] = weigh(scores + h * padded, lo, hi, maxima[h], sums[h]);
        constexpr int slice = decode_slice_lanes * key_lanes;
        int d0 = 0;
        for (; d0 + slice <= head_dim; d0 += slice) {
            for (int h = 0; h < H; ++h)
                fold_head_slice<decode_slice_lanes>(scores + h * padded, values, lo, hi,
                                                    correction[h], acc + h * head_dim + d0, d0);
        }
        for (; d0 + key_lanes <= head_dim; d0 += key_lanes)
            for (int h = 0; h < H; ++h)
                fold_head_slice<1>(scores + h * padded, values, lo, hi, correction[h],
                                   acc + h * head_dim + d0, d0);
        // The rest of a head_dim that is not a multiple of key_lanes.
        fold_tail<H>(scores, values, lo, hi, correction, acc, d0);
    }
    // Registers of output a head's decode slice keeps: 64 dimensions on AVX2 (eight of AVX2's
    // sixteen registers, beside the value row's and the weight's), 64 on AVX-512 too.
    static constexpr int decode_slice_lanes = 4;

    // One head's output slice of R registers at `out` (dimensions d0 ..): rescaled by
    // `correction`, then p_j v_j added for the keys lo..hi in order.
    template <int R>
    void fold_head_slice(float const* scores, float const* values, int lo, int hi, float correction,
                         float* out, int d0) const {
        using detail::Lanes, detail::load_lanes, detail::multiply_add_lanes;
        int const head_dim = this->head_dim();
        Lanes row[R];
        for (int r = 0; r < R; ++r)
            row[r] = detail::scale_lanes(load_lanes(out + r * key_lanes), correction);
        for (int j = lo; j <= hi; ++j) {
            float const* const v = values + static_cast<std::size_t>(j) * head_dim + d0;
            float const p = scores[j];
            for (int r = 0; r < R; ++r)
                row[r] = multiply_add_lanes(p, load_lanes(v + r * key_lanes), row[r]);
        }
        for (int r = 0; r < R; ++r) detail::store_lanes(out + r * key_lanes, row[r]);
    }

#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
    // fold's slice of 8R dimensions at `acc` and `values` (rows head_dim apart) for the
    // band's H heads: each rescaled once, then every key's weight times its value row added in
    // key order, as fold's Lanes form adds them (a multiply and an add, contracted alike).
    template <int H, int R>
    void fold_slice_avx2(float const* scores, float const* values, int lo, int hi,
                         float const (&correction)[H], float* acc) const {
        int const head_dim = this->head_dim(), padded = padded_tile();
        __m256 row[H][R];
        for (int h = 0; h < H; ++h)
            for (int r = 0; r < R; ++r)
                row[h][r] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * head_dim + 8 * r),
                                          _mm256_set1_ps(correction[h]));
        for (int j = lo; j <= hi; ++j) {
            float const* const v = values + static_cast<std::size_t>(j) * head_dim;
            // The value row in registers once for the H heads where the outputs leave room
            // (the empty asm keeps GCC from folding the loads back into the multiply-adds;
            // Gemma 3's four heads, a layer's 512-token prefill: 12.4 -> 10.8 ms), else read
            // from memory by each multiply-add.
            __m256 value[R];
            for (int r = 0; r < R; ++r) value[r] = _mm256_loadu_ps(v + 8 * r);
            if constexpr (H * R + R + 1 <= 16)
                for (int r = 0; r < R; ++r) asm("" : "+x"(value[r]));
            for (int h = 0; h < H; ++h) {
                __m256 const p = _mm256_set1_ps(scores[h * padded + j]);
                for (int r = 0; r < R; ++r)
                    row[h][r] = _mm256_add_ps(row[h][r], _mm256_mul_ps(p, value[r]));
            }
        }
        for (int h = 0; h < H; ++h)
            for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + h * head_dim + 8 * r, row[h][r]);
    }
#endif

    [[no_unique_address]] HeadDim head_dim_;
    [[no_unique_address]] GroupSize group_size_;
    [[no_unique_address]] SlidingWindow sliding_window_;
    [[no_unique_address]] QueryScaleDim query_scale_dim_;
};

// The kernel with every dimension static: what the model instantiates per layer plan.
template <int head_dim, int group_size, int sliding_window = 0, int query_scale_dim = head_dim>
struct Attention {
    static_assert(head_dim > 0 && head_dim % 2 == 0, "Attention head_dim must be positive, even");
    static_assert(group_size > 0, "Attention group_size must be positive");
    static_assert(sliding_window >= 0, "Attention sliding_window must be 0 (off) or positive");
    static_assert(query_scale_dim > 0, "Attention query_scale_dim must be positive");

    using Kernel = AttentionKernel<StaticExtent<head_dim>, StaticExtent<group_size>,
                                   StaticExtent<sliding_window>, StaticExtent<query_scale_dim>>;
    static constexpr Kernel kernel{};

    static constexpr int kv_tile = kernel.kv_tile();
    static constexpr int query_block = kernel.query_block();
    static constexpr int state_rows = kernel.state_rows();
    static constexpr float score_scale = kernel.score_scale();
    static constexpr std::size_t scratch_floats = kernel.scratch_floats();

    static constexpr int blocks(int queries) { return kernel.blocks(queries); }

    template <kv::KvView View>
    static void attend_block(View const& view, int kv_head, AttentionChunk const& chunk, int block,
                             float* scratch, HeadSlice slice = {}) {
        kernel.attend_block(view, kv_head, chunk, block, scratch, slice);
    }
    template <kv::KvView View>
    static void attend(View const& view, int kv_heads, AttentionChunk const& chunk, int threads,
                       std::span<float> scratch) {
        kernel.attend(view, kv_heads, chunk, threads, scratch);
    }
    template <kv::KvView View>
    static void check_cached(View const& view, AttentionChunk const& chunk) {
        Kernel::check_cached(view, chunk);
    }
    static void require_scratch(std::span<float> scratch, int threads) {
        kernel.require_scratch(scratch, threads);
    }
};

}  // namespace tinfer::kernels
