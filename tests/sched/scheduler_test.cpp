// Each scheduling policy on a crafted scenario whose plans are worked out by hand.
#include <algorithm>
#include <span>
#include <stdexcept>
#include <string_view>
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
using tinfer::testing::step_until;

constexpr int block_size = 4;
constexpr int roomy_cache_blocks = 1000;  // never the constraint in scenarios about batching

constexpr RequestId id(int n) {
    return RequestId{static_cast<std::uint64_t>(n)};
}

std::vector<RequestId> ids_of(std::vector<ScheduledWork> const& work) {
    std::vector<RequestId> ids;
    for (ScheduledWork const& w : work) ids.push_back(w.id);
    return ids;
}

ScheduledWork const& work_of(StepPlan const& plan, RequestId request) {
    auto const found = std::find_if(plan.work.begin(), plan.work.end(),
                                    [&](ScheduledWork const& w) { return w.id == request; });
    BOOST_REQUIRE_MESSAGE(found != plan.work.end(), request << " is not in the plan");
    return *found;
}

bool in_plan(StepPlan const& plan, RequestId request) {
    return std::any_of(plan.work.begin(), plan.work.end(),
                       [&](ScheduledWork const& w) { return w.id == request; });
}

// Every scenario here ends within a few dozen steps; a scheduler that stops making progress
// fails the case instead of hanging it.
constexpr int scenario_steps = 100;

template <class Sched>
void run_until_idle(FakeEngine<Sched>& engine, Sched const& scheduler) {
    step_until([&] { return !scheduler.has_work(); }, [&] { engine.step(); }, scenario_steps,
               "the scheduler going idle");
}

// Steps from `plan` on until a plan satisfies `happened`; returns that plan.
template <class Sched, class Condition>
StepPlan step_until_plan(FakeEngine<Sched>& engine, StepPlan plan, Condition happened,
                         std::string_view what) {
    step_until([&] { return happened(plan); }, [&] { plan = engine.step(); }, scenario_steps, what);
    return plan;
}

bool preempted(StepPlan const& plan) {
    return !plan.preempted.empty();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sched_batching)

BOOST_AUTO_TEST_CASE(static_batch_admits_nothing_until_the_whole_batch_finished) {
    Scheduler<StaticBatching<2>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 1});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 5});
    scheduler.add({.id = id(3), .prompt_length = 4, .max_new_tokens = 1});

    StepPlan const first = engine.step();
    BOOST_TEST((ids_of(first.work) == std::vector{id(1), id(2)}));
    BOOST_TEST(engine.end_count(id(1)) == 1);  // one token: done after its prefill
    // Request 2 needs four more decodes; a slot is free all along, yet 3 must wait for them.
    for (int decode = 0; decode < 4; ++decode) {
        StepPlan const plan = engine.step();
        BOOST_TEST((ids_of(plan.work) == std::vector{id(2)}));
    }
    BOOST_TEST(engine.end_count(id(2)) == 1);
    StepPlan const next_batch = engine.step();
    BOOST_TEST((ids_of(next_batch.work) == std::vector{id(3)}));
    BOOST_TEST(scheduler.find(id(3)) == nullptr);  // finished within that step
    BOOST_TEST(!scheduler.has_work());
}

BOOST_AUTO_TEST_CASE(continuous_batching_admits_as_soon_as_there_is_room) {
    Scheduler<ContinuousBatching<2, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 1});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 5});
    scheduler.add({.id = id(3), .prompt_length = 4, .max_new_tokens = 1});

    StepPlan const first = engine.step();
    BOOST_TEST((ids_of(first.work) == std::vector{id(1), id(2)}));
    BOOST_TEST(scheduler.waiting().size() == 1u);
    StepPlan const second = engine.step();  // 1 left: 3 joins 2's decode at once
    BOOST_TEST((ids_of(second.work) == std::vector{id(2), id(3)}));
    BOOST_TEST(work_of(second, id(2)).kind == WorkKind::decode);
    BOOST_TEST(work_of(second, id(3)).kind == WorkKind::prefill);
}

