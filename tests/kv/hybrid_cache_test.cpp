// The hybrid paged cache (sliding-window and global layers in one pool): the layer groups of
// Gemma 3 and of configs without sliding layers (one group, the cache as before); a sliding
// layer's blocks stay bounded while a sequence grows through many windows; attention and the
// H2O score pass over the hybrid cache give bitwise what they give over the contiguous cache,
// though their tiles load released positions; the capacity answers match what reserve does;
// and the KV bytes a Gemma 3 sequence holds, hybrid against every layer full.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <vector>

#include <tinfer/kernels/attention.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/attention_scores.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::kv;

namespace {

// Layers 0, 1, 3, 4 slide over 8 tokens; 2 and 5 are global.
constexpr ModelConfig hybrid{.layers = 6,
                             .hidden = 64,
                             .heads = 4,
                             .kv_heads = 2,
                             .head_dim = 16,
                             .ffn = 64,
                             .vocab = 16,
                             .max_context = 1024,
                             .weights = DType::f32,
                             .sliding_window = 8,
                             .arch = {.global_every = 3}};

// ---- layer groups ----
using Gemma16 = PagedKvCache<presets::gemma3_270m, 16>;
static_assert(Gemma16::has_sliding && Gemma16::sliding_window == 512);
static_assert(Gemma16::group_count == 6 && Gemma16::layers_per_group == 3);
// Layers 5, 11, 17 share the global group; every other layer is in a sliding one.
static_assert(Gemma16::group_of(5) == Gemma16::group_of(11) &&
              Gemma16::group_of(11) == Gemma16::group_of(17) &&
              !Gemma16::is_sliding_group(Gemma16::group_of(5)));
static_assert(Gemma16::is_sliding_group(Gemma16::group_of(0)) &&
              Gemma16::is_sliding_group(Gemma16::group_of(16)));
// A block: 3 layers x 1 KV head x 16 tokens x (K + V) x 256 floats.
static_assert(Gemma16::bytes_per_block == 3 * 16 * 2 * 256 * 4);
static_assert(Gemma16::bytes_per_token == presets::gemma3_270m.kv_bytes_per_token());
// Without sliding layers: one group holding every layer, the layout as it always was.
using Smol16 = PagedKvCache<presets::smollm2_135m, 16>;
static_assert(Smol16::group_count == 1 && !Smol16::has_sliding && Smol16::sliding_window == 0);
static_assert(Smol16::bytes_per_block == 16 * 46080);
static_assert(Smol16::blocks_for(100) == 7 && Smol16::held_blocks_for(100) == 7 &&
              Smol16::min_blocks_for(100) == 7);
// Mistral: every layer slides, one group.
static_assert(PagedKvCache<presets::mistral_7b, 16>::group_count == 1 &&
              PagedKvCache<presets::mistral_7b, 16>::has_sliding);
using Hybrid4 = PagedKvCache<hybrid, 4>;
static_assert(Hybrid4::group_count == 3 && Hybrid4::layers_per_group == 2);
// 100 positions written: 25 global blocks, and the sliding groups' blocks from position 92
// (100 - 8 + 1 = 93 lies in block 23): 2 each.
static_assert(Hybrid4::window_first_block(100) == 23);
static_assert(Hybrid4::held_blocks_for(100) == 25 + 2 * 2);
static_assert(Hybrid4::blocks_for(100) == 3 * 25);

std::vector<float> kv_of(int seq, int layer, int position, bool keys) {
    // A pure function of its arguments, never zero.
    std::vector<float> v(static_cast<std::size_t>(hybrid.kv_width()));
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = 0.25f + static_cast<float>((seq * 131 + layer * 31 + position * 7 +
                                           static_cast<int>(i) * 3 + (keys ? 0 : 17)) %
                                          97) /
                           97.0f;
    }
    return v;
}

template <class Cache>
void write_position(Cache& cache, int seq, int position) {
    for (int layer = 0; layer < hybrid.layers; ++layer) {
        auto const k = kv_of(seq, layer, position, true);
        auto const v = kv_of(seq, layer, position, false);
        cache.write(seq, layer, position, k.data(), v.data());
    }
}

