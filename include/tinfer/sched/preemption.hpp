#pragma once
// Preemption policies: what happens to a running request whose KV blocks another, higher-ranked
// request needs. Which request is the victim is the queue order's business (the lowest-ranked).
#include <concepts>

#include <tinfer/sched/request.hpp>
#include <tinfer/sched/step_plan.hpp>

namespace tinfer::sched {

// uses_host_memory: the policy may swap, so the KV capacity must be a SwapCapacity.
// choose(victim, fits_in_host): how to preempt; swap only when fits_in_host (always false for a
// policy that does not use host memory).
template <class Policy>
concept PreemptionPolicy = requires(Request const& victim, bool fits_in_host) {
    { Policy::uses_host_memory } -> std::convertible_to<bool>;
    { Policy::choose(victim, fits_in_host) } -> std::same_as<PreemptionMode>;
};

struct PreemptByRecompute {
    static constexpr bool uses_host_memory = false;
    static constexpr PreemptionMode choose(Request const&, bool) {
        return PreemptionMode::recompute;
    }
};

// Swaps while the host pool has room, then falls back to recompute rather than failing.
struct PreemptBySwap {
    static constexpr bool uses_host_memory = true;
    static constexpr PreemptionMode choose(Request const&, bool fits_in_host) {
        return fits_in_host ? PreemptionMode::swap : PreemptionMode::recompute;
    }
};

}  // namespace tinfer::sched
