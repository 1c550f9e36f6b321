// A device step planned over a host kv::PagedKvCache's tables (model/cuda/cache_step.hpp), the
// bookkeeping of the Engine's CUDA backend, on the CPU over host blocks (no GPU, no nvcc):
//  - a forked sequence rewriting a position of a shared block gets its own copy before the
//    kernels run, the plan's block table is the copy's, the other owner keeps the original
//    bytes; a position counts as written only after commit_cache_step;
//  - several chunks lay out as the kernels read them (positions, chunk of each row, logit rows);
//  - after token eviction a chunk's K and V go to its cache slots while RoPE turns it by its
//    positions, and attention covers the slots;
//  - a step the cache cannot take is refused with RequestError and changes nothing: slots not
//    reserved, a gap after the cached slots, attention scores, a dead slot, a token outside
//    the vocabulary.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/cuda/cache_step.hpp>

namespace tc = tinfer::cuda;
using tinfer::SequenceChunk;

namespace {

constexpr tinfer::ModelConfig tiny{.layers = 2,
                                   .hidden = 64,
                                   .heads = 4,
                                   .kv_heads = 2,
                                   .head_dim = 16,
                                   .ffn = 96,
                                   .vocab = 50,
                                   .max_context = 128,
                                   .rope_base = 10000.0,
                                   .norm_eps = 1e-5};
constexpr int block_size = 4;
using Cache = tinfer::kv::PagedKvCache<tiny, block_size>;
constexpr tc::StepLimits limits{
    .max_chunks = 8, .max_rows = 64, .max_logit_rows = 64, .vocab = tiny.vocab};

// Writes positions [0, n) of `seq` with seeded random K and V, every layer.
void fill(Cache& cache, int seq, int n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> value(-1, 1);
    std::vector<float> k(tiny.kv_width()), v(tiny.kv_width());
    for (int p = 0; p < n; ++p)
        for (int layer = 0; layer < tiny.layers; ++layer) {
            for (float& x : k) x = value(rng);
            for (float& x : v) x = value(rng);
            cache.write(seq, layer, p, k.data(), v.data());
        }
}

std::vector<std::byte> exported(Cache const& cache, int seq) {
    std::vector<std::byte> bytes;
    cache.export_blocks(seq, bytes);
    return bytes;
}

std::vector<tinfer::kv::BlockId> table_of(Cache const& cache, int seq) {
    auto const t = cache.block_table(seq);
    return {t.begin(), t.end()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(device_cache_step)

BOOST_AUTO_TEST_CASE(a_shared_block_is_copied_before_the_kernels_write_it) {
    Cache cache(Cache::bytes_per_block * 16);
    int const parent = cache.admit(32);
    BOOST_REQUIRE(cache.reserve(parent, 12));
    fill(cache, parent, 10, 1);
    int const child = cache.fork(parent);
    BOOST_REQUIRE(cache.reserved(child) == 12);
    std::vector<std::byte> const parent_bytes = exported(cache, parent);
    auto const parent_table = table_of(cache, parent);
    BOOST_REQUIRE(table_of(cache, child) == parent_table);  // every block shared

    // The child rewrites position 9 and appends position 10, both in its last block, shared
    // and already reserved (so reserve(), which copies a shared last block it grows, did not).
    std::vector<std::int32_t> const tokens = {3, 4};
    SequenceChunk const chunk{.slot = child, .first_position = 9, .tokens = tokens};
    std::vector<tc::DeviceChunk> scratch;
    tc::DeviceStepPlan const plan =
        tc::plan_cache_step(std::span(&chunk, 1), cache, limits, scratch);

    auto const child_table = table_of(cache, child);
    BOOST_TEST(child_table[0] == parent_table[0]);  // blocks the step does not write stay shared
    BOOST_TEST(child_table[1] == parent_table[1]);
    BOOST_TEST(child_table[2] != parent_table[2]);  // the written one is the child's own now
    BOOST_TEST(table_of(cache, parent) == parent_table);
    BOOST_TEST(exported(cache, child) == parent_bytes, "the copy holds the shared bytes");
    // The kernels see the child's table.
    BOOST_REQUIRE(plan.table_stride >= 3);
    for (int b = 0; b < 3; ++b)
        BOOST_TEST(plan.packed[plan.block_tables + static_cast<std::size_t>(b)] ==
                   child_table[static_cast<std::size_t>(b)]);
    BOOST_TEST(plan.packed[plan.context_lengths] == 11);
    BOOST_TEST(cache.tokens(child) == 10, "nothing counts as written before the kernels ran");

    // What the kernels would write lands in the child's block, never the parent's.
    std::size_t const slot_9 = static_cast<std::size_t>(child_table[2]) * Cache::bytes_per_block +
                               Cache::key_offset(0, 0, 9 % block_size);
    std::vector<std::byte> const new_key(Cache::key_vector_bytes, std::byte{0x5a});
    cache.storage().write(slot_9, new_key.data(), new_key.size());
    tc::commit_cache_step(plan, cache);
    BOOST_TEST(cache.tokens(child) == 11);
    BOOST_TEST(exported(cache, parent) == parent_bytes, "the parent's bytes are untouched");
    BOOST_TEST(exported(cache, child) != parent_bytes);
}

BOOST_AUTO_TEST_CASE(chunks_lay_out_as_the_kernels_read_them) {
    Cache cache(Cache::bytes_per_block * 16);
    int const a = cache.admit(32), b = cache.admit(32);
    BOOST_REQUIRE(cache.reserve(a, 6));
    fill(cache, a, 5, 2);
    BOOST_REQUIRE(cache.reserve(b, 3));
    std::vector<std::int32_t> const one = {7}, three = {1, 2, 3};
    std::vector<SequenceChunk> const chunks = {
        {.slot = a, .first_position = 5, .tokens = one},
        {.slot = b, .first_position = 0, .tokens = three, .all_logits = true}};
    std::vector<tc::DeviceChunk> scratch;
    tc::DeviceStepPlan const plan = tc::plan_cache_step(chunks, cache, limits, scratch);
    BOOST_TEST(plan.rows == 4);
    BOOST_TEST(plan.logit_rows == 4);
    BOOST_TEST(!plan.decode_only);
    BOOST_TEST(plan.max_context == 6);
    std::vector<int> const positions = {5, 0, 1, 2}, row_chunks = {0, 1, 1, 1};
    for (std::size_t r = 0; r < 4; ++r) {
        BOOST_TEST(plan.packed[plan.positions + r] == positions[r]);
        BOOST_TEST(plan.packed[plan.row_chunks + r] == row_chunks[r]);
    }
    BOOST_TEST(plan.packed[plan.block_tables + static_cast<std::size_t>(plan.table_stride)] ==
               cache.block_table(b)[0]);
    tc::commit_cache_step(plan, cache);
    BOOST_TEST(cache.tokens(a) == 6);
    BOOST_TEST(cache.tokens(b) == 3);
}

BOOST_AUTO_TEST_CASE(after_eviction_rows_go_to_their_cache_slots_turned_by_their_positions) {
    Cache cache(Cache::bytes_per_block * 16);
    int const seq = cache.admit(64);
    BOOST_REQUIRE(cache.reserve(seq, 12));
    fill(cache, seq, 12, 4);
    // Keep slots 0, 1 (sinks) and 8..11 (recent): six slots now hold positions 0, 1, 8..11.
    std::vector<int> const kept = {0, 1, 8, 9, 10, 11};
    cache.retain_slots(seq, kept);
    BOOST_REQUIRE(cache.tokens(seq) == 6);
    BOOST_REQUIRE(cache.reserve(seq, 8));
    std::vector<std::int32_t> const two = {5, 6};
    SequenceChunk const chunk{
        .slot = seq, .first_position = 12, .tokens = two, .first_cache_slot = 6};
    std::vector<tc::DeviceChunk> scratch;
    tc::DeviceStepPlan const plan =
        tc::plan_cache_step(std::span(&chunk, 1), cache, limits, scratch);
    BOOST_TEST(plan.packed[plan.positions] == 12);  // RoPE: the tokens' own positions
    BOOST_TEST(plan.packed[plan.positions + 1] == 13);
    BOOST_TEST(plan.packed[plan.cache_slots] == 6);  // K and V: the next free slots
    BOOST_TEST(plan.packed[plan.cache_slots + 1] == 7);
    BOOST_TEST(plan.packed[plan.context_lengths] == 8);  // attention over the 8 slots held
    BOOST_TEST(plan.max_context == 8);
    tc::commit_cache_step(plan, cache);
    BOOST_TEST(cache.tokens(seq) == 8);
}

BOOST_AUTO_TEST_CASE(a_step_the_cache_cannot_take_is_refused_and_changes_nothing) {
    Cache cache(Cache::bytes_per_block * 16);
    int const parent = cache.admit(32);
    BOOST_REQUIRE(cache.reserve(parent, 6));
    fill(cache, parent, 6, 3);
    int const child = cache.fork(parent);
    int const free_before = cache.free_blocks();
    auto const table_before = table_of(cache, child);
    std::vector<std::int32_t> const tokens = {1, 2, 3};
    std::vector<float> scores(16);
    std::vector<tc::DeviceChunk> scratch;
    auto const refused = [&](SequenceChunk const& chunk) {
        BOOST_CHECK_THROW(tc::plan_cache_step(std::span(&chunk, 1), cache, limits, scratch),
                          tinfer::RequestError);
        BOOST_TEST(cache.free_blocks() == free_before);
        BOOST_TEST(table_of(cache, child) == table_before);
        BOOST_TEST(cache.tokens(child) == 6);
    };
    // Positions 5..7: 7 is past the reservation (6), and 5 is in a shared block.
    refused({.slot = child, .first_position = 5, .tokens = tokens});
    refused({.slot = child,
             .first_position = 5,
             .tokens = std::span(tokens).first(1),
             .attention_scores = scores});
    refused({.slot = 7, .first_position = 0, .tokens = tokens});
    refused({.slot = child,
             .first_position = 9,
             .tokens = std::span(tokens).first(1),
             .first_cache_slot = 7});  // slot 6 was never written: a gap
    std::vector<std::int32_t> const outside = {tiny.vocab};
    refused({.slot = child, .first_position = 5, .tokens = outside});
}

BOOST_AUTO_TEST_SUITE_END()