// Sliding blocks a sequence holds per sliding group.
template <class Cache>
int held_sliding_blocks(Cache const& cache, int seq, int group) {
    auto const table = cache.block_table(seq);
    int held = 0;
    for (std::size_t i = static_cast<std::size_t>(group); i < table.size();
         i += Cache::group_count) {
        held += table[i] != Cache::dropped ? 1 : 0;
    }
    return held;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_hybrid_cache)

// 25 windows, one token per step, then the same in chunks of 5: the sliding groups hold at
// most the blocks of one window plus the one being filled (plus the chunk), the global group
// every block, and the pool's use is exactly that.
BOOST_AUTO_TEST_CASE(a_sliding_layers_memory_per_sequence_is_bounded) {
    constexpr int window = hybrid.sliding_window;
    constexpr int length = 25 * window;
    for (int const chunk : {1, 5}) {
        Hybrid4 cache(Hybrid4::bytes_per_block * 400);
        int const seq = cache.admit(length);
        int const bound = (window - 1 + chunk + 3) / 4 + 1;  // blocks over window - 1 + chunk
        int peak = 0;
        for (int written = 0; written < length; written += chunk) {
            int const end = std::min(length, written + chunk);
            BOOST_REQUIRE(cache.reserve(seq, end));
            int sliding = 0;
            for (int g = 0; g < Hybrid4::group_count; ++g) {
                int const held = held_sliding_blocks(cache, seq, g);
                if (Hybrid4::is_sliding_group(g)) {
                    BOOST_REQUIRE_LE(held, bound);
                    peak = std::max(peak, held);
                    sliding += held;
                } else {
                    BOOST_REQUIRE_EQUAL(held, Hybrid4::logical_blocks_for(end));
                }
            }
            BOOST_REQUIRE_EQUAL(cache.used_blocks(), Hybrid4::logical_blocks_for(end) + sliding);
            for (int p = written; p < end; ++p) write_position(cache, seq, p);
        }
        BOOST_TEST(peak == bound);  // the bound is reached, not loose
        BOOST_TEST(held_sliding_blocks(cache, seq, 0) <= bound);
        BOOST_TEST(cache.dropped_blocks(seq) == Hybrid4::window_first_block(length - chunk));
        cache.release(seq);
        BOOST_TEST(cache.free_blocks() == cache.total_blocks());
    }
}

// The capacity answers the scheduler relies on: blocks_needed is what reserve takes (net of
// the sliding blocks it gives back), and a request that the pool can serve one token at a
// time is admitted even when a one-shot prefill of it would not fit.
BOOST_AUTO_TEST_CASE(capacity_answers_match_what_reserve_takes) {
    constexpr int length = 200;
    // Enough for 200 tokens grown a token at a time, far from 3 x 50 blocks for a one-shot
    // prefill of all three groups.
    int const pool = Hybrid4::min_blocks_for(length + 1);
    BOOST_TEST(pool < Hybrid4::blocks_for(length));
    Hybrid4 cache(Hybrid4::bytes_per_block * static_cast<std::size_t>(pool));
    BOOST_CHECK_THROW(cache.admit(length + 40), RequestError);
    int const seq = cache.admit(length);
    for (int p = 0; p < length; ++p) {
        int const needed = cache.blocks_needed(seq, p + 1);
        int const free = cache.free_blocks();
        BOOST_REQUIRE(needed <= free);
        BOOST_REQUIRE(cache.reserve(seq, p + 1));
        // Net: what it allocated less what it gave back, never below zero.
        int const taken = free - cache.free_blocks();
        BOOST_REQUIRE(taken <= needed);
        BOOST_REQUIRE(needed == 0 || taken == needed);
        write_position(cache, seq, p);
    }
    BOOST_TEST(cache.used_blocks() <= pool);
    // Held: what export writes and import takes.
    std::vector<std::byte> bytes;
    BOOST_TEST(cache.export_blocks(seq, bytes) == length);
    BOOST_TEST(bytes.size() == static_cast<std::size_t>(Hybrid4::held_blocks_for(length)) *
                                   Hybrid4::bytes_per_block);
    cache.release(seq);
    auto const back = cache.import_blocks(bytes, length, length + 1);
    BOOST_REQUIRE(back.has_value());
    BOOST_TEST(cache.used_blocks() == Hybrid4::held_blocks_for(length));
    // What the engine charges a swapped request: the import, then the growth.
    BOOST_REQUIRE(cache.reserve(*back, length + 1));
    BOOST_TEST(cache.used_blocks() == Hybrid4::blocks_to_resume(length, length + 1));
    static_assert(Hybrid4::blocks_to_resume(100, 101) == Hybrid4::held_blocks_for(100) + 3);
    static_assert(Hybrid4::blocks_to_resume(100, 100) == Hybrid4::held_blocks_for(100));
    cache.release(*back);
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
}

