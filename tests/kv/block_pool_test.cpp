// BlockPool: the free list and reference counts, without any data.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include <tinfer/kv/block_pool.hpp>

using tinfer::kv::BlockId;
using tinfer::kv::BlockPool;

BOOST_AUTO_TEST_SUITE(kv_block_pool)

BOOST_AUTO_TEST_CASE(allocates_every_block_once_then_reports_empty) {
    BlockPool pool(5);
    std::set<BlockId> handed_out;
    for (int i = 0; i < 5; ++i) {
        auto const block = pool.allocate();
        BOOST_REQUIRE(block.has_value());
        BOOST_TEST(pool.ref_count(*block) == 1);
        BOOST_TEST(handed_out.insert(*block).second, "block " << *block << " handed out twice");
    }
    BOOST_TEST(!pool.allocate().has_value());
    BOOST_TEST(pool.free_blocks() == 0);
    BOOST_TEST(pool.used_blocks() == 5);
}

BOOST_AUTO_TEST_CASE(a_block_returns_when_its_last_owner_releases_it) {
    BlockPool pool(2);
    BlockId const block = *pool.allocate();
    pool.retain(block);
    pool.retain(block);
    BOOST_TEST(pool.ref_count(block) == 3);
    BOOST_TEST(pool.is_shared(block));
    BOOST_TEST(!pool.release(block));
    BOOST_TEST(!pool.release(block));
    BOOST_TEST(!pool.is_shared(block));
    BOOST_TEST(pool.free_blocks() == 1);
    BOOST_TEST(pool.release(block));
    BOOST_TEST(pool.free_blocks() == 2);
    BOOST_TEST(pool.ref_count(block) == 0);
    // Most recently freed first: the block comes straight back.
    BOOST_TEST(*pool.allocate() == block);
}

BOOST_AUTO_TEST_CASE(releasing_or_retaining_a_free_block_is_refused) {
    BlockPool pool(2);
    BlockId const block = *pool.allocate();
    BOOST_TEST(pool.release(block));
    BOOST_CHECK_THROW(pool.release(block), std::logic_error);
    BOOST_CHECK_THROW(pool.retain(block), std::logic_error);
    BOOST_CHECK_THROW(pool.retain(7), std::logic_error);
    BOOST_TEST(pool.free_blocks() == 2);  // the refused calls changed nothing
    std::vector<BlockId> free(pool.free_list().begin(), pool.free_list().end());
    std::sort(free.begin(), free.end());
    BOOST_TEST((free == std::vector<BlockId>{0, 1}));
}

BOOST_AUTO_TEST_SUITE_END()
