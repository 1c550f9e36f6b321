#pragma once
// A fake paged KV cache and an engine loop that carries out a scheduler's plans on it. The fake
// keeps its own per-sequence token counts, so every plan is checked against an accounting the
// scheduler does not share: a reservation that does not fit, a swap without room, or a sequence
// whose cached length differs from what the scheduler believes fails the test.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/sched/scheduler.hpp>

namespace tinfer::sched::testing {

class FakeKv {
  public:
    FakeKv(int block_size, int device_blocks, int host_blocks = 0)
        : block_size_(block_size), device_blocks_(device_blocks), host_blocks_(host_blocks) {}

    // KvCapacity and SwapCapacity.
    int free_blocks() const { return device_blocks_ - used_blocks(device_tokens_); }
    int blocks_needed(RequestId id, int length) const {
        return std::max(0, blocks_for(length) - blocks_for(tokens_in(device_tokens_, id)));
    }
    int reclaimable_blocks(RequestId id) const { return blocks_for(tokens_in(device_tokens_, id)); }
    int free_host_blocks() const { return host_blocks_ - used_blocks(host_tokens_); }
    int host_blocks_needed(RequestId id) const { return reclaimable_blocks(id); }

    // What the engine does to it.
    bool reserve(RequestId id, int length) {
        if (blocks_needed(id, length) > free_blocks()) return false;
        int& tokens = device_tokens_[id];
        tokens = std::max(tokens, length);
        return true;
    }
    void keep(RequestId id, int length) { device_tokens_.at(id) = length; }
    void release(RequestId id) {
        device_tokens_.erase(id);
        host_tokens_.erase(id);
    }
    bool swap_out(RequestId id) {
        int const tokens = tokens_in(device_tokens_, id);
        if (blocks_for(tokens) > free_host_blocks() || host_tokens_.contains(id)) return false;
        device_tokens_.erase(id);
        host_tokens_[id] = tokens;
        return true;
    }
    bool swap_in(RequestId id) {
        auto const found = host_tokens_.find(id);
        if (found == host_tokens_.end() || device_tokens_.contains(id) ||
            blocks_for(found->second) > free_blocks())
            return false;
        device_tokens_[id] = found->second;
        host_tokens_.erase(found);
        return true;
    }

    int device_tokens(RequestId id) const { return tokens_in(device_tokens_, id); }
    bool on_host(RequestId id) const { return host_tokens_.contains(id); }
    int used_device_blocks() const { return used_blocks(device_tokens_); }
    int used_host_blocks() const { return used_blocks(host_tokens_); }
    std::vector<RequestId> device_sequences() const {
        std::vector<RequestId> ids;
        for (auto const& [id, tokens] : device_tokens_) ids.push_back(id);
        return ids;
    }

  private:
    int blocks_for(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }
    static int tokens_in(std::unordered_map<RequestId, int> const& map, RequestId id) {
        auto const found = map.find(id);
        return found == map.end() ? 0 : found->second;
    }
    int used_blocks(std::unordered_map<RequestId, int> const& map) const {
        int blocks = 0;
        for (auto const& [id, tokens] : map) blocks += blocks_for(tokens);
        return blocks;
    }

    int block_size_, device_blocks_, host_blocks_;
    std::unordered_map<RequestId, int> device_tokens_, host_tokens_;
};

// Carries out plans the way the engine will, checking each against the fake cache.
template <class Sched>
class FakeEngine {
  public:
    using Eviction = typename Sched::eviction_policy;
    // Decides whether a sampled token ends its request by a stop condition.
    using StopRule = std::function<bool(Request const&)>;

    FakeEngine(Sched& scheduler, FakeKv& kv) : scheduler_(scheduler), kv_(kv) {}