// Attention over a sliding layer loads whole tiles (kv_tile = 256 keys at head_dim 16) from
// position 0, far below the window, where the hybrid cache has released the blocks; the
// released positions read as zeros and are masked, so the output is bitwise the contiguous
// cache's. Likewise the H2O probability pass, which loads every key from 0.
BOOST_AUTO_TEST_CASE(attention_over_released_blocks_equals_the_contiguous_cache) {
    constexpr int length = 300;
    using Attention =
        kernels::Attention<hybrid.head_dim, hybrid.group_size(), hybrid.sliding_window>;
    static_assert(Attention::kv_tile > hybrid.sliding_window);
    Hybrid4 paged(Hybrid4::bytes_per_block * 400);
    ContiguousKvCache<hybrid> contiguous(1, length + 1);
    int const seq = paged.admit(length + 1);
    int const queries = 5;  // the last five positions, one chunk (reserved at once, as the
                            // model does: their windows start before the last one's)
    for (int p = 0; p < length; ++p) {
        if (p <= length - queries)
            BOOST_REQUIRE(paged.reserve(seq, p < length - queries ? p + 1 : length));
        write_position(paged, seq, p);
        write_position(contiguous, 0, p);
    }
    BOOST_REQUIRE(paged.dropped_blocks(seq) > 0);
    auto rng = testing::seeded_rng(41);
    auto const q =
        testing::random_floats(rng, static_cast<std::size_t>(queries) * hybrid.q_width());
    std::vector<float> scratch(Attention::scratch_floats);
    for (int layer = 0; layer < hybrid.layers; ++layer) {
        if (hybrid.layer_kind(layer) != LayerKind::sliding) continue;
        std::vector<float> out_paged(q.size()), out_contiguous(q.size());
        testing::poison(std::span<float>(out_paged));
        testing::poison(std::span<float>(out_contiguous));
        auto chunk = [&](std::vector<float>& out) {
            return kernels::AttentionChunk{
                .first_position = length - queries,
                .queries = queries,
                .q = q.data(),
                .q_stride = static_cast<std::size_t>(hybrid.q_width()),
                .out = out.data(),
                .out_stride = static_cast<std::size_t>(hybrid.q_width())};
        };
        auto const paged_view = paged.view(seq, layer);
        auto const contiguous_view = contiguous.view(0, layer);
        for (int h = 0; h < hybrid.kv_heads; ++h) {
            for (int b = 0; b < Attention::blocks(queries); ++b) {
                Attention::attend_block(paged_view, h, chunk(out_paged), b, scratch.data());
                Attention::attend_block(contiguous_view, h, chunk(out_contiguous), b,
                                        scratch.data());
            }
        }
        BOOST_TEST(std::memcmp(out_paged.data(), out_contiguous.data(),
                               out_paged.size() * sizeof(float)) == 0,
                   "layer " << layer);
        std::vector<float> scores_paged(length, 0.0f), scores_contiguous(length, 0.0f);
        model::add_attention_probabilities<hybrid.head_dim, hybrid.group_size(),
                                           hybrid.sliding_window>(paged_view, hybrid.kv_heads,
                                                                  chunk(out_paged), scores_paged);
        model::add_attention_probabilities<hybrid.head_dim, hybrid.group_size(),
                                           hybrid.sliding_window>(
            contiguous_view, hybrid.kv_heads, chunk(out_contiguous), scores_contiguous);
        BOOST_TEST(std::memcmp(scores_paged.data(), scores_contiguous.data(),
                               scores_paged.size() * sizeof(float)) == 0,
                   "layer " << layer);
    }
}

