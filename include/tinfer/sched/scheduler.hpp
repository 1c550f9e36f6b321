#pragma once
// The serving loop's scheduler: a type composed from one policy of each kind.
//
// Each step, schedule() ranks the requests by the queue order and fills one forward pass:
//   1. running requests that decode (one token each), highest-ranked first;
//   2. running requests still prefilling, a chunk each as the prefill policy allows;
//   3. swapped requests, swapped back in while blocks, budget and sequence slots last;
//   4. waiting requests, admitted the same way (under static batching only into a new batch).
// A running request whose growth does not fit preempts the lowest-ranked running requests not
// yet scheduled this step; if none is left, a decode preempts itself and a prefill waits. Once a
// request could not be served or anything was preempted, nothing new is admitted this step, so
// no request overtakes a higher-ranked one (this bounds the wait under Fcfs). A request that
// cannot fit the KV cache even with every other request gone is aborted (StepPlan::rejected)
// rather than retried forever.
//
// Contract with the engine: carry out each plan, call on_step_done() after each plan with work,
// and free the KV of ended requests before the next schedule(); after every step apply the
// eviction policy to each sequence holding more than Eviction::max_kept() tokens.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/sched/batching.hpp>
#include <tinfer/sched/eviction.hpp>
#include <tinfer/sched/kv_capacity.hpp>
#include <tinfer/sched/preemption.hpp>
#include <tinfer/sched/prefill.hpp>
#include <tinfer/sched/queue_order.hpp>
#include <tinfer/sched/request.hpp>
#include <tinfer/sched/step_plan.hpp>

namespace tinfer::sched {

template <class Batching, class Prefill, class Preemption, class Order, class Eviction = NoEviction>
class Scheduler {
    // static_assert rather than constrained parameters, so the error names the failing role.
    static_assert(BatchingPolicy<Batching>,
                  "Scheduler's 1st parameter must satisfy tinfer::sched::BatchingPolicy");
    static_assert(PrefillPolicy<Prefill>,
                  "Scheduler's 2nd parameter must satisfy tinfer::sched::PrefillPolicy");
    static_assert(PreemptionPolicy<Preemption>,
                  "Scheduler's 3rd parameter must satisfy tinfer::sched::PreemptionPolicy");
    static_assert(QueueOrder<Order>,
                  "Scheduler's 4th parameter must satisfy tinfer::sched::QueueOrder");
    static_assert(EvictionPolicy<Eviction>,
                  "Scheduler's 5th parameter must satisfy tinfer::sched::EvictionPolicy");

  public:
    using batching_policy = Batching;
    using prefill_policy = Prefill;
    using preemption_policy = Preemption;
    using queue_order = Order;
    using eviction_policy = Eviction;

    // The policies are values: their numbers (max_seqs, max_batched_tokens, the prefill chunk)
    // are chosen here at run time; the types choose the behaviour. Numbers a scheduler cannot
    // run with are refused with tinfer::Error naming them.
    Scheduler() : Scheduler(Batching{}, Prefill{}, Order{}) {}
    explicit Scheduler(Batching batching, Prefill prefill = {}, Order order = {})
        : batching_(std::move(batching)), prefill_(std::move(prefill)), order_(std::move(order)) {
        validate_batching(batching_, "Scheduler batching policy");
        if constexpr (requires { prefill_.max_chunk; })
            if (prefill_.max_chunk <= 0)
                throw Error("Scheduler prefill policy: max_chunk must be positive, got " +
                            std::to_string(prefill_.max_chunk));
    }
    explicit Scheduler(Order order) : Scheduler(Batching{}, Prefill{}, std::move(order)) {}

    Batching const& batching() const { return batching_; }
    Prefill const& prefill() const { return prefill_; }

