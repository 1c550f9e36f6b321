// The host-side pieces of the CUDA backend's launch rules (docs/cuda.md, "Errors and refusals on
// the device"), on the CPU: the grid shapes the launchers compute stay within CUDA's limits and
// the strided loops the kernels run over them reach every item exactly once
// (kernels/cuda/grid_limits.hpp); a launch whose K or V codec is not the cache's is refused, also
// when the two codecs' vectors have the same size (kernels/cuda/paged_kv_layer.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/grid_limits.hpp>
#include <tinfer/kernels/cuda/paged_kv_layer.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>

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

// Elementwise kernels loop over their items with grid_stride_blocks(items, threads) blocks: one
// per `threads` items up to a cap (the grid-stride loop takes the rest), always a launchable grid.
BOOST_AUTO_TEST_CASE(grid_stride_grids_cover_every_item_within_the_cap) {
    for (std::int64_t const items :
         {std::int64_t{1}, std::int64_t{255}, std::int64_t{256}, std::int64_t{257},
          std::int64_t{256} * 4096, std::int64_t{256} * 4096 + 1, std::int64_t{5} << 30}) {
        int const blocks = tk::grid_stride_blocks(items, 256);
        BOOST_TEST_CONTEXT("items " << items << ", blocks " << blocks) {
            BOOST_TEST(blocks >= 1);
            BOOST_TEST(blocks <= tk::max_grid_stride_blocks);
            BOOST_TEST(tk::grid_fits(static_cast<std::uint64_t>(blocks), 1, 1));
            // One block per 256 items while under the cap, so no block idles.
            if (items <= std::int64_t{256} * tk::max_grid_stride_blocks)
                BOOST_TEST(blocks == (items + 255) / 256);
        }
    }
    BOOST_TEST(tk::grid_stride_blocks(0, 256) == 0);
    BOOST_TEST(tk::grid_stride_blocks(-1, 256) == 0);
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

BOOST_AUTO_TEST_SUITE(layer_codecs)

namespace {

namespace kv = tinfer::kv;

constexpr tinfer::ModelConfig shape{.layers = 2,
                                    .hidden = 128,
                                    .heads = 2,
                                    .kv_heads = 1,
                                    .head_dim = 64,
                                    .ffn = 64,
                                    .vocab = 64,
                                    .max_context = 256};
template <class K, class V>
using Cache = kv::PagedKvCache<shape, 16, K, V>;

// What a launch with the kernel's codecs says of layer 1 of a `CacheType` ("" when accepted).
template <class KernelKey, class KernelValue, class CacheType>
std::string refusal() {
    tk::PagedKvLayer const layer = tk::paged_kv_layer<CacheType>(nullptr, 1, nullptr, 1);
    try {
        tk::check_layer_codecs<KernelKey, KernelValue, shape.head_dim>(layer, "decode_attention");
    } catch (tinfer::Error const& error) {
        return error.what();
    }
    return "";
}

bool refused(std::string const& message) {
    return message.find("pass the cache's value codec") != std::string::npos;
}

}  // namespace

// int8 and both fp8 codecs store 4 + head_dim bytes a vector, bf16 and f16 2 x head_dim: a
// size check alone would let V be read with K's codec.
BOOST_AUTO_TEST_CASE(a_launch_reads_each_part_with_the_caches_codec) {
    static_assert(kv::Int8Codec::vector_bytes<64> == kv::Fp8E4M3Codec::vector_bytes<64>);
    static_assert(kv::Bf16Codec::vector_bytes<64> == kv::Fp16Codec::vector_bytes<64>);
    using Int8Fp8 = Cache<kv::Int8Codec, kv::Fp8E4M3Codec>;
    using Bf16Fp16 = Cache<kv::Bf16Codec, kv::Fp16Codec>;
    using E5E4 = Cache<kv::Fp8E5M2Codec, kv::Fp8E4M3Codec>;
    using Bf16Fp32 = Cache<kv::Bf16Codec, kv::Fp32Codec>;

    BOOST_TEST((refusal<kv::Int8Codec, kv::Fp8E4M3Codec, Int8Fp8>()).empty());
    BOOST_TEST((refusal<kv::Bf16Codec, kv::Fp16Codec, Bf16Fp16>()).empty());
    BOOST_TEST((refusal<kv::Fp8E5M2Codec, kv::Fp8E4M3Codec, E5E4>()).empty());
    BOOST_TEST((refusal<kv::Bf16Codec, kv::Fp32Codec, Bf16Fp32>()).empty());

    std::string const int8_v = refusal<kv::Int8Codec, kv::Int8Codec, Int8Fp8>();
    BOOST_TEST(refused(int8_v), int8_v);
    BOOST_TEST(int8_v.find(kv::Fp8E4M3Codec::name) != std::string::npos, int8_v);
    BOOST_TEST(refused(refusal<kv::Bf16Codec, kv::Bf16Codec, Bf16Fp16>()));
    BOOST_TEST(refused(refusal<kv::Fp8E4M3Codec, kv::Fp8E5M2Codec, E5E4>()));  // swapped
    BOOST_TEST(refused(refusal<kv::Bf16Codec, kv::Bf16Codec, Bf16Fp32>()));    // sizes differ too

    // The view addresses the cache's layout: layer 1's V after its K vectors.
    tk::PagedKvLayer const layer = tk::paged_kv_layer<Int8Fp8>(nullptr, 1, nullptr, 1);
    BOOST_TEST(layer.key_offset == Int8Fp8::layer_token_bytes * 16);
    BOOST_TEST(layer.value_offset == layer.key_offset + 16 * Int8Fp8::key_vector_bytes);
    BOOST_TEST(layer.block_bytes == Int8Fp8::bytes_per_block);
}

// A hand-made view that records nothing is not second-guessed (benchmarks build them).
BOOST_AUTO_TEST_CASE(an_unrecorded_layer_is_not_checked) {
    tk::PagedKvLayer const layer{};
    BOOST_CHECK_NO_THROW((tk::check_layer_codecs<kv::Int8Codec, kv::Bf16Codec, 64>(layer, "x")));
}

BOOST_AUTO_TEST_SUITE_END()