// Token eviction on the hybrid cache: a policy that keeps the last window - 1 tokens (here
// sinks + recent, as AttentionSinks) compacts every layer; one that would put a released
// position inside the new window is refused and changes nothing.
BOOST_AUTO_TEST_CASE(retain_slots_keeps_the_window_and_refuses_released_positions) {
    constexpr int length = 100;
    constexpr int window = hybrid.sliding_window;
    Hybrid4 cache(Hybrid4::bytes_per_block * 200);
    int const seq = cache.admit(length + 10);
    for (int p = 0; p < length; ++p) {
        BOOST_REQUIRE(cache.reserve(seq, p + 1));
        write_position(cache, seq, p);
    }
    std::vector<int> too_few = {0, 1, 2, 3, length - 2, length - 1};  // sinks inside the window
    std::vector<BlockId> const before(cache.block_table(seq).begin(), cache.block_table(seq).end());
    BOOST_CHECK_THROW(cache.retain_slots(seq, too_few), Error);
    BOOST_TEST(std::ranges::equal(cache.block_table(seq), before));
    std::vector<int> kept = {0, 1, 2, 3};
    for (int p = length - 20; p < length; ++p) kept.push_back(p);
    cache.retain_slots(seq, kept);
    int const n = static_cast<int>(kept.size());
    BOOST_TEST(cache.tokens(seq) == n);
    std::vector<float> out(static_cast<std::size_t>(n) * hybrid.head_dim);
    for (int layer = 0; layer < hybrid.layers; ++layer) {
        bool const sliding = hybrid.layer_kind(layer) == LayerKind::sliding;
        auto const view = cache.view(seq, layer);
        view.load_keys(1, 0, n, out.data());
        int const first = sliding ? n - window + 1 : 0;
        for (int i = first; i < n; ++i) {
            auto const expected = kv_of(seq, layer, kept[static_cast<std::size_t>(i)], true);
            BOOST_TEST(
                std::memcmp(out.data() + i * hybrid.head_dim, expected.data() + hybrid.head_dim,
                            hybrid.head_dim * sizeof(float)) == 0,
                "layer " << layer << " slot " << i);
        }
    }
    cache.release(seq);
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
}

// A prompt's blocks offered right after its prefill keep the window at its end: a second
// request with the same prompt reuses all of its full blocks, starting without the sliding
// blocks before that window; after the first one has grown far past it and only then offered
// its blocks, those sliding blocks are gone and only a short prefix is reusable.
BOOST_AUTO_TEST_CASE(a_cached_prefix_is_reused_only_while_its_window_is_held) {
    constexpr int prompt_length = 41;
    Hybrid4 cache(Hybrid4::bytes_per_block * 300);
    std::vector<int> prompt(prompt_length);
    for (int i = 0; i < prompt_length; ++i) prompt[static_cast<std::size_t>(i)] = i % 16;
    auto const first = cache.admit(prompt, 200);
    BOOST_REQUIRE(cache.reserve(first.seq, prompt_length));
    for (int p = 0; p < prompt_length; ++p) write_position(cache, first.seq, p);
    cache.cache_prefix(first.seq, prompt);
    auto const second = cache.admit(prompt, 200);
    BOOST_TEST(second.cached_tokens == 40);
    BOOST_TEST(cache.dropped_blocks(second.seq) == Hybrid4::window_first_block(40));
    cache.release(second.seq);
    // Without the early offer: a fresh cache, the first request grows to 120 and then offers.
    Hybrid4 late(Hybrid4::bytes_per_block * 300);
    auto const a = late.admit(prompt, 200);
    std::vector<int> context = prompt;
    for (int p = 0; p < 120; ++p) {
        BOOST_REQUIRE(late.reserve(a.seq, p + 1));
        write_position(late, a.seq, p);
        if (p >= prompt_length) context.push_back(p % 16);
    }
    late.cache_prefix(a.seq, context);
    auto const b = late.admit(prompt, 200);
    // The sliding blocks the tree got are those around position 120: the window of no
    // prefix of the prompt is complete, so nothing is reusable.
    BOOST_TEST(b.cached_tokens == 0);
    late.release(a.seq);
    late.release(b.seq);
    late.evict_cached(late.total_blocks());
    BOOST_TEST(late.free_blocks() == late.total_blocks());
    cache.release(first.seq);
    cache.evict_cached(cache.total_blocks());
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
}

