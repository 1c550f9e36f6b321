#pragma once
// Queue orders rank requests: the first-ranked is served first, the last-ranked running request
// is the preemption victim.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include <tinfer/sched/request.hpp>

namespace tinfer::sched {

// before(a, b): a ranks ahead of b; a strict weak order while schedule() runs.
// An order may also keep state through optional hooks, called by the scheduler:
//   on_arrival(request), on_served(request, tokens computed in a step), on_departure(request).
template <class Order>
concept QueueOrder = std::default_initializable<Order> &&
    requires(Order const& order, Request const& a, Request const& b) {
    { order.before(a, b) } -> std::convertible_to<bool>;
};

// First come, first served.
struct Fcfs {
    bool before(Request const& a, Request const& b) const { return a.arrival < b.arrival; }
};

// Lower priority number first; first come, first served among equals.
struct Priority {
    bool before(Request const& a, Request const& b) const {
        if (a.priority != b.priority) return a.priority < b.priority;
        return a.arrival < b.arrival;
    }
};

// Fair share across tenants, after the Virtual Token Counter of Sheng et al., "Fairness in
// Serving Large Language Models" (OSDI 2024). The exact rule:
//   - served(t) counts every token computed for tenant t's requests: prefill chunk tokens
//     (recomputation after preemption included: it is service the tenant consumed) and decode
//     tokens, added when the step that computed them is done;
//   - requests rank by served(tenant) ascending, then by arrival;
//   - when a tenant with no live request gets one, served(t) is raised to the smallest served()
//     among tenants that have live requests, so idle time is not banked into a later burst
//     that would starve everyone else.
class FairShare {
  public:
    bool before(Request const& a, Request const& b) const {
        std::int64_t const served_a = served(a.tenant), served_b = served(b.tenant);
        if (served_a != served_b) return served_a < served_b;
        return a.arrival < b.arrival;
    }

    void on_arrival(Request const& request) {
        Account& account = accounts_[request.tenant];
        if (account.live_requests == 0) {
            std::int64_t floor = std::numeric_limits<std::int64_t>::max();
            for (auto const& [tenant, other] : accounts_)
                if (other.live_requests > 0) floor = std::min(floor, other.served);
            if (floor != std::numeric_limits<std::int64_t>::max())
                account.served = std::max(account.served, floor);
        }
        ++account.live_requests;
    }
    void on_served(Request const& request, int tokens) {
        accounts_[request.tenant].served += tokens;
    }
    void on_departure(Request const& request) { --accounts_[request.tenant].live_requests; }

    std::int64_t served(TenantId tenant) const {
        auto const found = accounts_.find(tenant);
        return found == accounts_.end() ? 0 : found->second.served;
    }

  private:
    struct Account {
        std::int64_t served = 0;
        int live_requests = 0;
    };
    std::unordered_map<TenantId, Account> accounts_;
};

}  // namespace tinfer::sched