    // Queues a request. Throws RequestError for an empty prompt, no tokens to generate, an id
    // already live, or a request whose longest re-prefill (prompt + max_new_tokens - 1 tokens,
    // after a recompute late in its life) the prefill policy could never fit in a step's budget.
    void add(NewRequest const& spec) {
        if (spec.prompt_length < 1)
            throw RequestError(to_string(spec.id) + ": prompt_length must be at least 1, got " +
                               std::to_string(spec.prompt_length));
        if (spec.max_new_tokens < 1)
            throw RequestError(to_string(spec.id) + ": max_new_tokens must be at least 1, got " +
                               std::to_string(spec.max_new_tokens));
        if (requests_.contains(spec.id))
            throw RequestError(to_string(spec.id) + " is already queued or running");
        if (spec.seats < 1 || spec.seats > batching_.max_seqs)
            throw RequestError(to_string(spec.id) + ": runs as " + std::to_string(spec.seats) +
                               " sequences; max_seqs is " + std::to_string(batching_.max_seqs));
        int const longest_prefill = spec.prompt_length + spec.max_new_tokens - 1;
        if (prefill_.chunk_length(longest_prefill, batching_.max_batched_tokens) <= 0)
            throw RequestError(to_string(spec.id) + ": prompt_length + max_new_tokens - 1 = " +
                               std::to_string(longest_prefill) +
                               " tokens can never be prefilled in one step's budget of " +
                               std::to_string(batching_.max_batched_tokens) + " tokens");
        Request request{.id = spec.id,
                        .prompt_length = spec.prompt_length,
                        .max_new_tokens = spec.max_new_tokens,
                        .priority = spec.priority,
                        .tenant = spec.tenant,
                        .arrival = next_arrival_++,
                        .seats = spec.seats};
        Request const& stored = requests_.emplace(spec.id, request).first->second;
        waiting_.push_back(spec.id);
        if constexpr (requires { order_.on_arrival(stored); }) order_.on_arrival(stored);
    }

    // A request that already holds KV: a choice of an n > 1 request, forked from the prompt's
    // KV after its pass with its first token sampled (`computed` positions cached, `generated`
    // tokens sampled). It joins the running set at once, beside the choice it forked from, in
    // the seat `leader` was admitted with for it (NewRequest::seats), so max_seqs holds. (If
    // the leader ended on its first token it has no seats left: the choice joins regardless,
    // its KV already held, and the running set may exceed max_seqs until one ends.)
    void add_forked(NewRequest const& spec, RequestId leader, int computed, int generated) {
        if (requests_.contains(spec.id))
            throw RequestError(to_string(spec.id) + " is already queued or running");
        if (computed < 1 || generated < 1 || computed > spec.prompt_length + generated - 1 ||
            generated >= spec.max_new_tokens)
            throw std::logic_error("Scheduler::add_forked: " + to_string(spec.id) + " with " +
                                   std::to_string(computed) + " positions computed and " +
                                   std::to_string(generated) + " of " +
                                   std::to_string(spec.max_new_tokens) + " tokens generated");
        Request request{.id = spec.id,
                        .prompt_length = spec.prompt_length,
                        .max_new_tokens = spec.max_new_tokens,
                        .priority = spec.priority,
                        .tenant = spec.tenant,
                        .arrival = next_arrival_++,
                        .computed = computed,
                        .generated = generated,
                        .state = RequestState::running};
        if (!Batching::joins_running_batch) {
            request.batch = current_batch_;
            ++live_batch_members_;
        }
        release_seat(leader);
        Request const& stored = requests_.emplace(spec.id, request).first->second;
        running_.push_back(spec.id);
        if constexpr (requires { order_.on_arrival(stored); }) order_.on_arrival(stored);
    }

    // A choice of `leader`'s that ended on the first token it sampled from the prompt's pass
    // gives back the seat held for it (as does add_forked for one that runs on).
    void release_seat(RequestId leader) {
        auto const found = requests_.find(leader);
        if (found != requests_.end() && found->second.seats > 1) --found->second.seats;
    }

    // Sequences the running set holds seats for: each running request and the choices still
    // to fork from it; never over max_seqs but where add_forked says.
    int running_seats() const {
        int seats = 0;
        for (RequestId id : running_) seats += requests_.at(id).seats;
        return seats;
    }

    // Queues a request whose prompt KV and first token were computed elsewhere (prefill/decode
    // disaggregation): it enters as a swapped request (its KV is in host memory, the engine
    // imports it when this swaps it in), the prompt computed and one token generated, so its
    // next work is a decode. Refused like add(), and when it has nothing left to generate.
    void add_transferred(NewRequest const& spec) {
        if (spec.max_new_tokens < 2)
            throw RequestError(to_string(spec.id) +
                               ": a transferred request has generated its first token; "
                               "max_new_tokens must be at least 2, got " +
                               std::to_string(spec.max_new_tokens));
        add(spec);
        Request& request = requests_.at(spec.id);
        std::erase(waiting_, spec.id);
        request.computed = spec.prompt_length;
        request.generated = 1;
        request.state = RequestState::swapped;
        swapped_.push_back(spec.id);
    }

