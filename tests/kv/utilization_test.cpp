// Memory utilization on a synthetic serving workload: the share of allocated KV memory that
// holds live tokens, paged against contiguous max-length preallocation (the source quotes
// 20-40% for the latter, and PagedAttention's promise is near-zero waste).
#include <boost/test/unit_test.hpp>

#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/kv/utilization.hpp>

using namespace tinfer;
using namespace tinfer::kv;

namespace {
constexpr int max_length = 2048;
// Bookkeeping is all this test exercises, so the smallest shape keeps the pool cheap.
constexpr ModelConfig small{.layers = 1,
                            .hidden = 32,
                            .heads = 1,
                            .kv_heads = 1,
                            .head_dim = 32,
                            .ffn = 32,
                            .vocab = 32,
                            .max_context = max_length,
                            .weights = DType::f32};

template <int BlockSize>
UtilizationReport run(std::vector<RequestLengths> const& requests, int pool_tokens) {
    using Cache = PagedKvCache<small, BlockSize>;
    Cache cache(Cache::bytes_per_block * static_cast<std::size_t>(pool_tokens / BlockSize));
    UtilizationReport const report = measure_utilization(cache, requests, max_length);
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());  // everything finished, no leak
    BOOST_TEST_MESSAGE("block size " << BlockSize << ": paged " << 100 * report.paged
                                     << "%, contiguous preallocation " << 100 * report.contiguous
                                     << "% (" << report.steps << " steps, up to "
                                     << report.peak_running << " running, " << report.preemptions
                                     << " preemptions)");
    return report;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(kv_utilization)

BOOST_AUTO_TEST_CASE(paged_memory_holds_live_tokens_preallocation_does_not) {
    // Chat-like lengths: prompts around 300 tokens, outputs around 200, both heavy-tailed.
    auto const requests = lognormal_requests(601, 400, {.median = 300, .sigma = 0.9},
                                             {.median = 200, .sigma = 0.8}, max_length);
    double mean_length = 0;
    for (auto const& r : requests) mean_length += r.prompt_tokens + r.output_tokens;
    mean_length /= static_cast<double>(requests.size());
    BOOST_TEST_MESSAGE("mean final length " << mean_length << " of at most " << max_length);

    int const pool_tokens = 32 * 1024;  // room for ~16 max-length sequences, many more real ones
    for (auto const& report : {run<8>(requests, pool_tokens), run<16>(requests, pool_tokens),
                               run<32>(requests, pool_tokens)}) {
        BOOST_TEST(report.paged > 0.95);
        BOOST_TEST(report.contiguous < 0.5);
        BOOST_TEST(report.preemptions > 0, "the pool should be under pressure");
    }
}

// Waste is at most one partly filled block per sequence: the paged share is bounded below by
// that, whatever the workload.
BOOST_AUTO_TEST_CASE(paged_waste_is_under_one_block_per_sequence) {
    using Cache = PagedKvCache<small, 16>;
    Cache cache(Cache::bytes_per_block * 64);
    std::vector<int> seqs;
    int const lengths[] = {1, 15, 16, 17, 100};
    for (int length : lengths) {
        seqs.push_back(cache.admit(length));
        BOOST_REQUIRE(cache.reserve(seqs.back(), length));
    }
    BOOST_TEST(cache.live_tokens() == 1 + 15 + 16 + 17 + 100);
    BOOST_TEST(cache.used_blocks() == 1 + 1 + 1 + 2 + 7);
    BOOST_TEST(cache.memory_utilization() == 149.0 / (12 * 16));
    int const child = cache.fork(seqs.back());  // shares everything: counts once
    BOOST_TEST(cache.live_tokens() == 149);
    cache.release(child);
}

BOOST_AUTO_TEST_SUITE_END()
