// PagedKvCache: the bytes of a block computed at compile time; views that gather through the
// block table and return exactly the floats written (fp32) or the codec's round trip; fork
// and copy-on-write; prefix reuse; running out of blocks; refusing what can never fit.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::kv;

namespace {

constexpr ModelConfig tiny{.layers = 2,
                           .hidden = 64,
                           .heads = 4,
                           .kv_heads = 2,
                           .head_dim = 32,
                           .ffn = 128,
                           .vocab = 100,
                           .max_context = 512,
                           .weights = DType::f32};
constexpr int kv_width = tiny.kv_width();

// ---- bytes per block, from the shape and the codecs ----
// layers x kv_heads x block_size x (K bytes + V bytes per vector), scales included.
using SmolPaged16 = PagedKvCache<presets::smollm2_135m, 16>;
static_assert(SmolPaged16::bytes_per_token == 30 * 3 * (64 * 4 + 64 * 4));
static_assert(SmolPaged16::bytes_per_token == presets::smollm2_135m.kv_bytes_per_token());
static_assert(SmolPaged16::bytes_per_block == 16 * 46080);
using Llama7bFp16 = PagedKvCache<presets::llama2_7b, 16, Fp16Codec>;
static_assert(Llama7bFp16::bytes_per_token == presets::llama2_7b.kv_bytes_per_token(DType::f16));
static_assert(Llama7bFp16::bytes_per_block == 16 * 512 * 1024);
// int8 keys (a float scale per token and head) with fp16 values, Llama-3-8B's 8 KV heads.
using Llama3MixedBlock32 = PagedKvCache<presets::llama3_8b, 32, Int8Codec, Fp16Codec>;
static_assert(Llama3MixedBlock32::bytes_per_block == 32 * 8 * 32 * ((128 + 4) + 128 * 2));
// int4 both ways: 4 groups of 32 per 128-dim vector, each with a float scale and zero point.
using Llama70bInt4 = PagedKvCache<presets::llama2_70b, 16, Int4Codec>;
static_assert(Llama70bInt4::bytes_per_block == 80 * 8 * 16 * 2 * (64 + 4 * 8));
static_assert(PagedKvCache<presets::qwen25_05b, 8, Fp8E4M3Codec>::bytes_per_token ==
              24 * 2 * 2 * (64 + 4));

// The paged cache serves the model exactly where the contiguous one does.
static_assert(KvStore<PagedKvCache<tiny, 16>>);
static_assert(KvView<PagedKvCache<tiny, 8, Int8Codec, Int4Codec>::View>);
static_assert(KvStore<ContiguousKvCache<tiny>>);
// Float storage can also hand attention its rows in place.
static_assert(KvRowsView<PagedKvCache<tiny, 16>::View>);
static_assert(KvRowsView<ContiguousKvCache<tiny>::View>);
static_assert(KvRowsView<FloatKvView>);
static_assert(AlwaysInPlaceRows<ContiguousKvCache<tiny>::View> && AlwaysInPlaceRows<FloatKvView>);
static_assert(!AlwaysInPlaceRows<PagedKvCache<tiny, 16>::View>);
// Every storage can ask for a run's bytes ahead of attention (model/host_ops.hpp warms a
// decode step's keys and values through it), quantized codecs included.
static_assert(KvPrefetchView<PagedKvCache<tiny, 16>::View> &&
              KvPrefetchView<PagedKvCache<tiny, 8, Int8Codec, Int4Codec>::View> &&
              KvPrefetchView<ContiguousKvCache<tiny>::View> && KvPrefetchView<FloatKvView>);

// What each test writes, to compare against: [seq][layer][position] -> K and V of all heads.
struct Written {
    std::map<std::tuple<int, int, int>, std::pair<std::vector<float>, std::vector<float>>> kv;