BOOST_AUTO_TEST_CASE(max_seqs_caps_the_running_set) {
    Scheduler<ContinuousBatching<2, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    for (int n = 1; n <= 3; ++n)
        scheduler.add({.id = id(n), .prompt_length = 2, .max_new_tokens = 3});
    StepPlan const plan = engine.step();
    BOOST_TEST(plan.work.size() == 2u);
    BOOST_TEST(scheduler.running().size() == 2u);
    BOOST_TEST((std::vector(scheduler.waiting().begin(), scheduler.waiting().end()) ==
                std::vector{id(3)}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sched_prefill)

// Budget 10 tokens, chunks of at most 6. Request 1 (3-token prompt) decodes from step 2 on;
// requests 2 and 3 have 20-token prompts.
BOOST_AUTO_TEST_CASE(chunked_prefill_puts_decodes_first_and_fills_the_budget) {
    constexpr int budget = 10;
    Scheduler<ContinuousBatching<4, budget>, ChunkedPrefill<6>, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 3, .max_new_tokens = 8});
    scheduler.add({.id = id(2), .prompt_length = 20, .max_new_tokens = 8});
    scheduler.add({.id = id(3), .prompt_length = 20, .max_new_tokens = 8});

    StepPlan const first = engine.step();
    BOOST_TEST((ids_of(first.work) == std::vector{id(1), id(2), id(3)}));
    BOOST_TEST(work_of(first, id(1)).token_count == 3);
    BOOST_TEST(work_of(first, id(1)).samples_token);
    BOOST_TEST(work_of(first, id(2)).token_count == 6);  // the chunk limit
    BOOST_TEST(!work_of(first, id(2)).samples_token);    // more prompt follows
    BOOST_TEST(work_of(first, id(3)).token_count == 1);  // what the budget has left
    BOOST_TEST(first.token_count() == budget);

    StepPlan const second = engine.step();
    BOOST_TEST((ids_of(second.work) == std::vector{id(1), id(2), id(3)}));
    BOOST_TEST((work_of(second, id(1)).kind == WorkKind::decode));
    BOOST_TEST(work_of(second, id(1)).token_count == 1);
    BOOST_TEST(work_of(second, id(2)).first_position == 6);
    BOOST_TEST(work_of(second, id(2)).token_count == 6);
    BOOST_TEST(work_of(second, id(3)).first_position == 1);
    BOOST_TEST(work_of(second, id(3)).token_count == 3);
    BOOST_TEST(second.token_count() == budget);

    step_until(
        [&] { return !scheduler.has_work(); },
        [&] {
            StepPlan const plan = engine.step();
            BOOST_TEST(plan.token_count() <= budget);
            auto const first_prefill =
                std::find_if(plan.work.begin(), plan.work.end(),
                             [](ScheduledWork const& w) { return w.kind == WorkKind::prefill; });
            BOOST_TEST(std::none_of(first_prefill, plan.work.end(), [](ScheduledWork const& w) {
                return w.kind == WorkKind::decode;
            }));
        },
        scenario_steps, "the scheduler going idle");
}

BOOST_AUTO_TEST_CASE(whole_prompt_waits_until_the_budget_holds_all_of_it) {
    Scheduler<ContinuousBatching<4, 10>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 6, .max_new_tokens = 4});
    scheduler.add({.id = id(2), .prompt_length = 6, .max_new_tokens = 4});
    scheduler.add({.id = id(3), .prompt_length = 1, .max_new_tokens = 4});

    StepPlan const first = engine.step();
    // 2 does not fit the 4 tokens left, and 3 may not overtake it.
    BOOST_TEST((ids_of(first.work) == std::vector{id(1)}));
    StepPlan const second = engine.step();
    BOOST_TEST((ids_of(second.work) == std::vector{id(1), id(2), id(3)}));
    BOOST_TEST(work_of(second, id(2)).token_count == 6);
    BOOST_TEST(second.token_count() == 8);
}

