// Tiled online-softmax attention against naive float64 softmax attention, and its batch
// invariance: a query's output is bitwise the same in a chunk, alone, and on any thread count.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/attention.hpp>
#include <tinfer/kv/kv_view.hpp>

#include "testing.hpp"

namespace tt = tinfer::testing;
namespace k = tinfer::kernels;

namespace {

constexpr double eps32 = std::numeric_limits<float>::epsilon();

// A KV view over plain vectors: independent of the library's caches.
template <int head_dim>
struct VectorView {
    std::vector<float> keys, values;  // [kv_heads][tokens][head_dim]
    int cached = 0;
    int tokens() const { return cached; }
    void load_keys(int kv_head, int first, int count, float* out) const {
        load(keys, kv_head, first, count, out);
    }
    void load_values(int kv_head, int first, int count, float* out) const {
        load(values, kv_head, first, count, out);
    }
    void load(std::vector<float> const& from, int kv_head, int first, int count, float* out) const {
        // Loads run on the kernel's OpenMP threads and Boost.Test's assertions are not thread
        // safe (concurrent BOOST_REQUIREs crashed it now and then), so an out-of-range load
        // aborts the run instead.
        if (first < 0 || first + count > cached) std::abort();
        std::copy_n(from.data() + (static_cast<std::size_t>(kv_head) * cached + first) * head_dim,
                    static_cast<std::size_t>(count) * head_dim, out);
    }
};
static_assert(tinfer::kv::KvView<VectorView<64>>);

template <int head_dim, int group, int window, int kv_heads_ = 2, int scale_dim = head_dim>
struct Case {
    using Kernel = k::Attention<head_dim, group, window, scale_dim>;
    static constexpr int kv_heads = kv_heads_;
    static constexpr int heads = kv_heads * group;
    static constexpr std::size_t width = static_cast<std::size_t>(heads) * head_dim;

    VectorView<head_dim> view;
    std::vector<float> q;  // [queries][heads][head_dim], row stride `width`

    std::vector<float> run(int first_position, int queries, int threads,
                           float const* q_rows) const {
        std::vector<float> out(static_cast<std::size_t>(queries) * width);
        tt::poison(std::span<float>(out));
        std::vector<float> scratch(Kernel::scratch_floats * threads);
        k::AttentionChunk const chunk{first_position, queries, q_rows, width, out.data(), width};
        Kernel::attend(view, kv_heads, chunk, threads, scratch);
        return out;
    }

    // The same chunk task by task, each KV head's group of query heads cut into slices of
    // `slice` heads (the last shorter), as the model plans decode steps with fewer tasks than
    // threads.
    std::vector<float> run_in_slices(int first_position, int queries, int slice,
                                     float const* q_rows) const {
        std::vector<float> out(static_cast<std::size_t>(queries) * width);
        tt::poison(std::span<float>(out));
        std::vector<float> scratch(Kernel::scratch_floats);
        k::AttentionChunk const chunk{first_position, queries, q_rows, width, out.data(), width};
        for (int kv_head = 0; kv_head < kv_heads; ++kv_head)
            for (int block = 0; block < Kernel::blocks(queries); ++block)
                for (int first = 0; first < group; first += slice)
                    Kernel::attend_block(view, kv_head, chunk, block, scratch.data(),
                                         {first, std::min(slice, group - first)});
        return out;
    }

