// PrefixCache: the radix tree over token ids at block granularity, its reference counting
// against the pool, least-recently-used eviction of unreferenced leaves, and hit counters.
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include <tinfer/kv/block_pool.hpp>
#include <tinfer/kv/prefix_cache.hpp>

using tinfer::kv::BlockId;
using tinfer::kv::BlockPool;

namespace {
constexpr int block_size = 4;
using Cache = tinfer::kv::PrefixCache<block_size>;

std::vector<int> iota_tokens(int n, int first = 0) {
    std::vector<int> tokens(static_cast<std::size_t>(n));
    std::iota(tokens.begin(), tokens.end(), first);
    return tokens;
}

// Blocks for a sequence of `n` blocks, as a sequence would own them (ref 1 each).
std::vector<BlockId> allocate(BlockPool& pool, int n) {
    std::vector<BlockId> blocks;
    for (int i = 0; i < n; ++i) blocks.push_back(*pool.allocate());
    return blocks;
}

void release(BlockPool& pool, std::vector<BlockId> const& blocks) {
    for (BlockId const b : blocks) pool.release(b);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(kv_prefix_cache)

BOOST_AUTO_TEST_CASE(matches_the_longest_prefix_of_full_blocks) {
    BlockPool pool(16);
    Cache cache;
    auto const tokens = iota_tokens(14);  // 3 full blocks and 2 tokens
    auto const blocks = allocate(pool, 4);
    BOOST_TEST(cache.insert(tokens, blocks, pool) == 3);  // the partial block is not cached
    BOOST_TEST(cache.cached_blocks() == 3);
    BOOST_TEST(pool.ref_count(blocks[0]) == 2);
    BOOST_TEST(pool.ref_count(blocks[3]) == 1);

    // Same first 9 tokens, then different: two full blocks match, the third differs.
    auto query = iota_tokens(9);
    query.push_back(1000);
    query.push_back(1001);
    query.push_back(1002);
    auto const match = cache.match(query, pool);
    BOOST_TEST(match.tokens == 2 * block_size);
    BOOST_TEST((match.blocks == std::vector<BlockId>{blocks[0], blocks[1]}));
    BOOST_TEST(pool.ref_count(blocks[0]) == 3);  // the caller now owns one reference
    BOOST_TEST(pool.ref_count(blocks[2]) == 2);

    auto const miss = cache.match(iota_tokens(12, 50), pool);
    BOOST_TEST(miss.tokens == 0);
    BOOST_TEST(miss.blocks.empty());
    BOOST_TEST(cache.stats().hit_requests == 1);
    BOOST_TEST(cache.stats().miss_requests == 1);
    BOOST_TEST(cache.stats().hit_tokens == 8);
    BOOST_TEST(cache.stats().miss_tokens == (12 - 8) + 12);
    BOOST_TEST(cache.stats().token_hit_rate() == 8.0 / 24.0);
}

BOOST_AUTO_TEST_CASE(an_already_cached_prefix_keeps_its_block) {
    BlockPool pool(8);
    Cache cache;
    auto const tokens = iota_tokens(8);
    auto const first = allocate(pool, 2);
    auto const second = allocate(pool, 2);  // the same tokens computed again elsewhere
    BOOST_TEST(cache.insert(tokens, first, pool) == 2);
    BOOST_TEST(cache.insert(tokens, second, pool) == 0);
    BOOST_TEST(pool.ref_count(second[0]) == 1);  // not taken by the cache
    BOOST_TEST((cache.match(tokens, pool).blocks == first));
}

BOOST_AUTO_TEST_CASE(evicts_only_unreferenced_blocks_least_recently_used_first) {
    BlockPool pool(8);
    Cache cache;
    auto const old_tokens = iota_tokens(4, 0), new_tokens = iota_tokens(4, 100),
               used_tokens = iota_tokens(4, 200);
    auto const old_blocks = allocate(pool, 1), new_blocks = allocate(pool, 1),
               used_blocks = allocate(pool, 1);
    cache.insert(used_tokens, used_blocks, pool);  // the oldest, but still used by a sequence
    cache.insert(old_tokens, old_blocks, pool);
    cache.insert(new_tokens, new_blocks, pool);
    release(pool, old_blocks);
    release(pool, new_blocks);  // these two are now held by the cache alone

    BOOST_TEST(cache.evict(1, pool) == 1);
    BOOST_TEST(pool.ref_count(old_blocks[0]) == 0);
    BOOST_TEST(pool.ref_count(new_blocks[0]) == 1);
    BOOST_TEST(pool.ref_count(used_blocks[0]) == 2);
    // Nothing else is evictable: the used block stays whatever is asked.
    BOOST_TEST(cache.evict(5, pool) == 1);
    BOOST_TEST(cache.cached_blocks() == 1);
    BOOST_TEST(pool.ref_count(used_blocks[0]) == 2);
    BOOST_TEST(pool.free_blocks() == 8 - 1);
}

BOOST_AUTO_TEST_CASE(a_match_makes_a_prefix_recently_used) {
    BlockPool pool(8);
    Cache cache;
    auto const a = iota_tokens(4, 0), b = iota_tokens(4, 100);
    auto const a_blocks = allocate(pool, 1), b_blocks = allocate(pool, 1);
    cache.insert(a, a_blocks, pool);
    cache.insert(b, b_blocks, pool);
    release(pool, a_blocks);
    release(pool, b_blocks);
    auto const hit = cache.match(a, pool);  // a is now the most recent ...
    release(pool, hit.blocks);              // ... and unreferenced again
    BOOST_TEST(cache.evict(1, pool) == 1);
    BOOST_TEST(pool.ref_count(b_blocks[0]) == 0);
    BOOST_TEST(pool.ref_count(a_blocks[0]) == 1);
}

BOOST_AUTO_TEST_CASE(evicts_leaves_before_their_parents) {
    BlockPool pool(8);
    Cache cache;
    auto const tokens = iota_tokens(12);
    auto const blocks = allocate(pool, 3);
    cache.insert(tokens, blocks, pool);
    release(pool, blocks);
    BOOST_TEST(cache.evict(1, pool) == 1);
    BOOST_TEST(pool.ref_count(blocks[2]) == 0);  // the deepest block went first
    auto const match = cache.match(tokens, pool);
    BOOST_TEST(match.tokens == 8);
    release(pool, match.blocks);
    BOOST_TEST(cache.evict(10, pool) == 2);
    BOOST_TEST(pool.free_blocks() == 8);
    BOOST_TEST(cache.cached_blocks() == 0);
}

BOOST_AUTO_TEST_CASE(clear_returns_every_block_it_holds) {
    BlockPool pool(8);
    Cache cache;
    auto const blocks = allocate(pool, 2);
    cache.insert(iota_tokens(8), blocks, pool);
    cache.clear(pool);
    BOOST_TEST(pool.ref_count(blocks[0]) == 1);  // the sequence's own reference remains
    release(pool, blocks);
    BOOST_TEST(pool.free_blocks() == 8);
    BOOST_TEST(cache.match(iota_tokens(8), pool).tokens == 0);
}

BOOST_AUTO_TEST_SUITE_END()