BOOST_AUTO_TEST_CASE(add_refuses_requests_it_could_never_serve) {
    Scheduler<ContinuousBatching<4, 10>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    BOOST_CHECK_THROW(scheduler.add({.id = id(1), .prompt_length = 0, .max_new_tokens = 4}),
                      tinfer::RequestError);
    BOOST_CHECK_THROW(scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 0}),
                      tinfer::RequestError);
    // After a late recompute it would re-prefill 8 + 3 - 1 = 10 tokens: exactly the budget.
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 3});
    BOOST_CHECK_THROW(scheduler.add({.id = id(1), .prompt_length = 2, .max_new_tokens = 2}),
                      tinfer::RequestError);
    BOOST_CHECK_THROW(scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 4}),
                      tinfer::RequestError);
    BOOST_TEST(scheduler.waiting().size() == 1u);

    // Chunked prefill serves any length.
    Scheduler<ContinuousBatching<4, 10>, ChunkedPrefill<4>, PreemptByRecompute, Fcfs> chunked;
    chunked.add({.id = id(2), .prompt_length = 1000, .max_new_tokens = 1000});
    BOOST_TEST(chunked.waiting().size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sched_queue_order)

BOOST_AUTO_TEST_CASE(priority_runs_lower_numbers_first_and_fcfs_among_equals) {
    Scheduler<ContinuousBatching<1, 64>, WholePrompt, PreemptByRecompute, Priority> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 2, .max_new_tokens = 1, .priority = 5});
    scheduler.add({.id = id(2), .prompt_length = 2, .max_new_tokens = 1, .priority = 1});
    scheduler.add({.id = id(3), .prompt_length = 2, .max_new_tokens = 1, .priority = 5});
    scheduler.add({.id = id(4), .prompt_length = 2, .max_new_tokens = 1, .priority = 1});
    std::vector<RequestId> order;
    step_until([&] { return !scheduler.has_work(); },
               [&] {
                   StepPlan const plan = engine.step();
                   BOOST_REQUIRE_EQUAL(plan.work.size(), 1u);
                   order.push_back(plan.work.front().id);
               },
               scenario_steps, "the scheduler going idle");
    BOOST_TEST((order == std::vector{id(2), id(4), id(1), id(3)}));
}

BOOST_AUTO_TEST_CASE(fair_share_serves_the_tenant_with_fewest_tokens_first) {
    constexpr TenantId heavy{0}, light{1};
    Scheduler<ContinuousBatching<1, 64>, WholePrompt, PreemptByRecompute, FairShare> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 10, .max_new_tokens = 2, .tenant = heavy});
    scheduler.add({.id = id(2), .prompt_length = 10, .max_new_tokens = 2, .tenant = heavy});
    scheduler.add({.id = id(3), .prompt_length = 4, .max_new_tokens = 2, .tenant = light});

    // Nobody served yet: arrival order decides, request 1 runs (10 prefill + 1 decode tokens).
    BOOST_TEST((ids_of(engine.step().work) == std::vector{id(1)}));
    BOOST_TEST((ids_of(engine.step().work) == std::vector{id(1)}));
    BOOST_TEST(scheduler.order().served(heavy) == 11);
    // The light tenant has 0 served, so its later request overtakes request 2.
    BOOST_TEST((ids_of(engine.step().work) == std::vector{id(3)}));
    BOOST_TEST((ids_of(engine.step().work) == std::vector{id(3)}));
    BOOST_TEST(scheduler.order().served(light) == 5);
    BOOST_TEST((ids_of(engine.step().work) == std::vector{id(2)}));
}

