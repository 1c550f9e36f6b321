// The scheduler's numbers are run-time values of one scheduler type: two budgets compared
// without declaring two types, each plan within the numbers it was given, and numbers a
// scheduler cannot run with refused naming them.
#include <string>

#include <boost/test/unit_test.hpp>

#include <tinfer/sched/scheduler.hpp>

#include "fake_engine.hpp"

using namespace tinfer;
using namespace tinfer::sched;
using namespace tinfer::sched::testing;

namespace {

using Sched = Scheduler<ContinuousBatching<>, ChunkedPrefill<>, PreemptByRecompute, Fcfs>;

// Ten 100-token prompts, one step: how many run and how many tokens the step carries.
StepPlan first_step(Sched scheduler) {
    FakeKv kv(16, 1000);
    FakeEngine<Sched> engine(scheduler, kv);
    for (int i = 1; i <= 10; ++i)
        scheduler.add({.id = RequestId{static_cast<std::uint64_t>(i)},
                       .prompt_length = 100,
                       .max_new_tokens = 4});
    return engine.step();
}

std::string refusal(auto make) {
    try {
        make();
    } catch (Error const& e) {
        return e.what();
    }
    return {};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(runtime_policy)

BOOST_AUTO_TEST_CASE(one_type_many_budgets) {
    // Defaults: 64 sequences, 1024 tokens, chunks of 512: all ten whole prompts fit (1000).
    StepPlan const defaults = first_step(Sched{});
    BOOST_TEST(defaults.work.size() == 10u);
    BOOST_TEST(defaults.token_count() == 1000);
    // Three sequences at most, 150 tokens per step, chunks of 64.
    StepPlan const small = first_step(
        Sched(ContinuousBatching<>{.max_seqs = 3, .max_batched_tokens = 150}, {.max_chunk = 64}));
    BOOST_TEST(small.work.size() <= 3u);
    BOOST_TEST(small.token_count() <= 150);
    for (ScheduledWork const& w : small.work) BOOST_TEST(w.token_count <= 64);
    BOOST_TEST(small.token_count() == 64 + 64 + 22);  // two full chunks, the budget's rest
}

BOOST_AUTO_TEST_CASE(numbers_it_cannot_run_with_are_refused_by_name) {
    BOOST_TEST(refusal([] {
                   Sched(ContinuousBatching<>{.max_seqs = 0});
               }).find("max_seqs must be positive") != std::string::npos);
    BOOST_TEST(refusal([] {
                   Sched(ContinuousBatching<>{.max_seqs = 8, .max_batched_tokens = 4});
               }).find("max_batched_tokens (4) must be at least max_seqs (8)") !=
               std::string::npos);
    BOOST_TEST(refusal([] {
                   Sched({}, ChunkedPrefill<>{.max_chunk = 0});
               }).find("max_chunk must be positive") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