    // One query at `position` as a split-KV decode step runs it: every segment on its own
    // (attend_segment, each KV head's group cut into slices of `slice` heads), in reverse order
    // as threads may finish them, then folded (merge_segments).
    std::vector<float> run_in_segments(int position, int slice, float const* q_row) const {
        std::vector<float> out(width);
        tt::poison(std::span<float>(out));
        std::vector<float> scratch(Kernel::scratch_floats);
        constexpr auto kernel = Kernel::kernel;
        int const segments = kernel.segments(position);
        std::size_t const per_segment =
            static_cast<std::size_t>(group) * kernel.segment_state_floats();
        std::vector<float> states(per_segment * segments);
        tt::poison(std::span<float>(states));
        k::AttentionChunk const chunk{position, 1, q_row, width, out.data(), width};
        for (int kv_head = 0; kv_head < kv_heads; ++kv_head) {
            for (int s = segments - 1; s >= 0; --s)
                for (int first = 0; first < group; first += slice)
                    kernel.attend_segment(view, kv_head, chunk, s, scratch.data(),
                                          states.data() + s * per_segment,
                                          {first, std::min(slice, group - first)});
            kernel.merge_segments(states.data(), segments, kv_head, chunk);
        }
        return out;
    }
};

// Bound of one output element o_d = sum_j p_j v_jd. A score s_j = q.k_j / sqrt(d) is off by at
// most delta = (d + 2) u sum_i |q_i k_ji| / sqrt(d) (the dot, the scale constant and the
// product), which moves p_j relatively by at most 2 delta (its own and the normaliser's share).
// exp2 adds 2 u, the subtraction of the running maximum |s| u, each tile's rescale u, each
// segment's merge u (its rescale) and u (its add), the sums over n keys n u each and the final
// division u. So |o_d - ref_d| <= (2 delta + (2n + 2 tiles + 2 segments + max|s| log2(e) + 4) u)
// sum_j p_j |v_jd|; we allow twice that (eps for u).
template <int head_dim, int group, int window, int kv_heads, int scale_dim>
double reference_error(Case<head_dim, group, window, kv_heads, scale_dim> const& c,
                       int first_position, int queries, std::vector<float> const& out) {
    using C = Case<head_dim, group, window, kv_heads, scale_dim>;
    double worst = 0;
    for (int i = 0; i < queries; ++i) {
        int const position = first_position + i;
        int const lo = window > 0 ? std::max(0, position - window + 1) : 0;
        int const n = position - lo + 1;
        int const tiles = position / C::Kernel::kv_tile - lo / C::Kernel::kv_tile + 1;
        int const segments =
            position / C::Kernel::kernel.kv_segment() - lo / C::Kernel::kernel.kv_segment() + 1;
        for (int h = 0; h < C::heads; ++h) {
            int const kv_head = h / group;
            float const* q = c.q.data() + (first_position + i) * C::width + h * head_dim;
            std::vector<double> scores(n);
            double delta = 0, max_score = -1e300, max_abs_score = 0;
            for (int j = 0; j < n; ++j) {
                float const* key =
                    c.view.keys.data() +
                    (static_cast<std::size_t>(kv_head) * c.view.cached + lo + j) * head_dim;
                double dot = 0, magnitude = 0;
                for (int d = 0; d < head_dim; ++d) {
                    dot += double(q[d]) * key[d];
                    magnitude += std::abs(double(q[d]) * key[d]);
                }
                scores[j] = dot / std::sqrt(double(scale_dim));
                delta = std::max(delta,
                                 (head_dim + 2) * eps32 * magnitude / std::sqrt(double(scale_dim)));
                max_score = std::max(max_score, scores[j]);
                max_abs_score = std::max(max_abs_score, std::abs(scores[j]));
            }
            double total = 0;
            for (double& s : scores) total += (s = std::exp(s - max_score));
            double const rtol =
                2 * delta +
                (2.0 * n + 2 * tiles + 2 * segments + max_abs_score * 1.4427 + 4) * eps32;
            for (int d = 0; d < head_dim; ++d) {
                double ref = 0, magnitude = 0;
                for (int j = 0; j < n; ++j) {
                    double const v =
                        c.view.values[(static_cast<std::size_t>(kv_head) * c.view.cached + lo + j) *
                                          head_dim +
                                      d];
                    ref += scores[j] / total * v;
                    magnitude += scores[j] / total * std::abs(v);
                }
                double const got = out[i * C::width + h * head_dim + d];
                if (std::isnan(got)) return std::numeric_limits<double>::infinity();
                worst = std::max(worst, std::abs(got - ref) / (rtol * magnitude));
            }
        }
    }
    return worst;
}

// A cache of `cached` positions and queries for all of them; checks a prefill from position 0,
// a chunk after a cached prefix, and a decode, then batch invariance.
template <int head_dim, int group, int window, int kv_heads = 2, int scale_dim = head_dim>
void check_attention(std::uint64_t seed) {
    using C = Case<head_dim, group, window, kv_heads, scale_dim>;
    BOOST_TEST_MESSAGE("head_dim " << head_dim << " group " << group << " window " << window
                                   << " kv_heads " << kv_heads << " scale_dim " << scale_dim);
    auto rng = tt::seeded_rng(seed);
    C c;
    c.view.cached = 301;
    std::size_t const kv_floats = static_cast<std::size_t>(C::kv_heads) * c.view.cached * head_dim;
    // Scores of a few units, so the softmax is neither flat nor one-hot.
    c.view.keys = tt::random_floats(rng, kv_floats, -2, 2);
    c.view.values = tt::random_floats(rng, kv_floats, -1, 1);
    c.q = tt::random_floats(rng, c.view.cached * C::width, -2, 2);

    struct Chunk {
        int first_position, queries;
    };
    for (Chunk const chunk : {Chunk{0, 150}, Chunk{200, 37}, Chunk{300, 1}}) {
        float const* q_rows = c.q.data() + chunk.first_position * C::width;
        std::vector<float> const out = c.run(chunk.first_position, chunk.queries, 2, q_rows);
        double const error = reference_error(c, chunk.first_position, chunk.queries, out);
        BOOST_TEST(error <= 1.0, "chunk at " << chunk.first_position << " of " << chunk.queries
                                             << ": worst scaled error " << error);

        std::vector<float> const one_thread = c.run(chunk.first_position, chunk.queries, 1, q_rows);
        BOOST_TEST(std::memcmp(one_thread.data(), out.data(), out.size() * sizeof(float)) == 0);
        for (int i = 0; i < chunk.queries; i += 7) {
            std::vector<float> const alone =
                c.run(chunk.first_position + i, 1, 1, q_rows + i * C::width);
            BOOST_TEST(
                std::memcmp(alone.data(), out.data() + i * C::width, C::width * sizeof(float)) == 0,
                "query at " << chunk.first_position + i << " alone differs from its chunk");
            for (int slice : {group, 1}) {
                std::vector<float> const split =
                    c.run_in_segments(chunk.first_position + i, slice, q_rows + i * C::width);
                BOOST_TEST(std::memcmp(split.data(), out.data() + i * C::width,
                                       C::width * sizeof(float)) == 0,
                           "query at " << chunk.first_position + i << " split into segments ("
                                       << slice << "-head slices) differs from its chunk");
            }
        }
        // Slices of the group: every output written (the poison gone), the same bits.
        for (int slice = 1; slice < group; ++slice) {
            std::vector<float> const sliced =
                c.run_in_slices(chunk.first_position, chunk.queries, slice, q_rows);
            BOOST_TEST(std::memcmp(sliced.data(), out.data(), out.size() * sizeof(float)) == 0,
                       "chunk at " << chunk.first_position << " in slices of " << slice
                                   << " heads differs from the whole group");
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention)

BOOST_AUTO_TEST_CASE(smollm2_shape_gqa_3) {
    check_attention<64, 3, 0>(1);
}
BOOST_AUTO_TEST_CASE(multi_head_group_1) {
    check_attention<32, 1, 0>(2);
}
BOOST_AUTO_TEST_CASE(gqa_group_8_head_dim_128) {
    check_attention<128, 8, 0>(3);
}
BOOST_AUTO_TEST_CASE(sliding_window) {
    check_attention<64, 3, 37>(4);
    check_attention<16, 2, 100>(5);
}

// MQA: a single KV head serves every query head (kv_heads = 1), here SmolLM2's 9 query heads
// on head_dim 64, global and sliding; every head reads the one KV head, and a group larger than
// any GQA case above is run whole.
BOOST_AUTO_TEST_CASE(mqa_one_kv_head_serves_every_query_head) {
    check_attention<64, 9, 0, 1>(9);
    check_attention<64, 9, 37, 1>(10);
}

// Gemma 3 270M's shape: MQA (one KV head for 4 query heads), head_dim 256, global and
// sliding; and a query scale other than 1/sqrt(head_dim) (query_pre_attn_scalar).
BOOST_AUTO_TEST_CASE(mqa_head_dim_256_gemma3_shape) {
    check_attention<256, 4, 0, 1>(6);
    check_attention<256, 4, 37, 1>(7);
}
// head_dim not a multiple of 16: the last dimensions go through the score chains' and the key
// transpose's remainder paths, sliding and global.
BOOST_AUTO_TEST_CASE(head_dim_not_a_multiple_of_16) {
    check_attention<44, 3, 0>(11);
    check_attention<90, 2, 37>(12);
}
BOOST_AUTO_TEST_CASE(query_pre_attn_scalar) {
    check_attention<64, 2, 0, 1, 144>(8);
}

BOOST_AUTO_TEST_CASE(refuses_a_query_whose_key_is_not_cached) {
    VectorView<32> view;
    view.cached = 4;
    view.keys.assign(4 * 32, 0.5f);
    view.values.assign(4 * 32, 0.5f);
    std::vector<float> q(32, 0.1f), out(32);
    std::vector<float> scratch(k::Attention<32, 1>::scratch_floats);
    k::AttentionChunk const chunk{4, 1, q.data(), 32, out.data(), 32};
    BOOST_CHECK_THROW((k::Attention<32, 1>::attend(view, 1, chunk, 1, scratch)), tinfer::Error);
}

// A view that records the positions attention loads and the run it asks to prefetch.
struct RecordingView {
    static constexpr int head_dim = 16;
    int cached = 0;
    mutable int loaded_first = std::numeric_limits<int>::max(), loaded_end = 0;
    mutable int prefetch_first = -1, prefetch_count = 0, prefetch_calls = 0;
    int tokens() const { return cached; }
    void load_keys(int /*kv_head*/, int first, int count, float* out) const {
        load(first, count, out);
    }
    void load_values(int /*kv_head*/, int first, int count, float* out) const {
        load(first, count, out);
    }
    void load(int first, int count, float* out) const {
        loaded_first = std::min(loaded_first, first);
        loaded_end = std::max(loaded_end, first + count);
        std::fill_n(out, static_cast<std::size_t>(count) * head_dim, 0.25f);
    }
    void prefetch(int /*kv_head*/, int first, int count) const {
        prefetch_first = first;
        prefetch_count = count;
        ++prefetch_calls;
    }
};
static_assert(tinfer::kv::KvPrefetchView<RecordingView>);

// prefetch_block asks for the first max_positions of the cached positions a query block
// attends to (by brute force over its queries and the window), and attend_block then loads
// every one of them: random chunks, blocks, windows and cache fill, some with the step's own
// keys not yet cached (prefetch runs before they are written).
BOOST_AUTO_TEST_CASE(prefetch_asks_for_the_keys_the_block_reads) {
    auto rng = tt::seeded_rng(13);
    auto const uniform = [&](int lo, int hi) {
        return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    constexpr int head_dim = RecordingView::head_dim, group = 2;
    int asked = 0;
    for (int trial = 0; trial < 400; ++trial) {
        int const window = uniform(0, 3) == 0 ? 0 : uniform(1, 40);
        k::AttentionKernel const kernel(tinfer::DynamicExtent{head_dim},
                                        tinfer::DynamicExtent{group}, tinfer::DynamicExtent{window},
                                        tinfer::DynamicExtent{head_dim});
        int const first_position = uniform(0, 100), queries = uniform(1, 70);
        int const block = uniform(0, kernel.blocks(queries) - 1);
        int const max_positions = uniform(0, 90);
        RecordingView view;
        view.cached = uniform(0, first_position + queries);
        std::vector<float> q(static_cast<std::size_t>(queries) * group * head_dim, 0.5f);
        std::vector<float> out(q.size());
        k::AttentionChunk const chunk{first_position,   queries,    q.data(),
                                      group * head_dim, out.data(), group * head_dim};

        int const q_begin = first_position + block * kernel.query_block();
        int const q_end = first_position + std::min(queries, (block + 1) * kernel.query_block());
        std::vector<int> expected;
        for (int p = 0; p < view.cached && static_cast<int>(expected.size()) < max_positions; ++p) {
            bool seen = false;
            for (int query = q_begin; query < q_end; ++query)
                seen |= p <= query && (window == 0 || p >= query - window + 1);
            if (seen) expected.push_back(p);
        }
        int const count = kernel.prefetch_block(view, 0, chunk, block, max_positions);
        BOOST_TEST_CONTEXT("window " << window << ", first position " << first_position
                                     << ", queries " << queries << ", block " << block
                                     << ", cached " << view.cached << ", at most "
                                     << max_positions) {
            BOOST_TEST(count == static_cast<int>(expected.size()));
            BOOST_TEST(view.prefetch_calls == (expected.empty() ? 0 : 1));
            if (expected.empty()) continue;
            ++asked;
            BOOST_TEST(view.prefetch_count == count);
            BOOST_TEST(view.prefetch_first == expected.front());
            BOOST_TEST(expected.back() - expected.front() + 1 == count);  // one run

            view.cached = q_end;  // attention needs the block's own keys
            std::vector<float> scratch(kernel.scratch_floats());
            kernel.attend_block(view, 0, chunk, block, scratch.data());
            BOOST_TEST(view.loaded_first <= view.prefetch_first);
            BOOST_TEST(view.loaded_end >= view.prefetch_first + view.prefetch_count);
        }
    }
    BOOST_TEST(asked > 100);  // most trials ask for something
}

BOOST_AUTO_TEST_SUITE_END()