BOOST_AUTO_TEST_CASE(fair_share_does_not_let_an_idle_tenant_bank_credit) {
    constexpr TenantId busy{0}, newcomer{1};
    FairShare order;
    Request const busy_request{.id = id(1), .tenant = busy, .arrival = 0};
    order.on_arrival(busy_request);
    order.on_served(busy_request, 500);
    Request const newcomer_request{.id = id(2), .tenant = newcomer, .arrival = 1};
    order.on_arrival(newcomer_request);
    BOOST_TEST(order.served(newcomer) == 500);  // lifted to the least-served live tenant
    BOOST_TEST(order.before(busy_request, newcomer_request));  // a tie: the earlier arrival
    order.on_served(newcomer_request, 1);
    BOOST_TEST(order.before(busy_request, newcomer_request));
    order.on_served(busy_request, 2);
    BOOST_TEST(order.before(newcomer_request, busy_request));
    // Leaving and coming back lifts it to the floor again ...
    order.on_departure(newcomer_request);
    order.on_arrival(newcomer_request);
    BOOST_TEST(order.served(newcomer) == 502);  // max(own 501, floor 502)
    // ... but a tenant already above the floor keeps its own count.
    order.on_served(newcomer_request, 10);
    order.on_departure(newcomer_request);
    order.on_arrival(newcomer_request);
    BOOST_TEST(order.served(newcomer) == 512);
}

// A queue order a user writes: the concept is all it has to satisfy.
struct ShortestPromptFirst {
    bool before(Request const& a, Request const& b) const {
        if (a.prompt_length != b.prompt_length) return a.prompt_length < b.prompt_length;
        return a.arrival < b.arrival;
    }
};
static_assert(QueueOrder<ShortestPromptFirst>);

BOOST_AUTO_TEST_CASE(a_user_written_queue_order_plugs_in) {
    Scheduler<ContinuousBatching<1, 64>, WholePrompt, PreemptByRecompute, ShortestPromptFirst>
        scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 9, .max_new_tokens = 1});
    scheduler.add({.id = id(2), .prompt_length = 3, .max_new_tokens = 1});
    scheduler.add({.id = id(3), .prompt_length = 6, .max_new_tokens = 1});
    std::vector<RequestId> order;
    step_until([&] { return !scheduler.has_work(); },
               [&] { order.push_back(engine.step().work.front().id); }, scenario_steps,
               "the scheduler going idle");
    BOOST_TEST((order == std::vector{id(2), id(3), id(1)}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sched_preemption)

// A cache of 6 blocks of 4 tokens; two requests with 8-token prompts decode until the cache is
// full. Both hold 3 blocks once at 9..12 tokens; at 13 tokens the first needs a fourth block.
constexpr int tight_cache_blocks = 6;

BOOST_AUTO_TEST_CASE(recompute_preempts_the_latest_arrival_which_later_resumes) {
    Scheduler<ContinuousBatching<4, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, tight_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 8});
    scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 8});

    StepPlan plan = engine.step();
    plan = step_until_plan(engine, plan, preempted, "a preemption");
    BOOST_REQUIRE_EQUAL(plan.preempted.size(), 1u);
    BOOST_TEST(plan.preempted.front().id == id(2));
    BOOST_TEST((plan.preempted.front().mode == PreemptionMode::recompute));
    BOOST_TEST((ids_of(plan.work) == std::vector{id(1)}));
    BOOST_TEST(work_of(plan, id(1)).kv_length == 13);
    Request const* victim = scheduler.find(id(2));
    BOOST_REQUIRE(victim != nullptr);
    BOOST_TEST((victim->state == RequestState::waiting));
    BOOST_TEST(victim->computed == 0);
    BOOST_TEST(victim->preemptions == 1);
    int const generated_before = victim->generated;
    BOOST_TEST(generated_before == 5);  // one token from its prefill, four from decodes 9..12

    // It resumes by re-prefilling prompt + generated tokens, then keeps its place in output.
    plan = step_until_plan(
        engine, plan, [](StepPlan const& p) { return in_plan(p, id(2)); }, "the victim resuming");
    ScheduledWork const& resumed = work_of(plan, id(2));
    BOOST_TEST(resumed.first_position == 0);
    BOOST_TEST(resumed.token_count == 8 + generated_before);
    BOOST_TEST(resumed.samples_token);
    run_until_idle(engine, scheduler);
    BOOST_TEST(engine.end_count(id(1)) == 1);
    BOOST_TEST(engine.end_count(id(2)) == 1);
    BOOST_TEST(kv.used_device_blocks() == 0);
}

