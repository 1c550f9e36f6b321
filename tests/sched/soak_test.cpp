// Property test: every policy combination runs thousands of steps of random arrivals, stop
// conditions and aborts against a KV cache small enough to force preemption, and the invariants
// hold at every step and at the end.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/sched/scheduler.hpp>
#include "fake_engine.hpp"
#include "testing.hpp"

namespace {

using namespace tinfer::sched;
using tinfer::sched::testing::FakeEngine;
using tinfer::sched::testing::FakeKv;

// The workload. The longest request (prompt + max_new - 1 tokens) fits a step's budget whole
// and fits the cache alone, so nothing is rejected; a handful of them overflow the cache, so
// preemption is frequent.
constexpr int block_size = 4;
constexpr int device_blocks = 14;  // 56 tokens
constexpr int host_blocks = 10;    // smaller than demand: swap sometimes falls back to recompute
constexpr int longest_prompt = 30;
constexpr int most_new_tokens = 16;
constexpr int step_budget = 48;
constexpr int arrival_steps = 1500;
constexpr double arrival_chance = 0.2;
constexpr double stop_chance = 0.05;   // a sampled token ends its request by a stop condition
constexpr double abort_chance = 0.02;  // per step, a random live request is aborted
constexpr int priorities = 4;
constexpr int tenants = 3;
static_assert(longest_prompt + most_new_tokens - 1 <= step_budget);
static_assert(longest_prompt + most_new_tokens <= device_blocks * block_size);

// Steps a request can take when it gets the engine to itself: one per token for a prefill
// chunked down to single tokens and one per decode, twice over for one recomputation.
int solo_step_bound(NewRequest const& r) {
    return 2 * (r.prompt_length + r.max_new_tokens);
}

template <class Batching_, class Prefill_, class Preemption_, class Order_,
          class Eviction_ = NoEviction>
struct Combination {
    using Sched = Scheduler<Batching_, Prefill_, Preemption_, Order_, Eviction_>;
};

// Static batches form in one step, so their budget admits whole batches of long prompts.
constexpr int static_batch_size = 4;
using Static = StaticBatching<static_batch_size, static_batch_size * longest_prompt>;
using Continuous = ContinuousBatching<6, step_budget>;
using Chunked = ChunkedPrefill<16>;

template <class... Orders>
struct ForOrders {
    template <class Batching, class Prefill, class Preemption>
    using type = std::tuple<Combination<Batching, Prefill, Preemption, Orders>...>;
};
template <class Batching, class Prefill, class Preemption>
using EveryOrder = ForOrders<Fcfs, Priority, FairShare>::type<Batching, Prefill, Preemption>;

template <class... Tuples>
using Concat = decltype(std::tuple_cat(std::declval<Tuples>()...));

using Combinations = Concat<
    EveryOrder<Static, WholePrompt, PreemptByRecompute>,
    EveryOrder<Static, WholePrompt, PreemptBySwap>, EveryOrder<Static, Chunked, PreemptByRecompute>,
    EveryOrder<Static, Chunked, PreemptBySwap>,
    EveryOrder<Continuous, WholePrompt, PreemptByRecompute>,
    EveryOrder<Continuous, WholePrompt, PreemptBySwap>,
    EveryOrder<Continuous, Chunked, PreemptByRecompute>,
    EveryOrder<Continuous, Chunked, PreemptBySwap>,
    std::tuple<
        Combination<Continuous, Chunked, PreemptBySwap, Fcfs, SlidingWindow<12>>,
        Combination<Continuous, Chunked, PreemptByRecompute, FairShare, AttentionSinks<4, 8>>,
        Combination<Static, WholePrompt, PreemptBySwap, Priority, HeavyHitters<16, 16>>>>;

}  // namespace

BOOST_AUTO_TEST_SUITE(sched_soak)

