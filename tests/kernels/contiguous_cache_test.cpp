// ContiguousKvCache: what is written is what views load, per slot and layer, and misuse is
// refused with RequestError.
#include <cstring>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kv/contiguous_cache.hpp>

#include "testing.hpp"

namespace tt = tinfer::testing;

namespace {
constexpr tinfer::ModelConfig small{.layers = 3,
                                    .hidden = 48,
                                    .heads = 6,
                                    .kv_heads = 2,
                                    .head_dim = 8,
                                    .ffn = 64,
                                    .vocab = 100,
                                    .max_context = 64};
using Cache = tinfer::kv::ContiguousKvCache<small>;
static_assert(tinfer::kv::KvStore<Cache>);
}  // namespace

BOOST_AUTO_TEST_SUITE(contiguous_cache)

BOOST_AUTO_TEST_CASE(views_load_what_was_written) {
    auto rng = tt::seeded_rng(50);
    Cache cache(2, 32);
    int const width = small.kv_heads * small.head_dim;
    int const positions = 20;
    // data[slot][layer][position][kv_head][head_dim], for K and V.
    std::vector<float> const k = tt::random_floats(rng, 2 * small.layers * positions * width);
    std::vector<float> const v = tt::random_floats(rng, k.size());
    auto at = [&](int slot, int layer, int position) {
        return ((slot * small.layers + layer) * positions + position) * width;
    };
    for (int slot = 0; slot < 2; ++slot)
        for (int layer = 0; layer < small.layers; ++layer)
            for (int p = 0; p < positions; ++p)
                cache.write(slot, layer, p, k.data() + at(slot, layer, p),
                            v.data() + at(slot, layer, p));
    BOOST_TEST(cache.tokens(0) == positions);

    std::vector<float> loaded(5 * small.head_dim);
    for (int slot = 0; slot < 2; ++slot) {
        for (int layer = 0; layer < small.layers; ++layer) {
            auto const view = cache.view(slot, layer);
            BOOST_TEST(view.tokens() == positions);
            for (int head = 0; head < small.kv_heads; ++head) {
                tt::poison(std::span<float>(loaded));
                view.load_keys(head, 7, 5, loaded.data());
                for (int i = 0; i < 5; ++i)
                    BOOST_TEST(
                        std::memcmp(loaded.data() + i * small.head_dim,
                                    k.data() + at(slot, layer, 7 + i) + head * small.head_dim,
                                    small.head_dim * sizeof(float)) == 0);
                view.load_values(head, 15, 5, loaded.data());
                for (int i = 0; i < 5; ++i)
                    BOOST_TEST(
                        std::memcmp(loaded.data() + i * small.head_dim,
                                    v.data() + at(slot, layer, 15 + i) + head * small.head_dim,
                                    small.head_dim * sizeof(float)) == 0);
            }
        }
    }
    cache.truncate(1, 4);
    BOOST_TEST(cache.view(1, 2).tokens() == 4);
    BOOST_TEST(cache.view(0, 2).tokens() == positions);
    cache.clear(0);
    BOOST_TEST(cache.tokens(0) == 0);
}

BOOST_AUTO_TEST_CASE(refuses_gaps_overflow_and_bad_slots) {
    Cache cache(1, 8);
    std::vector<float> const kv(small.kv_heads * small.head_dim, 1.0f);
    BOOST_CHECK_THROW(cache.write(0, 0, 1, kv.data(), kv.data()), tinfer::RequestError);
    for (int p = 0; p < 8; ++p) cache.write(0, 0, p, kv.data(), kv.data());
    BOOST_CHECK_THROW(cache.write(0, 0, 8, kv.data(), kv.data()), tinfer::RequestError);
    BOOST_CHECK_THROW(cache.write(1, 0, 0, kv.data(), kv.data()), tinfer::RequestError);
    BOOST_CHECK_THROW(cache.write(0, 3, 0, kv.data(), kv.data()), tinfer::RequestError);
    BOOST_CHECK_THROW(Cache(1, small.max_context + 1), tinfer::Error);
}

BOOST_AUTO_TEST_SUITE_END()