    // Ends a live request. Returns the state it was in, which tells the engine where its KV
    // lives (running: device, swapped: host, waiting: nowhere), or nothing when the id is not
    // live (never added, or already ended).
    std::optional<RequestState> abort(RequestId id) {
        auto const found = requests_.find(id);
        if (found == requests_.end()) return std::nullopt;
        RequestState const previous = found->second.state;
        end(found->second, RequestState::aborted);
        return previous;
    }

    template <KvCapacity Kv>
    StepPlan schedule(Kv const& kv) {
        static_assert(!Preemption::uses_host_memory || SwapCapacity<Kv>,
                      "this Scheduler's PreemptionPolicy swaps to host memory: schedule() needs "
                      "a KV capacity satisfying tinfer::sched::SwapCapacity");
        if (awaiting_results_)
            throw std::logic_error(
                "Scheduler::schedule called before on_step_done reported "
                "the previous step");
        StepPlan plan;
        Step step{.tokens_left = batching_.max_batched_tokens,
                  .free_blocks = static_cast<int>(kv.free_blocks())};
        if constexpr (Preemption::uses_host_memory && SwapCapacity<Kv>)
            step.free_host_blocks = static_cast<int>(kv.free_host_blocks());
        rank(running_);
        rank(swapped_);
        rank(waiting_);
        schedule_running(kv, plan, step, WorkKind::decode);
        schedule_running(kv, plan, step, WorkKind::prefill);
        if (!step.stalled) swap_in(kv, plan, step);
        if (!step.stalled) admit(kv, plan, step);
        // Swapped-in requests may decode: the batch still lists every decode first.
        std::stable_partition(plan.work.begin(), plan.work.end(),
                              [](ScheduledWork const& w) { return w.kind == WorkKind::decode; });
        last_work_ = plan.work;
        awaiting_results_ = !plan.work.empty();
        return plan;
    }

    // Records the step the last plan described: its work was computed, and `outcomes` holds one
    // entry per work item that sampled. Returns the requests that finished; the engine frees
    // their KV. Requests aborted since the plan are skipped.
    std::vector<RequestId> on_step_done(std::span<StepOutcome const> outcomes) {
        std::unordered_map<RequestId, bool> sampled;  // id -> its outcome was reported
        for (ScheduledWork const& work : last_work_) {
            auto const found = requests_.find(work.id);
            if (found == requests_.end()) continue;
            Request& request = found->second;
            request.computed += work.token_count;
            if constexpr (requires { order_.on_served(request, work.token_count); })
                order_.on_served(request, work.token_count);
            if (work.samples_token) sampled.emplace(work.id, false);
        }
        std::vector<RequestId> finished;
        for (StepOutcome const& outcome : outcomes) {
            auto const found = requests_.find(outcome.id);
            if (found == requests_.end()) continue;
            auto const expected = sampled.find(outcome.id);
            if (expected == sampled.end() || expected->second)
                throw std::logic_error("Scheduler::on_step_done: " + to_string(outcome.id) +
                                       " did not sample in the last step, or was reported twice");
            if (outcome.tokens_generated < 1)
                throw std::logic_error("Scheduler::on_step_done: " + to_string(outcome.id) +
                                       " sampled but reports no token");
            expected->second = true;
            Request& request = found->second;
            request.generated += outcome.tokens_generated;
            if (outcome.finished || request.generated >= request.max_new_tokens) {
                finished.push_back(request.id);
                end(request, RequestState::finished);
            }
        }
        for (auto const& [id, reported] : sampled)
            if (!reported)
                throw std::logic_error("Scheduler::on_step_done: no outcome for " + to_string(id) +
                                       ", which sampled in the last step");
        last_work_.clear();
        awaiting_results_ = false;
        return finished;
    }

    // Ids in rank order as of the last schedule(); requests added since come last.
    std::span<RequestId const> waiting() const { return waiting_; }
    std::span<RequestId const> running() const { return running_; }
    std::span<RequestId const> swapped() const { return swapped_; }
    bool has_work() const { return !requests_.empty(); }

    // The live record, or nullptr once the request has ended.
    Request const* find(RequestId id) const {
        auto const found = requests_.find(id);
        return found == requests_.end() ? nullptr : &found->second;
    }
    Order const& order() const { return order_; }

    // KV tokens a request holds between steps: the eviction policy caps them.
    static constexpr int cached_length(Request const& request) {
        return std::min(request.computed, Eviction::max_kept());
    }

