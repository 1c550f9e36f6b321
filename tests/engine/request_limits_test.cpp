// The one set of request limits (engine/request.hpp): each refusal names what is wrong, the
// limits sit exactly where the cache's arithmetic puts them. (Disaggregated decoding adopts
// requests through Engine::adopt, which checks these same limits.)
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/kv_lifecycle.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/sched/eviction.hpp>

#include "testing.hpp"

using namespace tinfer;

namespace {

std::string refusal(GenerationRequest const& request, RequestLimits const& limits) {
    try {
        validate_request(request, request.prompt_tokens, limits);
    } catch (RequestError const& e) {
        return e.what();
    }
    return {};
}

RequestLimits const engine_like{
    .vocab = 100, .max_context = 64, .max_cached_tokens = 48, .max_draft_tokens = 7};

GenerationRequest request_of(int prompt_tokens, int max_tokens) {
    return {.prompt_tokens = std::vector<std::int32_t>(static_cast<std::size_t>(prompt_tokens), 1),
            .max_tokens = max_tokens};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(request_limits)

BOOST_AUTO_TEST_CASE(each_refusal_names_what_is_wrong) {
    auto const named = [](GenerationRequest const& r, std::string const& what) {
        std::string const error = refusal(r, engine_like);
        BOOST_TEST_INFO("refusal: '" << error << "', expected it to name '" << what << "'");
        BOOST_TEST(error.find(what) != std::string::npos);
    };
    BOOST_TEST(refusal(request_of(8, 8), engine_like).empty());
    named(request_of(0, 8), "prompt is empty");
    named(request_of(8, 0), "max_tokens");
    GenerationRequest bad_token = request_of(4, 4);
    bad_token.prompt_tokens[2] = 100;
    named(bad_token, "prompt token 100");
    named(request_of(40, 25), "exceeds the context of 64");
    named(request_of(40, 9), "whole cache holds (48 tokens)");
    GenerationRequest drafts = request_of(4, 4);
    drafts.draft_tokens = 8;
    named(drafts, "draft_tokens must be in [0, 7]");
    drafts.draft_tokens = 3;
    drafts.sampling.logprobs = true;
    named(drafts, "logprobs");
    GenerationRequest stop = request_of(4, 4);
    stop.stop_token_ids = {100};
    named(stop, "stop token id 100");
    stop.stop_token_ids = {};
    stop.stop = {""};
    named(stop, "empty string");
    GenerationRequest hot = request_of(4, 4);
    hot.sampling.top_p = 1.5f;
    BOOST_TEST(!refusal(hot, engine_like).empty());
}

BOOST_AUTO_TEST_CASE(limits_sit_exactly_at_the_boundary) {
    // prompt + max_tokens: 48 is served, 49 is not; 64 is the context.
    BOOST_TEST(refusal(request_of(40, 8), engine_like).empty());
    BOOST_TEST(!refusal(request_of(40, 9), engine_like).empty());
    RequestLimits uncapped = engine_like;
    uncapped.max_cached_tokens = 0;
    BOOST_TEST(refusal(request_of(40, 24), uncapped).empty());
    BOOST_TEST(!refusal(request_of(40, 25), uncapped).empty());
}

BOOST_AUTO_TEST_CASE(speculation_refused_with_the_reason) {
    RequestLimits evicting = engine_like;
    evicting.max_draft_tokens = 0;
    evicting.speculation_refusal = "eviction compacts the slots";
    GenerationRequest drafts = request_of(4, 4);
    drafts.draft_tokens = 2;
    BOOST_TEST(refusal(drafts, evicting).find("eviction compacts the slots") != std::string::npos);
    drafts.draft_tokens = 0;
    BOOST_TEST(refusal(drafts, evicting).empty());
}

// The largest request a cache can ever serve, against a scan of the cache's own arithmetic:
// for a hybrid (sliding-window) cache the fewest blocks a request needs is not linear in its
// length, so the boundary is found by search and checked here position by position.
template <ModelConfig Cfg, int BlockSize>
void check_max_request_tokens(int blocks) {
    using Cache = kv::PagedKvCache<Cfg, BlockSize>;
    sched::MetricsRecorder metrics;
    KvLifecycle<Cache, sched::NoEviction> const kv(
        static_cast<std::size_t>(blocks) * Cache::bytes_per_block, 0, true, metrics);
    std::int64_t const limit = kv.max_request_tokens(Cfg.max_context);
    std::int64_t scanned = 0;
    for (std::int64_t t = 1; t <= Cfg.max_context; ++t) {
        if (Cache::min_blocks_for(t) > kv.cache().total_blocks()) break;
        scanned = t;
    }
    BOOST_TEST_INFO(blocks << " blocks");
    BOOST_TEST(limit == scanned);
}

BOOST_AUTO_TEST_CASE(largest_request_matches_a_scan_of_the_cache) {
    constexpr ModelConfig hybrid = [] {
        ModelConfig c = presets::gemma3_270m;
        c.max_context = 2048;
        return c;
    }();
    for (int const blocks : {12, 40, 97, 160, 400, 1000}) {
        check_max_request_tokens<presets::smollm2_135m, 16>(blocks);
        check_max_request_tokens<hybrid, 16>(blocks);
    }
}

BOOST_AUTO_TEST_SUITE_END()
