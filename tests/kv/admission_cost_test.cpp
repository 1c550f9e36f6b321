// PagedKvCache::admission_blocks, the price a scheduler pays for admitting a prompt through the
// prefix cache, against what admit + reserve really take from available_blocks(), over random
// cache states: prompts sharing prefixes, some cached and released, some still live, lengths
// shorter and longer than the cached prefix (a chunked prefill's first chunk). For a plain
// cache the price is exact; for a hybrid (sliding-window) cache it never underestimates.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <tinfer/kv/paged_cache.hpp>

#include "testing.hpp"

using namespace tinfer;

namespace {

constexpr ModelConfig plain{.layers = 2,
                            .hidden = 8,
                            .heads = 2,
                            .kv_heads = 1,
                            .head_dim = 4,
                            .ffn = 8,
                            .vocab = 16,
                            .max_context = 512};
constexpr ModelConfig hybrid = [] {
    ModelConfig c = plain;
    c.layers = 4;
    c.sliding_window = 24;
    c.arch.global_every = 2;
    return c;
}();

template <ModelConfig Cfg, bool exact>
void check_prices(std::uint64_t seed) {
    using Cache = kv::PagedKvCache<Cfg, 8>;
    std::mt19937_64 rng(seed);
    int checked = 0, hits = 0;
    for (int round = 0; round < 200; ++round) {
        Cache cache(static_cast<std::size_t>(40 + rng() % 40) * Cache::bytes_per_block);
        // A few prompts over a 2-token alphabet share prefixes often.
        std::vector<std::vector<int>> prompts;
        std::vector<int> live;
        for (int p = 0; p < 6; ++p) {
            std::vector<int> prompt(static_cast<std::size_t>(10 + rng() % 60));
            for (int& t : prompt) t = static_cast<int>(rng() % 2);
            if (p > 0 && rng() % 2) {  // extend an earlier prompt
                auto const& base = prompts[rng() % prompts.size()];
                std::copy_n(base.begin(), std::min(base.size(), prompt.size()), prompt.begin());
            }
            prompts.push_back(prompt);
            auto const admission = cache.admit(prompt, static_cast<int>(prompt.size()) + 8);
            if (!cache.reserve(admission.seq, static_cast<int>(prompt.size()))) {
                cache.release(admission.seq);
                break;
            }
            std::vector<float> const kv(static_cast<std::size_t>(Cfg.kv_heads) * Cfg.head_dim,
                                        0.5f);
            for (int position = admission.cached_tokens; position < static_cast<int>(prompt.size());
                 ++position)
                for (int layer = 0; layer < Cfg.layers; ++layer)
                    cache.write(admission.seq, layer, position, kv.data(), kv.data());
            cache.cache_prefix(admission.seq, prompt);
            if (rng() % 3 == 0)
                live.push_back(admission.seq);  // still running: its blocks are shared
            else
                cache.release(admission.seq);
        }
        // Price a new prompt, then admit it and see what it took.
        std::vector<int> prompt = prompts[rng() % prompts.size()];
        prompt.resize(prompt.size() + rng() % 20, static_cast<int>(rng() % 2));
        int const length = 1 + static_cast<int>(rng() % prompt.size());
        int const price = cache.admission_blocks(prompt, length);
        int const before = cache.available_blocks();
        if (price > before) continue;  // a scheduler would not admit it now
        auto const admission = cache.admit(prompt, static_cast<int>(prompt.size()) + 8);
        bool const reserved = cache.reserve(admission.seq, length);
        int const taken = before - cache.available_blocks();
        BOOST_TEST_INFO("round " << round << ": prompt " << prompt.size() << ", length " << length
                                 << ", cached " << admission.cached_tokens << ", price " << price
                                 << ", taken " << taken);
        BOOST_TEST(reserved);
        if constexpr (exact)
            BOOST_TEST(taken == price);
        else
            BOOST_TEST(taken <= price);
        ++checked;
        hits += admission.cached_tokens > length;
    }
    BOOST_TEST_MESSAGE(checked << " admissions priced, " << hits
                               << " with a cached prefix longer than the reserved length");
    BOOST_TEST(checked > 100);
    BOOST_TEST(hits > 10);  // the case the price exists for happened
}

}  // namespace

BOOST_AUTO_TEST_SUITE(admission_cost)

BOOST_AUTO_TEST_CASE(price_equals_what_admission_takes) {
    check_prices<plain, true>(testing::seeded_rng(20261201)());
}

BOOST_AUTO_TEST_CASE(hybrid_price_never_underestimates) {
    check_prices<hybrid, false>(testing::seeded_rng(20261202)());
}

BOOST_AUTO_TEST_SUITE_END()