    // One schedule / execute / report round. Returns the plan it carried out.
    StepPlan step(StopRule const& stops = [](Request const&) { return false; }) {
        StepPlan plan = scheduler_.schedule(kv_);
        for (RequestId const id : plan.rejected) {
            kv_.release(id);
            record_end(id);
        }
        for (Preemption const& preemption : plan.preempted) {
            if (preemption.mode == PreemptionMode::swap) {
                BOOST_REQUIRE_MESSAGE(kv_.swap_out(preemption.id),
                                      "swap-out of " << preemption.id << " does not fit the host");
                ++swaps_out;
            } else {
                kv_.release(preemption.id);
                ++recomputes;
            }
        }
        for (RequestId const id : plan.swapped_in) {
            BOOST_REQUIRE_MESSAGE(kv_.swap_in(id), "swap-in of " << id << " does not fit");
            ++swaps_in;
        }
        std::vector<StepOutcome> outcomes;
        for (ScheduledWork const& work : plan.work) {
            Request const* request = scheduler_.find(work.id);
            BOOST_REQUIRE(request != nullptr);
            BOOST_REQUIRE_EQUAL(request->state, RequestState::running);
            BOOST_REQUIRE_EQUAL(work.first_position, request->computed);
            // The scheduler's idea of the cached length matches what the cache holds.
            BOOST_REQUIRE_EQUAL(kv_.device_tokens(work.id), Sched::cached_length(*request));
            BOOST_REQUIRE_EQUAL(work.kv_length, kv_.device_tokens(work.id) + work.token_count);
            BOOST_REQUIRE_MESSAGE(
                kv_.reserve(work.id, work.kv_length),
                "reserving " << work.kv_length << " tokens for " << work.id << " does not fit");
            if (!first_step_.contains(work.id)) first_step_[work.id] = steps;
            if (work.samples_token)
                outcomes.push_back({.id = work.id, .finished = stops(*request)});
        }
        for (RequestId const id : scheduler_.on_step_done(outcomes)) {
            kv_.release(id);
            record_end(id);
        }
        apply_eviction();
        ++steps;
        return plan;
    }

    // Aborts through the scheduler and frees what the request held, as the engine would.
    std::optional<RequestState> abort(RequestId id) {
        std::optional<RequestState> const previous = scheduler_.abort(id);
        if (previous) {
            BOOST_REQUIRE_EQUAL(kv_.device_tokens(id) > 0, *previous == RequestState::running);
            BOOST_REQUIRE_EQUAL(kv_.on_host(id), *previous == RequestState::swapped);
            kv_.release(id);
            record_end(id);
        }
        return previous;
    }

    int end_count(RequestId id) const {
        auto const found = ends_.find(id);
        return found == ends_.end() ? 0 : found->second;
    }
    std::optional<int> first_step(RequestId id) const {
        auto const found = first_step_.find(id);
        return found == first_step_.end() ? std::nullopt : std::optional<int>(found->second);
    }
    std::map<RequestId, int> const& ends() const { return ends_; }

    int steps = 0;
    int recomputes = 0, swaps_out = 0, swaps_in = 0;

  private:
    void record_end(RequestId id) { ++ends_[id]; }

    // The engine's side of the eviction contract: cut every sequence to what the policy keeps.
    void apply_eviction() {
        for (RequestId const id : kv_.device_sequences()) {
            int const length = kv_.device_tokens(id);
            if (length <= Eviction::max_kept()) continue;
            std::vector<float> scores(static_cast<std::size_t>(length));
            std::uniform_real_distribution<float> score(0.f, 1.f);
            for (float& s : scores) s = score(score_rng_);
            std::vector<int> const kept = Eviction::select_kept(length, scores);
            BOOST_REQUIRE_EQUAL(static_cast<int>(kept.size()), Eviction::max_kept());
            kv_.keep(id, static_cast<int>(kept.size()));
        }
    }

    Sched& scheduler_;
    FakeKv& kv_;
    std::map<RequestId, int> ends_;
    std::unordered_map<RequestId, int> first_step_;
    std::mt19937_64 score_rng_{1};
};

}  // namespace tinfer::sched::testing