// KV bytes one Gemma 3 270M sequence holds at 1K, 8K and 32K tokens (blocks of 16, the
// engine's default), from the cache's own accounting: a real hybrid cache grown to each
// length a token at a time (its used blocks right after the last write), against every layer
// kept in full (blocks_for of the same shape without a sliding window). Printed as the table
// in docs/kv-cache.md (--log_level=message).
template <class Codec>
void gemma_bytes(char const* codec_name, std::ostringstream& table) {
    constexpr ModelConfig gemma = presets::gemma3_270m;
    constexpr ModelConfig gemma_full = [] {
        ModelConfig c = presets::gemma3_270m;
        c.sliding_window = 0;
        c.arch.global_every = 0;
        return c;
    }();
    using Hybrid = PagedKvCache<gemma, 16, Codec>;
    using Full = PagedKvCache<gemma_full, 16, Codec>;
    static_assert(Full::group_count == 1 && Hybrid::group_count == 6);
    constexpr int longest = 32768;
    Hybrid cache(Hybrid::bytes_per_block *
                 static_cast<std::size_t>(Hybrid::min_blocks_for(longest) + 1));
    int const seq = cache.admit(longest);
    std::vector<float> const k(gemma.kv_width(), 0.5f), v(gemma.kv_width(), -0.5f);
    int written = 0;
    for (int const tokens : {1024, 8192, 32768}) {
        for (; written < tokens; ++written) {
            BOOST_REQUIRE(cache.reserve(seq, written + 1));
            for (int layer = 0; layer < gemma.layers; ++layer)
                cache.write(seq, layer, written, k.data(), v.data());
        }
        std::int64_t const hybrid_bytes =
            static_cast<std::int64_t>(cache.used_blocks()) * Hybrid::bytes_per_block;
        std::int64_t const full_bytes =
            static_cast<std::int64_t>(Full::blocks_for(tokens)) * Full::bytes_per_block;
        BOOST_TEST(cache.used_blocks() <= Hybrid::held_blocks_for(tokens) + Hybrid::group_count);
        BOOST_TEST(full_bytes == static_cast<std::int64_t>(gemma.kv_bytes(tokens, Codec::dtype)));
        table << "| " << codec_name << " | " << tokens << " | " << full_bytes << " | "
              << hybrid_bytes << " | " << std::fixed << std::setprecision(2)
              << static_cast<double>(full_bytes) / static_cast<double>(hybrid_bytes) << "x |\n";
    }
}

BOOST_AUTO_TEST_CASE(gemma3_kv_bytes_per_sequence_hybrid_against_every_layer_full) {
    std::ostringstream table;
    table << "| KV codec | tokens | every layer full (bytes) | hybrid (bytes) | saving |\n"
          << "|---|---|---|---|---|\n";
    gemma_bytes<Fp32Codec>("f32", table);
    gemma_bytes<Bf16Codec>("bf16", table);
    BOOST_TEST_MESSAGE(table.str());
}

BOOST_AUTO_TEST_SUITE_END()