BOOST_AUTO_TEST_CASE(the_victim_is_the_lowest_priority_not_the_latest_arrival) {
    Scheduler<ContinuousBatching<4, 64>, WholePrompt, PreemptByRecompute, Priority> scheduler;
    FakeKv kv(block_size, tight_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 8, .priority = 9});
    scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 8, .priority = 0});
    StepPlan plan = engine.step();
    plan = step_until_plan(engine, plan, preempted, "a preemption");
    BOOST_TEST(plan.preempted.front().id == id(1));
}

BOOST_AUTO_TEST_CASE(swap_moves_the_victim_to_the_host_and_back_without_recomputing) {
    constexpr int host_blocks = 8;
    Scheduler<ContinuousBatching<4, 64>, WholePrompt, PreemptBySwap, Fcfs> scheduler;
    FakeKv kv(block_size, tight_cache_blocks, host_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 8});
    scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 8});

    StepPlan plan = engine.step();
    plan = step_until_plan(engine, plan, preempted, "a preemption");
    BOOST_TEST(plan.preempted.front().id == id(2));
    BOOST_TEST((plan.preempted.front().mode == PreemptionMode::swap));
    BOOST_TEST(kv.on_host(id(2)));
    Request const* victim = scheduler.find(id(2));
    BOOST_TEST((victim->state == RequestState::swapped));
    BOOST_TEST((std::vector(scheduler.swapped().begin(), scheduler.swapped().end()) ==
                std::vector{id(2)}));
    int const computed_before = victim->computed;

    plan = step_until_plan(
        engine, plan, [](StepPlan const& p) { return !p.swapped_in.empty(); }, "a swap-in");
    BOOST_TEST((plan.swapped_in == std::vector{id(2)}));
    ScheduledWork const& resumed = work_of(plan, id(2));
    BOOST_TEST(resumed.first_position == computed_before);  // its KV came back: no recompute
    BOOST_TEST((resumed.kind == WorkKind::decode));
    run_until_idle(engine, scheduler);
    BOOST_TEST(engine.recomputes == 0);
    BOOST_TEST(kv.used_device_blocks() == 0);
    BOOST_TEST(kv.used_host_blocks() == 0);
}

BOOST_AUTO_TEST_CASE(swap_falls_back_to_recompute_when_the_host_pool_is_full) {
    constexpr int too_few_host_blocks = 2;  // the victim holds 3
    Scheduler<ContinuousBatching<4, 64>, WholePrompt, PreemptBySwap, Fcfs> scheduler;
    FakeKv kv(block_size, tight_cache_blocks, too_few_host_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 8});
    scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 8});
    StepPlan plan = engine.step();
    plan = step_until_plan(engine, plan, preempted, "a preemption");
    BOOST_TEST((plan.preempted.front().mode == PreemptionMode::recompute));
    BOOST_TEST((scheduler.find(id(2))->state == RequestState::waiting));
}

// A preemption policy a user writes: swap only contexts long enough that recomputing them
// costs more than the copy.
struct SwapLongContexts {
    static constexpr int shortest_swapped = 16;
    static constexpr bool uses_host_memory = true;
    static PreemptionMode choose(Request const& victim, bool fits_in_host) {
        return fits_in_host && victim.computed >= shortest_swapped ? PreemptionMode::swap
                                                                   : PreemptionMode::recompute;
    }
};
static_assert(PreemptionPolicy<SwapLongContexts>);

BOOST_AUTO_TEST_CASE(a_user_written_preemption_policy_plugs_in) {
    constexpr int host_blocks = 8;
    Scheduler<ContinuousBatching<4, 64>, WholePrompt, SwapLongContexts, Fcfs> scheduler;
    FakeKv kv(block_size, tight_cache_blocks, host_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 8, .max_new_tokens = 8});
    scheduler.add({.id = id(2), .prompt_length = 8, .max_new_tokens = 8});
    StepPlan plan = engine.step();
    plan = step_until_plan(engine, plan, preempted, "a preemption");
    // The victim had computed 12 positions (8 prompt + 4 decodes): short, so recomputed.
    BOOST_TEST((plan.preempted.front().mode == PreemptionMode::recompute));
}