    template <class Cache>
    void write(Cache& cache, std::mt19937_64& rng, int seq, int layer, int position) {
        auto k = testing::random_floats(rng, kv_width);
        auto v = testing::random_floats(rng, kv_width);
        cache.write(seq, layer, position, k.data(), v.data());
        kv[{seq, layer, position}] = {std::move(k), std::move(v)};
    }
    std::vector<float> const& keys(int seq, int layer, int position) const {
        return kv.at({seq, layer, position}).first;
    }
    std::vector<float> const& values(int seq, int layer, int position) const {
        return kv.at({seq, layer, position}).second;
    }
};

// Writes positions [first, last) of every layer, position by position as decode would.
template <class Cache>
void write_positions(Cache& cache, Written& written, std::mt19937_64& rng, int seq, int first,
                     int last) {
    for (int p = first; p < last; ++p) {
        for (int layer = 0; layer < tiny.layers; ++layer) written.write(cache, rng, seq, layer, p);
    }
}

// Loads [first, first+count) of one head through the view, poisoned first.
template <class View>
std::vector<float> load(View const& view, bool keys, int kv_head, int first, int count) {
    std::vector<float> out(static_cast<std::size_t>(count) * tiny.head_dim);
    testing::poison(std::span<float>(out));
    if (keys) {
        view.load_keys(kv_head, first, count, out.data());
    } else {
        view.load_values(kv_head, first, count, out.data());
    }
    return out;
}

std::uint32_t bits(float x) {
    return std::bit_cast<std::uint32_t>(x);
}

// Every position of `seq` reads back bitwise as `expected_seq` wrote it (they differ after a
// fork or a prefix hit, whose positions were written under another sequence).
template <class Cache>
void check_reads_back(Cache const& cache, Written const& written, int seq, int first, int last,
                      int expected_seq) {
    for (int layer = 0; layer < tiny.layers; ++layer) {
        auto const view = cache.view(seq, layer);
        for (int head = 0; head < tiny.kv_heads; ++head) {
            auto const keys = load(view, true, head, first, last - first);
            auto const values = load(view, false, head, first, last - first);
            int mismatches = 0;
            for (int p = first; p < last; ++p) {
                for (int d = 0; d < tiny.head_dim; ++d) {
                    std::size_t const at = static_cast<std::size_t>(p - first) * tiny.head_dim + d;
                    std::size_t const src = static_cast<std::size_t>(head) * tiny.head_dim + d;
                    mismatches += bits(keys[at]) != bits(written.keys(expected_seq, layer, p)[src]);
                    mismatches +=
                        bits(values[at]) != bits(written.values(expected_seq, layer, p)[src]);
                }
            }
            BOOST_TEST(mismatches == 0, "seq " << seq << " layer " << layer << " head " << head
                                               << " positions " << first << ".." << last);
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_paged_cache)

// Sequences written interleaved (so each one's blocks are scattered through the pool), then
// read back in runs that start and end anywhere, across block boundaries: bitwise equal to
// the floats written, and to ContiguousKvCache holding the same tokens.
template <int BlockSize>
void check_same_floats_as_contiguous(std::uint64_t seed) {
    using Cache = PagedKvCache<tiny, BlockSize>;
    auto rng = testing::seeded_rng(seed);
    Cache paged(Cache::bytes_per_block * 40);
    ContiguousKvCache<tiny> contiguous(3, 128);
    std::vector<int> const lengths = {3 * BlockSize + 5, 2 * BlockSize, 7};
    std::vector<int> seqs;
    for (int length : lengths) seqs.push_back(paged.admit(length));
    Written written;
    int const longest = 3 * BlockSize + 5;
    for (int p = 0; p < longest; ++p) {
        for (std::size_t s = 0; s < seqs.size(); ++s) {
            if (p >= lengths[s]) continue;
            BOOST_REQUIRE(paged.reserve(seqs[s], p + 1));
            for (int layer = 0; layer < tiny.layers; ++layer) {
                written.write(paged, rng, seqs[s], layer, p);
                contiguous.write(static_cast<int>(s), layer, p,
                                 written.keys(seqs[s], layer, p).data(),
                                 written.values(seqs[s], layer, p).data());
            }
        }
    }
    BOOST_TEST(paged.block_table(seqs[0])[1] != paged.block_table(seqs[0])[0] + 1,
               "interleaved writes should scatter a sequence's blocks");
    for (std::size_t s = 0; s < seqs.size(); ++s) {
        int const n = lengths[s];
        BOOST_TEST(paged.tokens(seqs[s]) == n);
        check_reads_back(paged, written, seqs[s], 0, n, seqs[s]);
        for (int layer = 0; layer < tiny.layers; ++layer) {
            auto const pv = paged.view(seqs[s], layer);
            auto const cv = contiguous.view(static_cast<int>(s), layer);
            BOOST_TEST(pv.tokens() == cv.tokens());
            for (int first : {0, 1, BlockSize - 1, BlockSize}) {
                if (first >= n) continue;
                for (int head = 0; head < tiny.kv_heads; ++head) {
                    for (bool keys : {true, false}) {
                        auto const a = load(pv, keys, head, first, n - first);
                        auto const b = load(cv, keys, head, first, n - first);
                        BOOST_TEST(std::equal(a.begin(), a.end(), b.begin(),
                                              [](float x, float y) { return bits(x) == bits(y); }));
                    }
                    // Rows in place: the contiguous cache always has them, the paged one
                    // exactly where the run stays in one block; both are the floats loaded.
                    for (int count = 1; first + count <= n; ++count) {
                        bool const one_block = first % BlockSize + count <= BlockSize;
                        for (bool keys : {true, false}) {
                            float const* paged_rows = keys ? pv.key_rows(head, first, count)
                                                           : pv.value_rows(head, first, count);
                            float const* contiguous_rows = keys ? cv.key_rows(head, first, count)
                                                                : cv.value_rows(head, first, count);
                            BOOST_TEST((paged_rows != nullptr) == one_block);
                            BOOST_REQUIRE(contiguous_rows != nullptr);
                            auto const loaded = load(cv, keys, head, first, count);
                            BOOST_TEST(std::memcmp(contiguous_rows, loaded.data(),
                                                   loaded.size() * sizeof(float)) == 0);
                            if (paged_rows)
                                BOOST_TEST(std::memcmp(paged_rows, loaded.data(),
                                                       loaded.size() * sizeof(float)) == 0);
                        }
                    }
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(fp32_views_return_the_floats_written_block_size_8) {
    check_same_floats_as_contiguous<8>(501);
}
BOOST_AUTO_TEST_CASE(fp32_views_return_the_floats_written_block_size_16) {
    check_same_floats_as_contiguous<16>(502);
}
BOOST_AUTO_TEST_CASE(fp32_views_return_the_floats_written_block_size_32) {
    check_same_floats_as_contiguous<32>(503);
}

// A quantized cache returns exactly the codec's round trip of what was written: the paged
// path adds nothing (no mixed-up heads, slots or scales) to the codec's own error.
BOOST_AUTO_TEST_CASE(quantized_views_return_the_codec_round_trip) {
    using Cache = PagedKvCache<tiny, 16, Int8Codec, Int4Codec>;
    auto rng = testing::seeded_rng(504);
    Cache cache(Cache::bytes_per_block * 4);
    int const seq = cache.admit(40);
    BOOST_REQUIRE(cache.reserve(seq, 40));
    Written written;
    write_positions(cache, written, rng, seq, 0, 40);
    for (int layer = 0; layer < tiny.layers; ++layer) {
        auto const view = cache.view(seq, layer);
        for (int head = 0; head < tiny.kv_heads; ++head) {
            // Quantized rows are never floats in place: attention loads (decodes) them.
            BOOST_TEST(view.key_rows(head, 0, 4) == nullptr);
            BOOST_TEST(view.value_rows(head, 16, 16) == nullptr);
            auto const keys = load(view, true, head, 0, 40);
            auto const values = load(view, false, head, 0, 40);
            int mismatches = 0;
            for (int p = 0; p < 40; ++p) {
                std::array<std::byte, Int8Codec::vector_bytes<32>> k_bytes;
                std::array<std::byte, Int4Codec::vector_bytes<32>> v_bytes;
                std::array<float, 32> k_expected, v_expected;
                Int8Codec::encode<32>(written.keys(seq, layer, p).data() + head * 32,
                                      k_bytes.data());
                Int8Codec::decode<32>(k_bytes.data(), k_expected.data());
                Int4Codec::encode<32>(written.values(seq, layer, p).data() + head * 32,
                                      v_bytes.data());
                Int4Codec::decode<32>(v_bytes.data(), v_expected.data());
                for (int d = 0; d < 32; ++d) {
                    mismatches +=
                        bits(keys[static_cast<std::size_t>(p * 32 + d)]) != bits(k_expected[d]);
                    mismatches +=
                        bits(values[static_cast<std::size_t>(p * 32 + d)]) != bits(v_expected[d]);
                }
            }
            BOOST_TEST(mismatches == 0, "layer " << layer << " head " << head);
        }
    }
}

BOOST_AUTO_TEST_CASE(fork_shares_blocks_and_copies_on_write) {
    using Cache = PagedKvCache<tiny, 16>;
    auto rng = testing::seeded_rng(505);
    Cache cache(Cache::bytes_per_block * 8);
    Written written;
    int const parent = cache.admit(64);
    BOOST_REQUIRE(cache.reserve(parent, 20));
    write_positions(cache, written, rng, parent, 0, 20);
    int const used_before = cache.used_blocks();

    int const child = cache.fork(parent);
    BOOST_TEST(cache.used_blocks() == used_before);  // nothing copied yet
    BOOST_TEST(cache.pool().ref_count(cache.block_table(parent)[1]) == 2);
    BOOST_TEST(cache.tokens(child) == 20);
    check_reads_back(cache, written, child, 0, 20, parent);

    // The child's next token lands in the shared, partly filled block 1: reserve copies it.
    BOOST_REQUIRE(cache.reserve(child, 21));
    BOOST_TEST(cache.used_blocks() == used_before + 1);
    BOOST_TEST(cache.block_table(child)[0] == cache.block_table(parent)[0]);  // still shared
    BOOST_TEST(cache.block_table(child)[1] != cache.block_table(parent)[1]);
    BOOST_TEST(cache.pool().ref_count(cache.block_table(parent)[1]) == 1);
    write_positions(cache, written, rng, child, 20, 21);
    check_reads_back(cache, written, child, 0, 20, parent);  // the copy holds the parent's 16..19
    check_reads_back(cache, written, child, 20, 21, child);

    // The parent writes its own position 20: its block 1 is no longer shared, no copy.
    BOOST_REQUIRE(cache.reserve(parent, 21));
    BOOST_TEST(cache.used_blocks() == used_before + 1);
    write_positions(cache, written, rng, parent, 20, 21);
    check_reads_back(cache, written, parent, 0, 21, parent);
    check_reads_back(cache, written, child, 20, 21, child);

    // Rewriting a position of the shared block 0 copies it on write.
    written.write(cache, rng, child, 0, 3);
    BOOST_TEST(cache.block_table(child)[0] != cache.block_table(parent)[0]);
    BOOST_TEST(cache.used_blocks() == used_before + 2);
    check_reads_back(cache, written, parent, 0, 21, parent);  // untouched by the child's write

    cache.release(parent);
    cache.release(child);
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
    BOOST_TEST(cache.live_sequences() == 0);
}

BOOST_AUTO_TEST_CASE(out_of_blocks_is_reported_and_changes_nothing) {
    using Cache = PagedKvCache<tiny, 8>;
    auto rng = testing::seeded_rng(506);
    Cache cache(Cache::bytes_per_block * 4 + Cache::bytes_per_block / 2);  // 4.5 blocks: 4
    BOOST_TEST(cache.total_blocks() == 4);
    Written written;
    int const a = cache.admit(32), b = cache.admit(32);
    BOOST_REQUIRE(cache.reserve(a, 20));  // 3 blocks
    write_positions(cache, written, rng, a, 0, 20);
    BOOST_TEST(!cache.reserve(b, 9));     // needs 2, 1 is free
    BOOST_TEST(cache.reserve(b, 8));      // 1 fits
    BOOST_TEST(!cache.reserve(a, 25));    // needs a fourth block
    BOOST_TEST(cache.reserved(a) == 20);  // the refusal changed nothing
    BOOST_TEST(cache.block_table(a).size() == 3u);
    BOOST_TEST(cache.reserved(b) == 8);
    BOOST_TEST(cache.free_blocks() == 0);
    check_reads_back(cache, written, a, 0, 20, a);
    cache.release(b);  // preempt b: a may grow again
    BOOST_TEST(cache.reserve(a, 25));
}

BOOST_AUTO_TEST_CASE(a_request_that_can_never_fit_is_refused_at_admission) {
    using Cache = PagedKvCache<tiny, 16>;
    Cache cache(Cache::bytes_per_block * 4);  // 64 tokens
    BOOST_TEST(cache.admit(64) >= 0);
    auto const refusal = [&](int max_tokens) {
        try {
            cache.admit(max_tokens);
        } catch (RequestError const& e) {
            return std::string(e.what());
        }
        return std::string("admitted");
    };
    BOOST_TEST(refusal(65) ==
               "request of 65 tokens needs 5 KV blocks of 16 tokens, but the whole cache has 4 "
               "blocks (64 tokens)");
    BOOST_TEST(refusal(513) == "request of 513 tokens exceeds the model's context of 512 tokens");
    BOOST_TEST(refusal(0) == "a request must allow at least one token, got max_tokens=0");
    std::vector<int> const prompt(70, 1);
    BOOST_CHECK_THROW(cache.admit(prompt, 64), RequestError);  // prompt longer than the limit
    BOOST_TEST(cache.live_sequences() == 1);
    BOOST_CHECK_THROW(Cache(Cache::bytes_per_block - 1), Error);  // a budget below one block
}

BOOST_AUTO_TEST_CASE(truncate_drops_the_blocks_past_the_new_length) {
    using Cache = PagedKvCache<tiny, 8>;
    auto rng = testing::seeded_rng(507);
    Cache cache(Cache::bytes_per_block * 8);
    Written written;
    int const seq = cache.admit(64);
    BOOST_REQUIRE(cache.reserve(seq, 30));
    write_positions(cache, written, rng, seq, 0, 30);
    BOOST_TEST(cache.used_blocks() == 4);
    cache.truncate(seq, 9);  // speculative tokens 9..29 rejected
    BOOST_TEST(cache.used_blocks() == 2);
    BOOST_TEST(cache.tokens(seq) == 9);
    BOOST_TEST(cache.view(seq, 1).tokens() == 9);
    check_reads_back(cache, written, seq, 0, 9, seq);
    BOOST_REQUIRE(cache.reserve(seq, 12));  // accepted tokens written again
    write_positions(cache, written, rng, seq, 9, 12);
    check_reads_back(cache, written, seq, 0, 12, seq);
    BOOST_CHECK_THROW(written.write(cache, rng, seq, 0, 20), std::logic_error);  // not reserved
}

BOOST_AUTO_TEST_CASE(a_cached_prefix_is_reused_and_evicted_when_blocks_run_short) {
    using Cache = PagedKvCache<tiny, 8>;
    auto rng = testing::seeded_rng(508);
    Cache cache(Cache::bytes_per_block * 6);
    Written written;
    std::vector<int> prompt(20);
    for (int i = 0; i < 20; ++i) prompt[static_cast<std::size_t>(i)] = 7 * i % 13;

    auto const first = cache.admit(prompt, 32);
    BOOST_TEST(first.cached_tokens == 0);
    BOOST_REQUIRE(cache.reserve(first.seq, 20));
    write_positions(cache, written, rng, first.seq, 0, 20);
    BOOST_TEST(cache.cache_prefix(first.seq, prompt) == 2);  // two full blocks of 8
    auto const cached = std::vector<BlockId>(cache.block_table(first.seq).begin(),
                                             cache.block_table(first.seq).begin() + 2);
    cache.release(first.seq);
    BOOST_TEST(cache.used_blocks() == 2);  // the cache keeps the prefix

    // Same prompt, a different ending: 16 tokens come from the cache.
    std::vector<int> second_prompt(prompt.begin(), prompt.begin() + 18);
    second_prompt.push_back(99);
    auto const second = cache.admit(second_prompt, 32);
    BOOST_TEST(second.cached_tokens == 16);
    BOOST_TEST(cache.tokens(second.seq) == 16);
    BOOST_TEST(cache.block_table(second.seq)[0] == cached[0]);
    BOOST_TEST(cache.block_table(second.seq)[1] == cached[1]);
    check_reads_back(cache, written, second.seq, 0, 16, first.seq);
    // A prompt of exactly the cached 16 tokens reuses only 8: its last token needs computing.
    auto const third = cache.admit(std::span<int const>(prompt).first(16), 32);
    BOOST_TEST(third.cached_tokens == 8);
    BOOST_TEST(cache.prefix_cache().stats().hit_requests == 2);
    BOOST_TEST(cache.prefix_cache().stats().miss_requests == 1);
    cache.release(second.seq);
    cache.release(third.seq);

    // Six blocks, two held by the cache alone: a 48-token sequence takes them all.
    int const big = cache.admit(48);
    BOOST_TEST(cache.reserve(big, 48));
    BOOST_TEST(cache.prefix_cache().cached_blocks() == 0);
    BOOST_TEST(cache.free_blocks() == 0);
    cache.release(big);
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
}

BOOST_AUTO_TEST_CASE(a_cached_block_is_never_written_in_place) {
    using Cache = PagedKvCache<tiny, 8>;
    auto rng = testing::seeded_rng(509);
    Cache cache(Cache::bytes_per_block * 6);
    Written written;
    std::vector<int> const prompt(16, 3);
    auto const a = cache.admit(prompt, 32);
    BOOST_REQUIRE(cache.reserve(a.seq, 16));
    write_positions(cache, written, rng, a.seq, 0, 16);
    cache.cache_prefix(a.seq, prompt);
    Written const original = written;
    // a rolls back into its cached block and writes something else there.
    cache.truncate(a.seq, 12);
    BOOST_REQUIRE(cache.reserve(a.seq, 16));
    write_positions(cache, written, rng, a.seq, 12, 16);
    check_reads_back(cache, written, a.seq, 0, 16, a.seq);
    // A newcomer with the original prompt still reads the original KV.
    auto const b = cache.admit(std::vector<int>(17, 3), 32);
    BOOST_TEST(b.cached_tokens == 16);
    check_reads_back(cache, original, b.seq, 0, 16, a.seq);
}

// What a scheduler asks before planning a step: blocks a growth needs (a shared partial block
// to copy included), blocks available (free and evictable), blocks a preemption would return.
BOOST_AUTO_TEST_CASE(capacity_questions_count_copies_sharing_and_evictable_blocks) {
    using Cache = PagedKvCache<tiny, 8>;
    auto rng = testing::seeded_rng(510);
    Cache cache(Cache::bytes_per_block * 8);
    Written written;
    std::vector<int> const prompt(20, 5);
    auto const a = cache.admit(prompt, 64);
    BOOST_REQUIRE(cache.reserve(a.seq, 20));  // 3 blocks, the last with 4 of 8 positions
    write_positions(cache, written, rng, a.seq, 0, 20);
    BOOST_TEST(cache.blocks_needed(a.seq, 20) == 0);
    BOOST_TEST(cache.blocks_needed(a.seq, 24) == 0);
    BOOST_TEST(cache.blocks_needed(a.seq, 25) == 1);
    BOOST_TEST(cache.reclaimable_blocks(a.seq) == 3);

    BOOST_TEST(cache.cache_prefix(a.seq, prompt) == 2);
    int const b = cache.fork(a.seq);
    BOOST_TEST(cache.reclaimable_blocks(a.seq) == 0);  // all three shared now
    BOOST_TEST(cache.blocks_needed(b, 21) == 1);       // a copy of the shared partial block
    BOOST_TEST(cache.blocks_needed(b, 25) == 2);
    BOOST_TEST(cache.available_blocks() == 5);  // the cached blocks are still in use
    cache.release(a.seq);
    cache.release(b);
    // Both cached blocks are now the cache's alone: evictable, so available.
    BOOST_TEST(cache.free_blocks() == 6);
    BOOST_TEST(cache.available_blocks() == 8);
    auto const c = cache.admit(prompt, 64);
    BOOST_TEST(c.cached_tokens == 16);
    BOOST_TEST(cache.available_blocks() == 6);
    BOOST_TEST(cache.reclaimable_blocks(c.seq) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
