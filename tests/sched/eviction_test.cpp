// KV token eviction policies: exactly which cache slots each keeps, and how the scheduler sizes
// a sequence's KV under one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/sched/scheduler.hpp>
#include "fake_engine.hpp"
#include "step_until.hpp"
#include "testing.hpp"

namespace {

using namespace tinfer::sched;
using tinfer::sched::testing::FakeEngine;
using tinfer::sched::testing::FakeKv;

static_assert(EvictionPolicy<NoEviction>);
static_assert(EvictionPolicy<SlidingWindow<16>>);
static_assert(EvictionPolicy<AttentionSinks<4, 16>>);
static_assert(EvictionPolicy<HeavyHitters<8, 8>>);
static_assert(!EvictionPolicy<Fcfs>);
static_assert(!QueueOrder<NoEviction>);
static_assert(!BatchingPolicy<WholePrompt>);
static_assert(!PrefillPolicy<PreemptBySwap>);
static_assert(!PreemptionPolicy<ChunkedPrefill<8>>);

std::vector<int> slots(std::initializer_list<int> list) {
    return list;
}

std::vector<int> all_slots(int length) {
    std::vector<int> kept(static_cast<std::size_t>(length));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
}

// H2O by its definition, written differently from the policy: an older slot is a heavy hitter
// when fewer than `heavy` older slots beat it (a higher score, or an equal score earlier on).
std::vector<int> heavy_hitters_reference(std::span<float const> scores, int heavy, int recent) {
    int const length = static_cast<int>(scores.size());
    if (length <= heavy + recent) return all_slots(length);
    int const older = length - recent;
    std::vector<int> kept;
    for (int slot = 0; slot < older; ++slot) {
        int beaten_by = 0;
        for (int other = 0; other < older; ++other)
            if (scores[other] > scores[slot] || (scores[other] == scores[slot] && other < slot))
                ++beaten_by;
        if (beaten_by < heavy) kept.push_back(slot);
    }
    for (int slot = older; slot < length; ++slot) kept.push_back(slot);
    return kept;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sched_eviction)

BOOST_AUTO_TEST_CASE(no_eviction_keeps_everything) {
    BOOST_TEST(NoEviction::max_kept() == std::numeric_limits<int>::max());
    BOOST_TEST(NoEviction::select_kept(5, {}) == all_slots(5));
}

BOOST_AUTO_TEST_CASE(sliding_window_keeps_the_last_window_tokens) {
    using Window = SlidingWindow<4>;
    BOOST_TEST(Window::max_kept() == 4);
    BOOST_TEST(Window::select_kept(3, {}) == slots({0, 1, 2}));
    BOOST_TEST(Window::select_kept(4, {}) == slots({0, 1, 2, 3}));
    BOOST_TEST(Window::select_kept(10, {}) == slots({6, 7, 8, 9}));
}

BOOST_AUTO_TEST_CASE(attention_sinks_keep_the_first_sinks_and_the_last_window) {
    using Sinks = AttentionSinks<2, 3>;
    BOOST_TEST(Sinks::max_kept() == 5);
    BOOST_TEST(Sinks::select_kept(5, {}) == all_slots(5));
    BOOST_TEST(Sinks::select_kept(6, {}) == slots({0, 1, 3, 4, 5}));
    BOOST_TEST(Sinks::select_kept(10, {}) == slots({0, 1, 7, 8, 9}));
}

BOOST_AUTO_TEST_CASE(heavy_hitters_keep_the_top_scores_and_the_recent_tokens) {
    using H2O = HeavyHitters<2, 3>;
    BOOST_TEST(H2O::max_kept() == 5);
    //                                  0     1     2     3     4      5     6    | 7   8   9
    std::vector<float> const scores{0.1f, 0.8f, 0.3f, 0.9f, 0.05f, 0.7f, 0.2f, 9.f, 9.f, 9.f};
    BOOST_TEST(H2O::select_kept(10, scores) == slots({1, 3, 7, 8, 9}));
    // Recent slots are kept whatever their score and never take a heavy hitter's place.
    std::vector<float> const low_recent{0.1f, 0.8f, 0.3f, 0.9f, 0.f, 0.f, 0.f};
    BOOST_TEST(H2O::select_kept(7, low_recent) == slots({1, 3, 4, 5, 6}));
    // Short sequences are kept whole, scores or not.
    BOOST_TEST(H2O::select_kept(5, {}) == all_slots(5));
}

BOOST_AUTO_TEST_CASE(heavy_hitters_break_ties_towards_earlier_slots_and_rank_nan_last) {
    using H2O = HeavyHitters<2, 1>;
    std::vector<float> const ties{0.5f, 0.9f, 0.9f, 0.9f, 0.f};
    BOOST_TEST(H2O::select_kept(5, ties) == slots({1, 2, 4}));
    float const nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> const with_nan{nan, 0.1f, nan, 0.2f, 0.f};
    BOOST_TEST(H2O::select_kept(5, with_nan) == slots({1, 3, 4}));
}

BOOST_AUTO_TEST_CASE(heavy_hitters_refuse_a_score_count_that_does_not_match) {
    std::vector<float> const too_few(4, 1.f);
    BOOST_CHECK_THROW((HeavyHitters<2, 3>::select_kept(10, too_few)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(heavy_hitters_match_the_reference_on_random_scores) {
    auto rng = tinfer::testing::seeded_rng(20240611);
    constexpr int heavy = 6, recent = 5, trials = 200, longest = 64;
    std::uniform_int_distribution<int> length_of(1, longest);
    std::uniform_int_distribution<int> coarse_score(0, 7);  // few values: ties are common
    for (int trial = 0; trial < trials; ++trial) {
        int const length = length_of(rng);
        std::vector<float> scores(static_cast<std::size_t>(length));
        for (float& s : scores) s = static_cast<float>(coarse_score(rng));
        std::vector<int> const kept = HeavyHitters<heavy, recent>::select_kept(length, scores);
        BOOST_TEST(kept == heavy_hitters_reference(scores, heavy, recent));
        BOOST_TEST(static_cast<int>(kept.size()) == std::min(length, heavy + recent));
    }
}

// A 6-token prompt generating 40 tokens needs 46 tokens of KV; the cache holds 12. Under an
// 8-token window the scheduler sizes it as at most 8 cached + 1 new, so it runs to the end.
BOOST_AUTO_TEST_CASE(the_scheduler_sizes_kv_by_what_the_eviction_policy_keeps) {
    constexpr int window = 8, block_size = 4, cache_blocks = 3, max_new = 40;
    Scheduler<ContinuousBatching<2, 32>, ChunkedPrefill<4>, PreemptByRecompute, Fcfs,
              SlidingWindow<window>>
        scheduler;
    FakeKv kv(block_size, cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = RequestId{1}, .prompt_length = 6, .max_new_tokens = max_new});
    tinfer::testing::step_until(
        [&] { return !scheduler.has_work(); },
        [&] {
            StepPlan const plan = engine.step();
            BOOST_TEST(plan.rejected.empty());
            for (ScheduledWork const& work : plan.work)
                BOOST_TEST(work.kv_length ==
                           std::min(work.first_position, window) + work.token_count);
        },
        2 * max_new, "the windowed request finishing");
    BOOST_TEST(engine.end_count(RequestId{1}) == 1);
    BOOST_TEST(engine.steps == 2 + max_new - 1);  // two prefill chunks, then the decodes

    // Without eviction the same request cannot fit, and is rejected instead of retried.
    Scheduler<ContinuousBatching<2, 32>, ChunkedPrefill<4>, PreemptByRecompute, Fcfs> unbounded;
    FakeKv small(block_size, cache_blocks);
    FakeEngine unbounded_engine(unbounded, small);
    unbounded.add({.id = RequestId{1}, .prompt_length = 6, .max_new_tokens = max_new});
    bool rejected = false;
    tinfer::testing::step_until(
        [&] { return !unbounded.has_work(); },
        [&] { rejected = rejected || !unbounded_engine.step().rejected.empty(); }, 2 * max_new,
        "the unbounded request being rejected");
    BOOST_TEST(rejected);
}

BOOST_AUTO_TEST_SUITE_END()