  private:
    // What is left of this step while it is being planned.
    struct Step {
        int tokens_left = 0;
        int free_blocks = 0;
        int free_host_blocks = 0;
        bool stalled = false;  // a request could not be served: admit nothing more this step
        std::unordered_set<RequestId> scheduled = {};
    };

    void rank(std::vector<RequestId>& ids) const {
        std::stable_sort(ids.begin(), ids.end(), [this](RequestId a, RequestId b) {
            return order_.before(requests_.at(a), requests_.at(b));
        });
    }

    template <class Kv>
    static bool fits(Kv const& kv, Request const& request, int tokens, int free_blocks) {
        return kv.blocks_needed(request.id, cached_length(request) + tokens) <= free_blocks;
    }

    // The most tokens, up to `wanted`, whose KV fits in `free_blocks`.
    template <class Kv>
    static int tokens_that_fit(Kv const& kv, Request const& request, int wanted, int free_blocks) {
        if (fits(kv, request, wanted, free_blocks)) return wanted;
        if (!fits(kv, request, 0, free_blocks)) return 0;
        int fitting = 0, too_many = wanted;  // blocks_needed grows with length: bisect
        while (too_many - fitting > 1) {
            int const middle = fitting + (too_many - fitting) / 2;
            (fits(kv, request, middle, free_blocks) ? fitting : too_many) = middle;
        }
        return fitting;
    }

    // Tokens to compute for `request` this step given the budget and blocks left; 0: none.
    template <class Kv>
    int tokens_to_run(Kv const& kv, Request const& request, Step const& step) {
        if (request.is_decoding())
            return step.tokens_left >= 1 && fits(kv, request, 1, step.free_blocks) ? 1 : 0;
        int const wanted = prefill_.chunk_length(request.pending_tokens(), step.tokens_left);
        if (wanted <= 0) return 0;
        int const fitting = tokens_that_fit(kv, request, wanted, step.free_blocks);
        return prefill_.chunk_length(request.pending_tokens(), fitting);
    }

    template <class Kv>
    void add_work(Kv const& kv, Request const& request, int tokens, StepPlan& plan, Step& step) {
        int const kv_length = cached_length(request) + tokens;
        step.free_blocks -= kv.blocks_needed(request.id, kv_length);
        step.tokens_left -= tokens;
        step.scheduled.insert(request.id);
        plan.work.push_back({.id = request.id,
                             .kind = request.is_decoding() ? WorkKind::decode : WorkKind::prefill,
                             .first_position = request.computed,
                             .token_count = tokens,
                             .kv_length = kv_length,
                             .samples_token = tokens == request.pending_tokens()});
    }

    // The lowest-ranked running request ranked below `rank_index` and not yet scheduled.
    std::optional<std::size_t> victim_below(std::size_t rank_index, Step const& step) const {
        for (std::size_t index = running_.size(); index-- > rank_index + 1;)
            if (!step.scheduled.contains(running_[index])) return index;
        return std::nullopt;
    }

    template <class Kv>
    void preempt(Kv const& kv, std::size_t running_index, StepPlan& plan, Step& step) {
        RequestId const id = running_[running_index];
        Request& victim = requests_.at(id);
        bool fits_in_host = false;
        int host_blocks = 0;
        if constexpr (Preemption::uses_host_memory && SwapCapacity<Kv>) {
            host_blocks = static_cast<int>(kv.host_blocks_needed(id));
            fits_in_host = host_blocks <= step.free_host_blocks;
        }
        PreemptionMode const mode = Preemption::choose(victim, fits_in_host);
        if (mode == PreemptionMode::swap && !fits_in_host)
            throw std::logic_error("preemption policy chose to swap " + to_string(id) +
                                   " without room in the host pool");
        step.free_blocks += kv.reclaimable_blocks(id);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
        if (mode == PreemptionMode::swap) {
            step.free_host_blocks -= host_blocks;
            victim.state = RequestState::swapped;
            swapped_.push_back(id);
        } else {
            victim.computed = 0;
            victim.state = RequestState::waiting;
            waiting_.push_back(id);
        }
        ++victim.preemptions;
        step.stalled = true;
        plan.preempted.push_back({.id = id, .mode = mode});
    }

    // Aborts a request that cannot fit the cache even with no other request holding blocks.
    template <class Kv>
    void reject(Kv const& kv, Request& request, StepPlan& plan, Step& step) {
        if (request.state == RequestState::running)
            step.free_blocks += kv.reclaimable_blocks(request.id);
        plan.rejected.push_back(request.id);
        end(request, RequestState::aborted);
    }