BOOST_AUTO_TEST_CASE_TEMPLATE(invariants_hold_over_thousands_of_random_steps, Combo, Combinations) {
    using Sched = typename Combo::Sched;
    using Batching = typename Sched::batching_policy;
    constexpr bool fcfs = std::is_same_v<typename Sched::queue_order, Fcfs>;
    constexpr bool static_batching = !Batching::joins_running_batch;
    constexpr bool swaps = Sched::preemption_policy::uses_host_memory;

    auto rng = tinfer::testing::seeded_rng(0x5eed5c4ed);
    std::bernoulli_distribution arrives(arrival_chance), stops(stop_chance), aborts(abort_chance);
    std::uniform_int_distribution<int> prompt_of(1, longest_prompt),
        new_tokens_of(1, most_new_tokens), priority_of(0, priorities - 1),
        tenant_of(0, tenants - 1);

    Sched scheduler;
    FakeKv kv(block_size, device_blocks, host_blocks);
    FakeEngine engine(scheduler, kv);
    std::map<RequestId, NewRequest> added;
    std::map<RequestId, int> arrival_step, wait_bound;
    std::vector<RequestId> first_admission_order;
    std::set<std::uint64_t> finished_batches;
    std::uint64_t next_id = 0;
    int max_steps = arrival_steps;  // grows by each arrival's solo bound: the loop must end by it

    auto live_ids = [&] {
        std::vector<RequestId> ids;
        for (auto const& [id, spec] : added)
            if (engine.end_count(id) == 0) ids.push_back(id);
        return ids;
    };

    while (engine.steps < arrival_steps || scheduler.has_work()) {
        BOOST_REQUIRE_MESSAGE(engine.steps < max_steps,
                              "no progress: still busy after " << max_steps << " steps");
        if (engine.steps < arrival_steps && arrives(rng)) {
            NewRequest const spec{.id = RequestId{next_id++},
                                  .prompt_length = prompt_of(rng),
                                  .max_new_tokens = new_tokens_of(rng),
                                  .priority = priority_of(rng),
                                  .tenant = TenantId(static_cast<std::uint32_t>(tenant_of(rng)))};
            // Under Fcfs everything live is served first; each takes at most its solo bound.
            int bound = solo_step_bound(spec);
            for (RequestId const id : live_ids()) bound += solo_step_bound(added.at(id));
            scheduler.add(spec);
            added.emplace(spec.id, spec);
            arrival_step[spec.id] = engine.steps;
            wait_bound[spec.id] = bound;
            max_steps += solo_step_bound(spec);
        }
        if (aborts(rng)) {
            std::vector<RequestId> const live = live_ids();
            if (!live.empty()) {
                std::uniform_int_distribution<std::size_t> pick(0, live.size() - 1);
                BOOST_REQUIRE(engine.abort(live[pick(rng)]).has_value());
            }
        }

        std::set<RequestId> scheduled_before;
        for (auto const& [id, spec] : added)
            if (engine.first_step(id)) scheduled_before.insert(id);
        StepPlan const plan = engine.step([&](Request const&) { return stops(rng); });

        BOOST_REQUIRE(plan.rejected.empty());
        BOOST_REQUIRE_LE(plan.token_count(), scheduler.batching().max_batched_tokens);
        BOOST_REQUIRE_LE(static_cast<int>(plan.work.size()), scheduler.batching().max_seqs);
        BOOST_REQUIRE_LE(static_cast<int>(scheduler.running().size()), scheduler.batching().max_seqs);
        bool seen_prefill = false;
        std::set<RequestId> in_step;
        for (ScheduledWork const& work : plan.work) {
            BOOST_REQUIRE_MESSAGE(in_step.insert(work.id).second, work.id << " twice in a step");
            BOOST_REQUIRE_GT(work.token_count, 0);
            if (work.kind == WorkKind::prefill) seen_prefill = true;
            BOOST_REQUIRE_MESSAGE(!(seen_prefill && work.kind == WorkKind::decode),
                                  "a decode after a prefill chunk");
            if (!scheduled_before.contains(work.id)) first_admission_order.push_back(work.id);
        }
        if constexpr (static_batching) {
            // The plan's requests all belong to one batch, and every live admitted request belongs
            // to it too: no request joined while an earlier batch had a member left.
            std::set<std::uint64_t> batches;
            for (ScheduledWork const& work : plan.work) {
                Request const* request = scheduler.find(work.id);
                if (request) batches.insert(*request->batch);
            }
            BOOST_REQUIRE_LE(batches.size(), 1u);
            for (RequestId const id : live_ids()) {
                Request const* request = scheduler.find(id);
                if (request->batch && !batches.empty())
                    BOOST_REQUIRE_EQUAL(*request->batch, *batches.begin());
            }
        }
        BOOST_REQUIRE_LE(kv.used_device_blocks(), device_blocks);
        BOOST_REQUIRE_LE(kv.used_host_blocks(), host_blocks);
    }

    BOOST_TEST_MESSAGE(added.size()
                       << " requests in " << engine.steps << " steps; " << engine.recomputes
                       << " recomputes, " << engine.swaps_out << " swaps");
    // Every request ended exactly once, and nothing is left in the cache.
    for (auto const& [id, spec] : added) BOOST_TEST(engine.end_count(id) == 1, id << " ends");
    BOOST_TEST(engine.ends().size() == added.size());
    BOOST_TEST(kv.used_device_blocks() == 0);
    BOOST_TEST(kv.used_host_blocks() == 0);
    BOOST_TEST(scheduler.waiting().empty());
    BOOST_TEST(scheduler.running().empty());
    BOOST_TEST(scheduler.swapped().empty());
    // The workload really exercised preemption (and swapping, where the policy swaps).
    BOOST_TEST(engine.recomputes + engine.swaps_out > 0);
    if constexpr (swaps) BOOST_TEST(engine.swaps_out > 0);
    BOOST_TEST(engine.swaps_in <= engine.swaps_out);

    if constexpr (fcfs) {
        // First admissions follow arrival order: nobody overtakes, so nobody starves ...
        BOOST_TEST(std::is_sorted(first_admission_order.begin(), first_admission_order.end()));
        // ... and each waits at most as long as everything ahead of it could take.
        for (auto const& [id, spec] : added) {
            if (!engine.first_step(id)) continue;  // aborted while waiting
            int const waited = *engine.first_step(id) - arrival_step.at(id);
            BOOST_TEST(waited <= wait_bound.at(id), id << " waited " << waited << " steps");
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
