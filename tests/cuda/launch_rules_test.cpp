// The host-side pieces of the CUDA backend's launch rules (docs/cuda.md, "Errors and refusals on
// the device"), on the CPU: the grid shapes the launchers compute stay within CUDA's limits and
// the strided loops the kernels run over them reach every item exactly once
// (kernels/cuda/grid_limits.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/cuda/grid_limits.hpp>

namespace tk = tinfer::kernels::cuda;

namespace {

// How many times each item is handled when `blocks` blocks each run the kernels' strided loop.
std::vector<int> visits(int items, unsigned blocks) {
    std::vector<int> handled(static_cast<std::size_t>(items > 0 ? items : 0), 0);
    for (unsigned block = 0; block < blocks; ++block)
        for (int const item : tk::strided_items(block, blocks, items)) {
            if (item < 0 || item >= items) return {};  // out of range: the caller sees a mismatch
            ++handled[static_cast<std::size_t>(item)];
        }
    return handled;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grid_limits)

// RoPE rows and block copies launch strided_grid_y(count) blocks along y: at most 65,535 whatever
// the count (70,000 tokens of one prefill, or a fork copying 100,000 blocks), and each row or
// copy is handled by exactly one block.
BOOST_AUTO_TEST_CASE(strided_grids_fit_and_reach_every_item_once) {
    for (int const items : {1, 2, 1000, 65534, 65535, 65536, 70000, 131071, 131072, 200003}) {
        unsigned const blocks = tk::strided_grid_y(items);
        BOOST_TEST_CONTEXT("items " << items << ", blocks along y " << blocks) {
            BOOST_TEST(blocks >= 1u);
            BOOST_TEST(blocks <= tk::max_grid_yz);
            BOOST_TEST(tk::grid_fits(1, blocks, 1));
            std::vector<int> const handled = visits(items, blocks);
            BOOST_TEST(handled.size() == static_cast<std::size_t>(items));
            int wrong = 0;
            for (int const times : handled) wrong += times != 1;
            BOOST_TEST(wrong == 0);
        }
    }
    BOOST_TEST(tk::strided_grid_y(0) == 0u);
    BOOST_TEST(tk::strided_grid_y(-3) == 0u);
}

// Near the top of int the loop's last step would overflow an int counter; it is counted wide.
BOOST_AUTO_TEST_CASE(strided_loops_end_near_the_int_limit) {
    int const items = 2147483647;  // INT_MAX
    unsigned const blocks = tk::max_grid_yz;
    unsigned const block = blocks - 1;
    std::int64_t last = -1, count = 0;
    for (int const item : tk::strided_items(block, blocks, items)) {
        last = item;
        if (++count > items / static_cast<std::int64_t>(blocks) + 2) break;  // bounded
    }
    BOOST_TEST(count == (items - static_cast<std::int64_t>(block) + blocks - 1) / blocks);
    BOOST_TEST(last < items);
    BOOST_TEST(last + blocks >= items);
}

BOOST_AUTO_TEST_CASE(grids_past_the_limits_do_not_fit) {
    BOOST_TEST(tk::grid_fits(tk::max_grid_x, tk::max_grid_yz, tk::max_grid_yz));
    BOOST_TEST(!tk::grid_fits(tk::max_grid_x + 1, 1, 1));
    BOOST_TEST(!tk::grid_fits(1, tk::max_grid_yz + 1, 1));
    BOOST_TEST(!tk::grid_fits(1, 1, tk::max_grid_yz + 1));
    BOOST_TEST(!tk::grid_fits(0, 1, 1));
    // One block per row along y, as RoPE and block copies launched before they strode: refused.
    BOOST_TEST(!tk::grid_fits(1, 70000, 1));
}

BOOST_AUTO_TEST_SUITE_END()