    template <class Kv>
    void schedule_running(Kv const& kv, StepPlan& plan, Step& step, WorkKind kind) {
        for (std::size_t index = 0; index < running_.size();) {
            Request& request = requests_.at(running_[index]);
            bool const decoding = request.is_decoding();
            if (decoding != (kind == WorkKind::decode) || step.scheduled.contains(request.id)) {
                ++index;
                continue;
            }
            int const wanted =
                decoding ? 1 : prefill_.chunk_length(request.pending_tokens(), step.tokens_left);
            if (wanted <= 0) {  // the budget is spent; it keeps its blocks for the next step
                step.stalled = true;
                ++index;
                continue;
            }
            while (!fits(kv, request, wanted, step.free_blocks)) {
                std::optional<std::size_t> const victim = victim_below(index, step);
                if (!victim) break;
                preempt(kv, *victim, plan, step);
            }
            int const tokens = tokens_to_run(kv, request, step);
            if (tokens > 0) {
                add_work(kv, request, tokens, plan, step);
                ++index;
            } else if (running_.size() == 1) {
                reject(kv, request, plan, step);  // alone, and still it does not fit
            } else if (decoding) {
                preempt(kv, index, plan, step);  // everyone left ranks higher: it yields
            } else {
                step.stalled = true;  // higher-ranked work holds the blocks; they will free up
                ++index;
            }
        }
    }

    template <class Kv>
    void swap_in(Kv const& kv, StepPlan& plan, Step& step) {
        while (!swapped_.empty() &&
               running_seats() + requests_.at(swapped_.front()).seats <= batching_.max_seqs) {
            Request& request = requests_.at(swapped_.front());
            int const tokens = tokens_to_run(kv, request, step);
            if (tokens == 0) {
                if (!running_.empty()) {
                    step.stalled = true;
                    return;
                }
                swapped_.erase(swapped_.begin());
                reject(kv, request, plan, step);
                continue;
            }
            swapped_.erase(swapped_.begin());
            request.state = RequestState::running;
            running_.push_back(request.id);
            plan.swapped_in.push_back(request.id);
            add_work(kv, request, tokens, plan, step);
        }
    }

    template <class Kv>
    void admit(Kv const& kv, StepPlan& plan, Step& step) {
        // Under static batching only members of the live batch may (re)join it; with none
        // live, this step forms the next batch.
        bool const batch_open = !Batching::joins_running_batch && live_batch_members_ > 0;
        std::uint64_t const forming_batch = current_batch_ + 1;
        for (std::size_t index = 0; index < waiting_.size();) {
            Request& request = requests_.at(waiting_[index]);
            // In order: one that needs more seats than are free waits, and so do those after it.
            if (running_seats() + request.seats > batching_.max_seqs) return;
            if (batch_open && request.batch != current_batch_) {
                ++index;
                continue;
            }
            int const tokens = tokens_to_run(kv, request, step);
            if (tokens == 0) {
                if (!running_.empty()) {
                    step.stalled = true;
                    return;
                }
                waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
                reject(kv, request, plan, step);
                continue;
            }
            waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
            if (!Batching::joins_running_batch && !request.batch) {
                current_batch_ = forming_batch;
                request.batch = forming_batch;
                ++live_batch_members_;
            }
            request.state = RequestState::running;
            running_.push_back(request.id);
            add_work(kv, request, tokens, plan, step);
        }
    }

    // Removes a request from its queue and forgets it, telling the order it left.
    void end(Request& request, RequestState final_state) {
        RequestId const id =
            request.id;  // a copy: erasing by a key inside the erased node is unsafe
        std::vector<RequestId>& queue = request.state == RequestState::running   ? running_
                                        : request.state == RequestState::swapped ? swapped_
                                                                                 : waiting_;
        std::erase(queue, id);
        request.state = final_state;
        if (request.batch && *request.batch == current_batch_ && live_batch_members_ > 0)
            --live_batch_members_;
        if constexpr (requires { order_.on_departure(request); }) order_.on_departure(request);
        requests_.erase(id);
    }

    Batching batching_{};
    Prefill prefill_{};
    Order order_{};
    std::unordered_map<RequestId, Request> requests_;
    std::vector<RequestId> waiting_, running_, swapped_;
    std::uint64_t next_arrival_ = 0;
    std::uint64_t current_batch_ = 0;
    int live_batch_members_ = 0;
    std::vector<ScheduledWork> last_work_;
    bool awaiting_results_ = false;
};

}  // namespace tinfer::sched