BOOST_AUTO_TEST_CASE(a_request_that_cannot_fit_even_alone_is_rejected_not_retried) {
    Scheduler<ContinuousBatching<4, 64>, ChunkedPrefill<8>, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, tight_cache_blocks);  // 24 tokens
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 20, .max_new_tokens = 10});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 2});
    std::vector<RequestId> rejected;
    step_until([&] { return !scheduler.has_work(); },
               [&] {
                   StepPlan const plan = engine.step();
                   rejected.insert(rejected.end(), plan.rejected.begin(), plan.rejected.end());
               },
               scenario_steps, "the scheduler going idle");
    BOOST_TEST((rejected == std::vector{id(1)}));
    BOOST_TEST(engine.end_count(id(1)) == 1);
    BOOST_TEST(engine.end_count(id(2)) == 1);
    BOOST_TEST(kv.used_device_blocks() == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(sched_lifecycle)

BOOST_AUTO_TEST_CASE(abort_reports_where_the_request_was_and_ends_it_once) {
    Scheduler<ContinuousBatching<1, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 9});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 9});
    engine.step();
    BOOST_TEST((engine.abort(id(2)) == RequestState::waiting));
    BOOST_TEST((engine.abort(id(1)) == RequestState::running));
    BOOST_TEST(!engine.abort(id(1)).has_value());  // already ended
    BOOST_TEST(!engine.abort(id(7)).has_value());  // never added
    BOOST_TEST(!scheduler.has_work());
    BOOST_TEST(kv.used_device_blocks() == 0);
    // The id is free again once its request ended.
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 1});
    BOOST_TEST(scheduler.has_work());
}

BOOST_AUTO_TEST_CASE(a_request_aborted_mid_step_is_skipped_when_the_step_is_reported) {
    Scheduler<ContinuousBatching<2, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 9});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 9});
    StepPlan const plan = scheduler.schedule(kv);
    BOOST_TEST(plan.work.size() == 2u);
    BOOST_TEST((scheduler.abort(id(1)) == RequestState::running));
    std::vector<StepOutcome> const outcomes{{.id = id(1)}, {.id = id(2)}};
    BOOST_TEST(scheduler.on_step_done(outcomes).empty());
    BOOST_TEST(scheduler.find(id(2))->generated == 1);
    BOOST_TEST(scheduler.find(id(2))->computed == 4);
}

BOOST_AUTO_TEST_CASE(the_step_protocol_is_enforced) {
    Scheduler<ContinuousBatching<2, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 9});
    scheduler.add({.id = id(2), .prompt_length = 4, .max_new_tokens = 9});
    (void)scheduler.schedule(kv);
    BOOST_CHECK_THROW((void)scheduler.schedule(kv), std::logic_error);  // no report yet
    std::vector<StepOutcome> const missing_one{{.id = id(1)}};
    BOOST_CHECK_THROW(scheduler.on_step_done(missing_one), std::logic_error);
}

BOOST_AUTO_TEST_CASE(a_stop_condition_ends_a_request_before_max_new_tokens) {
    Scheduler<ContinuousBatching<2, 64>, WholePrompt, PreemptByRecompute, Fcfs> scheduler;
    FakeKv kv(block_size, roomy_cache_blocks);
    FakeEngine engine(scheduler, kv);
    scheduler.add({.id = id(1), .prompt_length = 4, .max_new_tokens = 50});
    constexpr int stop_after = 3;
    step_until([&] { return !scheduler.has_work(); },
               [&] { engine.step([](Request const& r) { return r.generated + 1 == stop_after; }); },
               10, "the stop condition ending the request");
    BOOST_TEST(engine.steps == stop_after);
}

BOOST_AUTO_TEST_SUITE_END()
