#pragma once
// Engine<Model, Scheduler, Backend, Kv>: the serving loop, composed of four parts, each in a
// header of its own with one job:
//   RequestIntake    (request_intake.hpp)    prompt tokens, the one set of RequestLimits, and
//                                             the thread-safe inbox of submits and aborts;
//   KvLifecycle      (kv_lifecycle.hpp)      admit, grow, fork, preempt, swap, evict, free;
//   StepRunner       (step_runner.hpp)       plan -> forward -> sample -> stream;
//   SpeculativeRound (speculative_round.hpp) drafts before the pass, verification after.
// The request model (GenerationRequest, TokenEvent, Completion, RequestLimits) is request.hpp,
// the one the whole library uses.
//
//   step():  intake.take()                                 [engine/request_intake]
//              -> scheduler.schedule(kv capacity)          [sched/, no tensors]
//              -> rejected / preempted / swapped_in        [engine/kv_lifecycle, kv/]
//              -> runner.run(plan.work)                    [engine/step_runner, model/, kernels/]
//              -> scheduler.on_step_done, free finished, evict   [sched/, engine/kv_lifecycle]
//
// Prefill/decode disaggregation (engine/handoff.hpp) is this loop with one hook: a prefill-role
// engine hands each request off after its first token (hand_off_after_first_token), a
// decode-role engine takes such requests in with adopt() and decodes them as swapped-in ones.
//
// Speculative decoding (docs/speculative.md) is per request: a request with draft_tokens = γ > 0
// asks the engine's Drafter for up to γ tokens whenever it decodes; it shares the pass with
// requests that do not speculate. Callbacks run on the thread that calls step(). submit() and
// abort() may be called from any thread; they take effect at the start of the next step.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <omp.h>

#include <tinfer/core/backend.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/engine/handoff.hpp>
#include <tinfer/engine/kv_lifecycle.hpp>
#include <tinfer/engine/live_request.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/engine/request_intake.hpp>
#include <tinfer/engine/speculative_round.hpp>
#include <tinfer/engine/step_runner.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/scheduler.hpp>
#include <tinfer/speculative/drafters.hpp>
#include <tinfer/speculative/model_drafters.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

namespace tinfer {

// The KV cache layout an engine uses: block size and the codecs of K and V. Where the blocks
// live is the backend's choice (host memory, or device memory on the CUDA backend).
template <int BlockSize = 16, class KeyCodec = kv::Fp32Codec, class ValueCodec = KeyCodec>
struct PagedKv {
    static constexpr int block_size = BlockSize;
    using Keys = KeyCodec;
    using Values = ValueCodec;
    template <ModelConfig Cfg, class Storage = kv::HostBlocks>
    using Cache = kv::PagedKvCache<Cfg, BlockSize, KeyCodec, ValueCodec, Storage>;
};

// What an engine of Model runs on Backend: the model that computes the steps and the cache
// whose blocks it reads. The host's is Model itself over host blocks; the CUDA backend's is
// specialized in <tinfer/engine/cuda_backend.hpp> (cuda::DeviceModel over device blocks).
template <class Model, class Backend, class Kv>
struct OnBackend;

template <class Model, class Kv>
struct OnBackend<Model, Host, Kv> {
    using StepModel = Model;
    using Cache = typename Kv::template Cache<Model::local_config>;
};

struct EngineOptions {
    std::size_t kv_budget_bytes = std::size_t{256} << 20;
    std::size_t host_swap_bytes = std::size_t{256} << 20;  // host pool for PreemptBySwap
    int threads = 0;                                       // 0: every core
    int max_step_tokens = 1024;  // rows of one forward call; a larger plan runs in several
    bool prefix_caching = true;
    // Activations of the matrix products: float32 (exact; the default) or quantized to int8 per
    // block of 32 as llama.cpp does (kernels::Int8Activations: 4-5x faster decode on a CPU
    // with VNNI, accuracy in docs/performance.md). Greedy output may differ at near-ties.
    bool int8_activations = false;
    // Where the metrics read the time (TTFT, TPOT, latency); empty: the steady clock. Tests
    // inject a manual clock here.
    sched::ClockSource clock;
    // The chat template for requests with messages; empty: the file's own
    // (tok::chat_template_from_gguf, which refuses a template the interpreter cannot run; one
    // given here replaces it before it is read).
    std::optional<tok::ChatTemplate> chat_template;
};

// The default drafter: prompt lookup over 3- down to 1-token suffixes. A Drafter here is one
// object serving every request; one that keeps state per request satisfies
// spec::SequenceDrafter (spec::LayerSkipDrafter, spec::DraftModelDrafter), and one that drafts
// with the target's own layers spec::TargetAttachedDrafter.
using DefaultDrafter = spec::PromptLookupDrafter<3, 1>;

template <class Model, class Scheduler, class Backend = Host, class Kv = PagedKv<>,
          class Drafter = DefaultDrafter>
class Engine {
    static_assert(tinfer::Backend<Backend>,
                  "Engine's 3rd parameter is the backend: tinfer::Host or tinfer::Cuda");
    static_assert(
        requires { typename OnBackend<Model, Backend, Kv>::StepModel; },
        "Engine<Model, Scheduler, Cuda>: include <tinfer/engine/cuda_backend.hpp> (the "
        "CUDA backend; its device half compiles with nvcc, see "
        "model/cuda/device_model.hpp)");
    static_assert(spec::Drafter<Drafter>,
                  "Engine's 5th parameter must satisfy tinfer::spec::Drafter");

  public:
    static constexpr ModelConfig config = Model::config;
    // The model that runs the steps on this backend: Model on the host, its device twin on a GPU
    // (the same decoder layer over the backend's ops).
    using StepModel = typename OnBackend<Model, Backend, Kv>::StepModel;
    // Under tensor parallelism the cache holds this rank's KV heads (Model::local_config).
    using Cache = typename OnBackend<Model, Backend, Kv>::Cache;
    using Parallel = typename StepModel::ParallelPolicy;
    using Batching = typename Scheduler::batching_policy;
    using RequestId = sched::RequestId;
    // Token eviction: after every step, a sequence holding more than Eviction::max_kept() cache
    // slots keeps only Eviction::select_kept of them (kv_lifecycle.hpp).
    using Eviction = typename Scheduler::eviction_policy;
    using KvParts = KvLifecycle<Cache, Eviction>;
    static constexpr bool evicts = KvParts::evicts;
    static_assert(std::same_as<Backend, Host> || !Eviction::needs_attention_scores,
                  "Engine<..., Cuda>: an eviction policy that reads attention scores (H2O) is not "
                  "implemented on the CUDA backend yet: the device attention does not compute "
                  "them (sliding-window and attention-sink eviction run there)");
    // Every rank of a tensor-parallel model must make the same eviction choices, and attention
    // scores are per rank (of its own heads).
    static_assert(Parallel::degree == 1 || !Eviction::needs_attention_scores,
                  "Engine: an eviction policy that reads attention scores (H2O) is not supported "
                  "under tensor parallelism: each rank sees the scores of its own heads only, so "
                  "the ranks would keep different slots");

    // The engine owns the file: the model's weights are views into its mapping.
    Engine(gguf::File file, EngineOptions options) requires std::default_initializable<Drafter> &&
        std::default_initializable<Parallel> : Engine(std::move(file), options, Drafter{}) {}

    Engine(gguf::File file, EngineOptions options,
           Drafter drafter) requires std::default_initializable<Parallel>
        : Engine(std::move(file), options, std::move(drafter), Parallel{}) {}

    // A tensor-parallel rank: the policy (model::TensorParallel over a communicator) is given
    // to the model when it is bound. Every rank runs its own Engine in lockstep: the same
    // requests submitted in the same order and step() called alike, so every rank plans the
    // same batches; the all-reduces inside the forward pass leave every rank the same logits,
    // hence the same tokens.
    // `scheduler` carries the policies' run-time numbers (max_seqs, max_batched_tokens, the
    // prefill chunk); its default takes the policies' defaults.
    Engine(gguf::File file, EngineOptions options, Drafter drafter, Parallel parallel,
           Scheduler scheduler = {});

    // Default drafter and model, the scheduler's numbers chosen here.
    Engine(gguf::File file, EngineOptions options, Scheduler scheduler) requires
        std::default_initializable<Drafter> && std::default_initializable<Parallel>
        : Engine(std::move(file), options, Drafter{}, Parallel{}, std::move(scheduler)) {}

    Engine(Engine const&) = delete;
    Engine& operator=(Engine const&) = delete;

    // Queues a request; returns its id (every choice's events carry it, with their choice
    // index). The callback is copied once per choice, so state it keeps is the choice's own.
    // Thread-safe. A request that can never be served (empty or too long for the model's
    // context or the whole KV cache, nonsense sampling settings) is refused here with
    // tinfer::RequestError and nothing is queued.
    RequestId submit(GenerationRequest request, TokenCallback callback) {
        return intake_.submit(std::move(request), std::move(callback));
    }

    // Ends a request (every choice of it) at the next step; its callback gets a final event
    // with finish = aborted for each choice still running. Thread-safe; unknown or finished
    // ids are ignored (or, on a prefill-role engine, passed to HandoffHooks::abort_elsewhere).
    void abort(RequestId id) { intake_.abort(id); }

    // The prefill role: from now on every request (that `hooks.eligible` accepts) leaves this
    // engine after its first token through `hooks.hand_off`, with its KV blocks. Call before
    // serving, on the thread that calls step().
    void hand_off_after_first_token(HandoffHooks hooks) {
        if constexpr (evicts)
            throw Error(
                "Engine: hand-off needs whole prompt KV; under a token-eviction policy the "
                "cache no longer holds it");
        if (!hooks.hand_off) throw Error("Engine: HandoffHooks.hand_off is empty");
        handoff_ = std::move(hooks);
    }

    // The decode role: takes in a request another engine prefilled (of the same cache type:
    // the blocks are copied in verbatim) and goes on from its second token; `callback` hears
    // the tokens after the first (which the prefilling engine streamed). Thread-safe. Refused
    // with tinfer::RequestError (nothing queued) like submit(), and when the blocks are not
    // what the prompt's positions need.
    RequestId adopt(PrefilledRequest prefilled, TokenCallback callback) {
        std::size_t const prompt_length = prefilled.request.prompt_tokens.size();
        if (prefilled.tokens < 1 || static_cast<std::size_t>(prefilled.tokens) != prompt_length)
            throw RequestError("adopted request: KV of " + std::to_string(prefilled.tokens) +
                               " positions for a prompt of " + std::to_string(prompt_length) +
                               " tokens");
        if (prefilled.first_token < 0 || prefilled.first_token >= config.vocab)
            throw RequestError("adopted request: first token " +
                               std::to_string(prefilled.first_token) +
                               " is outside the vocabulary of " + std::to_string(config.vocab));
        if (prefilled.blocks.size() != KvParts::exported_bytes(prefilled.tokens))
            throw RequestError("adopted request: " + std::to_string(prefilled.blocks.size()) +
                               " bytes of KV blocks, this cache stores " +
                               std::to_string(prefilled.tokens) + " positions in " +
                               std::to_string(KvParts::exported_bytes(prefilled.tokens)));
        if (prefilled.request.n != 1)
            throw RequestError("adopted request: n = " + std::to_string(prefilled.request.n) +
                               "; a request's choices share its prompt's KV on the engine "
                               "that prefilled it");
        if (prefilled.request.max_tokens < 2)
            throw RequestError("adopted request: max_tokens " +
                               std::to_string(prefilled.request.max_tokens) +
                               " leaves nothing after the first token");
        return intake_.adopt(std::move(prefilled), std::move(callback));
    }

    // Tensor parallelism's lockstep (distributed/lockstep.hpp): called at the start of every
    // step with what arrived, before the scheduler sees it; it may replace it. Empty: none.
    void set_inbox_exchange(RequestIntake::InboxExchange exchange) {
        inbox_exchange_ = std::move(exchange);
    }

    // One iteration of the serving loop. Returns whether work remains.
    bool step();

    void run_until_idle() {
        while (step() || intake_.pending()) {
        }
    }

    // Runs until `stop()` returns true, sleeping while there is nothing to do (a server's loop).
    template <class StopRequested>
    void serve(StopRequested stop) {
        while (!stop()) {
            if (step()) continue;
            intake_.wait_for(std::chrono::milliseconds(50));
        }
    }

    // Sleeps until a submit, adopt or abort arrives or `timeout` passes (a loop that also
    // polls something else, as the disaggregated roles do).
    void wait_for_arrivals(std::chrono::milliseconds timeout) { intake_.wait_for(timeout); }

    // Blocking: runs every request to its end and returns them in order, a request's n
    // choices one after another.
    std::vector<Completion> generate(std::vector<GenerationRequest> requests) {
        std::vector<std::size_t> first_of(requests.size());
        std::size_t total = 0;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            first_of[i] = total;
            total += static_cast<std::size_t>(std::max(1, requests[i].n));
        }
        std::vector<Completion> results(total);
        for (std::size_t i = 0; i < requests.size(); ++i) {
            Completion* const choices = &results[first_of[i]];
            int const n = std::max(1, requests[i].n);
            std::vector<std::int32_t> const prompt = intake_.prompt_of(requests[i]);
            for (int c = 0; c < n; ++c) {
                choices[c].prompt_tokens = prompt;
                choices[c].choice = c;
            }
            RequestId const id = submit(std::move(requests[i]), [choices](TokenEvent const& e) {
                Completion& out = choices[e.choice];
                if (e.token >= 0) out.tokens.push_back(e.token);
                out.text += e.text;
                if (e.finish) out.finish = *e.finish;
                if (!e.error.empty()) out.error = e.error;
                if (e.finish) out.speculation = e.speculation;
            });
            for (int c = 0; c < n; ++c) choices[c].id = id;
        }
        run_until_idle();
        return results;
    }

    tok::Tokenizer const& tokenizer() const { return tokenizer_; }
    tok::ChatTemplate const& chat_template() const { return chat_; }
    // What every request is checked against at submit().
    RequestLimits const& request_limits() const { return intake_.limits(); }
    sched::MetricsRecorder const& metrics() const { return metrics_; }
    // For long-running loops: hands over the finished requests' metrics and forgets them.
    std::vector<sched::RequestMetrics> take_finished_metrics() { return metrics_.take_finished(); }
    // Speculation over every request so far: a round is one decode pass of a request with
    // draft_tokens > 0 (with or without drafts that step).
    spec::SpeculationStats const& speculation_stats() const { return speculation_.totals(); }
    Cache const& cache() const { return kv_.cache(); }
    Drafter const& drafter() const { return speculation_.drafter(); }
    Scheduler const& scheduler() const { return scheduler_; }
    std::size_t live_requests() const { return live_.size(); }
    int queued_requests() const {
        return static_cast<int>(intake_.queued() + scheduler_.waiting().size());
    }

  private:
    // The scheduler's view of the cache: device blocks, plus the host pool for swapping.
    struct Capacity {
        Engine const* engine;
        SequenceKv const* kv_of(RequestId id) const {
            auto const it = engine->live_.find(id);
            return it == engine->live_.end() ? nullptr : &it->second.kv;
        }
        int free_blocks() const { return engine->kv_.free_blocks(); }
        int blocks_needed(RequestId id, int length) const {
            auto const it = engine->live_.find(id);
            return engine->kv_.blocks_needed(it == engine->live_.end() ? nullptr : &it->second,
                                             length);
        }
        int reclaimable_blocks(RequestId id) const {
            return engine->kv_.reclaimable_blocks(kv_of(id));
        }
        int free_host_blocks() const { return engine->kv_.free_host_blocks(); }
        int host_blocks_needed(RequestId id) const {
            return engine->kv_.host_blocks_needed(kv_of(id));
        }
    };

    // The options the backend cannot honour, refused before the model loads (a device model
    // would upload its weights first).
    static EngineOptions checked_for_backend(EngineOptions options) {
        if (!std::same_as<Backend, Host> && options.int8_activations)
            throw Error("Engine: int8 activations are not implemented on the CUDA backend");
        return options;
    }

    // Rows of one forward call: the step's token budget, split when max_step_tokens is less.
    int step_rows() const {
        if (options_.max_step_tokens <= 0)
            throw Error("EngineOptions.max_step_tokens must be positive");
        return std::min(options_.max_step_tokens, scheduler_.batching().max_batched_tokens);
    }

    RequestLimits limits() const {
        RequestLimits limits{.vocab = config.vocab,
                             .max_context = config.max_context,
                             .max_cached_tokens = kv_.max_request_tokens(config.max_context),
                             .max_draft_tokens = step_rows() - 1,
                             .max_choices = scheduler_.batching().max_seqs};
        if (evicts)
            limits.speculation_refusal =
                "under a token-eviction policy, rolling back drafts would need the slots "
                "eviction has already compacted";
        if (Parallel::degree > 1)
            limits.grammar_refusal =
                std::string(model::is_pipeline_parallel<Parallel> ? "under pipeline"
                                                                  : "under tensor") +
                " parallelism the ranks' lockstep carries a request's tokens and settings, not "
                "its grammar";
        return limits;
    }

    sched::NewRequest scheduled_as(RequestId id, LiveRequest const& r) const {
        return {.id = id,
                .prompt_length = static_cast<int>(r.prompt.size()),
                .max_new_tokens = r.request.max_tokens,
                .priority = r.request.priority,
                .tenant = sched::TenantId{r.request.tenant},
                // Choice 0 is admitted with a seat for each choice that forks from it.
                .seats = r.choice == 0 ? r.request.n : 1};
    }

    // Moves submitted requests into the scheduler and carries out aborts. Of a request with
    // n > 1 only choice 0 is scheduled; the others wait for its prompt's pass.
    void take_inbox() {
        RequestIntake::Inbox inbox = intake_.take();
        if (inbox_exchange_) inbox_exchange_(inbox);
        auto& [arrivals, aborts] = inbox;
        for (RequestIntake::Arrival& p : arrivals) {
            int const n = p.request.n;
            std::vector<LiveRequest> choices;
            for (int c = 0; c < n; ++c) {
                GenerationRequest request = c + 1 < n ? p.request : std::move(p.request);
                request.sampling.seed += static_cast<std::uint64_t>(c);
                std::vector<std::int32_t> context = p.prompt;
                StopConditions conditions = stop_conditions_of(request);
                choices.push_back(
                    LiveRequest{.request = std::move(request),
                                .group = p.id,
                                .choice = c,
                                .awaiting_fork = c > 0,
                                .prompt = p.prompt,
                                .callback = p.callback,
                                .output = OutputStream(tokenizer_, std::move(conditions)),
                                .context = std::move(context)});
            }
            try {
                sched::NewRequest const spec = scheduled_as(p.id, choices.front());
                if (p.transferred) {
                    scheduler_.add_transferred(spec);
                } else {
                    scheduler_.add(spec);
                }
            } catch (RequestError const& e) {
                for (int c = 0; c < n; ++c) {
                    TokenEvent event{.id = p.id,
                                     .choice = c,
                                     .finish = FinishReason::aborted,
                                     .error = e.what()};
                    if (p.callback) p.callback(event);
                }
                continue;
            }
            for (int c = 0; c < n; ++c) {
                RequestId const id = choice_id(p.id, c);
                metrics_.on_arrival(id, sched::TenantId{choices[0].request.tenant},
                                    static_cast<int>(p.prompt.size()), p.submitted);
                if (c > 0) choices.front().followers.push_back(id);
            }
            for (int c = 0; c < n; ++c)
                live_.emplace(choice_id(p.id, c), std::move(choices[static_cast<std::size_t>(c)]));
            if (p.transferred) take_transferred(p.id, live_.at(p.id), std::move(*p.transferred));
        }
        for (RequestId const group : aborts) {
            std::vector<RequestId> ids;
            for (auto const& [id, r] : live_)
                if (r.group == group) ids.push_back(id);
            if (ids.empty()) {  // handed off: the decode engine holds it now
                if (handoff_.abort_elsewhere) handoff_.abort_elsewhere(group);
                continue;
            }
            // Choice 0 first: it finishes the choices still waiting for its prompt.
            std::ranges::sort(ids);
            for (RequestId const id : ids) {
                if (!live_.contains(id)) continue;
                scheduler_.abort(id);
                finish_without_token(id, FinishReason::aborted, "");
            }
        }
    }

    static RequestId choice_id(RequestId group, int choice) {
        return RequestId{static_cast<std::uint64_t>(group) + static_cast<std::uint64_t>(choice)};
    }

    // A choice that sampled its first token from its leader's prompt pass: it ends there, or
    // forks the leader's KV (the prompt, all of the context but that token) and runs on.
    void start_forked(typename StepRunner<StepModel>::Fork const& fork) {
        auto const it = live_.find(fork.follower);
        if (it == live_.end()) return;
        LiveRequest& r = it->second;
        r.awaiting_fork = false;
        if (fork.finished) {
            scheduler_.release_seat(fork.leader);
            retire(fork.follower);
            return;
        }
        r.kv = kv_.fork(live_.at(fork.leader).kv);
        scheduler_.add_forked(scheduled_as(fork.follower, r), fork.leader,
                              /*computed=*/static_cast<int>(r.prompt.size()),
                              /*generated=*/static_cast<int>(r.output.tokens().size()));
    }

    // An adopted request: its first token goes through the output stream (and the grammar)
    // as if sampled here, its text not streamed again (the prefilling engine streamed it), and
    // its blocks wait in host memory for the scheduler to swap them in.
    void take_transferred(RequestId id, LiveRequest& r, RequestIntake::Arrival::Transferred t) {
        if (r.request.grammar) {
            r.matcher.emplace(r.request.grammar);
            r.matcher->accept_token(t.first_token);
        }
        OutputStream::Step const first = r.output.accept(t.first_token);
        r.context.push_back(t.first_token);
        metrics_.on_token(id);
        kv_.adopt(r.kv, std::move(t.blocks), t.tokens);
        if (first.finish) {  // a prefilling engine ends such a request itself; be safe anyway
            scheduler_.abort(id);
            finish_without_token(id, *first.finish, "");
        }
    }

    // The prefill role: requests that have just sampled their first token (and go on) leave,
    // their KV blocks exported.
    void hand_off_first_tokens(std::span<sched::StepOutcome const> outcomes) {
        for (sched::StepOutcome const& outcome : outcomes) {
            auto const it = live_.find(outcome.id);
            if (outcome.finished || it == live_.end()) continue;
            LiveRequest& r = it->second;
            if (r.output.tokens().size() != 1 || r.kv.seq < 0) continue;
            if (r.request.n > 1) continue;  // its choices share the prompt's KV here
            if (handoff_.eligible && !handoff_.eligible(r.request)) continue;
            PrefilledRequest prefilled{.id = outcome.id,
                                       .request = std::move(r.request),
                                       .first_token = r.output.tokens().front(),
                                       .callback = std::move(r.callback)};
            prefilled.request.prompt_tokens = r.prompt;
            prefilled.tokens = kv_.export_blocks(r.kv, prefilled.blocks);
            scheduler_.abort(outcome.id);
            speculation_.release(outcome.id);
            kv_.free(r, /*keep_prefix=*/true);
            metrics_.on_finished(outcome.id, "handed_off");
            live_.erase(it);
            handoff_.hand_off(std::move(prefilled));
        }
    }

    // Frees what a finished request holds and forgets it; its blocks may stay in the prefix
    // cache.
    void retire(RequestId id) {
        auto const it = live_.find(id);
        if (it == live_.end()) return;
        speculation_.release(id);
        kv_.free(it->second, /*keep_prefix=*/true);
        auto const finish = it->second.output.finish_reason();
        metrics_.on_finished(id, std::string(name_of(finish.value_or(FinishReason::length))));
        live_.erase(it);
    }

    void finish_without_token(RequestId id, FinishReason reason, std::string error) {
        auto const it = live_.find(id);
        if (it == live_.end()) return;
        // Choices still waiting for this one's prompt end with it.
        std::vector<RequestId> const followers = std::move(it->second.followers);
        for (RequestId const f : followers) finish_without_token(f, reason, error);
        TokenEvent event{.id = it->second.group,
                         .choice = it->second.choice,
                         .finish = reason,
                         .error = std::move(error)};
        if (it->second.callback) it->second.callback(event);
        speculation_.release(id);
        kv_.free(it->second, /*keep_prefix=*/false);
        metrics_.on_finished(id, std::string(name_of(reason)));
        live_.erase(it);
    }

    gguf::File file_;
    EngineOptions options_;
    StepModel model_;
    tok::Tokenizer tokenizer_;
    tok::ChatTemplate chat_;
    sched::MetricsRecorder metrics_;
    KvParts kv_;
    Scheduler scheduler_;
    StepRunner<StepModel> runner_;
    SpeculativeRound<Drafter> speculation_;
    RequestIntake intake_;
    Capacity capacity_{this};
    std::unordered_map<RequestId, LiveRequest> live_;
    typename StepRunner<StepModel>::Failures failed_;  // ended by an error this step
    typename StepRunner<StepModel>::Forks forked_;     // choices that start this step
    HandoffHooks handoff_;                             // set on a prefill-role engine
    RequestIntake::InboxExchange inbox_exchange_;
};

// The constructor and step() are defined out of the class, so they are not inline: a program
// that declares `extern template class Engine<...>` for the engines another translation unit
// instantiates (examples/common/serving_engines.hpp) compiles neither, nor the model, cache and
// scheduler code they reach. In-class definitions would be instantiated anyway, for inlining.
template <class Model, class Scheduler, class Backend, class Kv, class Drafter>
Engine<Model, Scheduler, Backend, Kv, Drafter>::Engine(gguf::File file, EngineOptions options,
                                                       Drafter drafter, Parallel parallel,
                                                       Scheduler scheduler)
    : file_(std::move(file)),
      options_(checked_for_backend(options)),
      model_(StepModel::bind(file_, std::move(parallel))),
      tokenizer_(tok::tokenizer_from_gguf(file_)),
      chat_(options.chat_template ? *options.chat_template : tok::chat_template_from_gguf(file_)),
      metrics_(options.clock),
      kv_(options.kv_budget_bytes, options.host_swap_bytes, options.prefix_caching, metrics_),
      scheduler_(std::move(scheduler)),
      runner_(step_rows(), options.threads > 0 ? options.threads : omp_get_num_procs(),
              options.int8_activations),
      speculation_(std::move(drafter), config.vocab),
      intake_(tokenizer_, chat_, limits(), metrics_) {
    // The model's one-time preparation belongs to loading, not to the first request's TTFT.
    if constexpr (requires { model_.template prepare<kernels::Int8Activations>(); }) {
        if (options.int8_activations) model_.template prepare<kernels::Int8Activations>();
    }
    // A device model allocates its step buffers once, now that the step's size is known.
    if constexpr (requires { model_.reserve_steps(1, 1); })
        model_.reserve_steps(step_rows(), scheduler_.batching().max_seqs);
    if constexpr (spec::TargetAttachedDrafter<Drafter, StepModel>)
        speculation_.drafter().attach(model_, runner_.workspace().threads());
    // Model drafters run their passes in the engine's precision.
    if constexpr (requires { speculation_.drafter().set_int8_activations(true); })
        speculation_.drafter().set_int8_activations(options.int8_activations);
}

template <class Model, class Scheduler, class Backend, class Kv, class Drafter>
bool Engine<Model, Scheduler, Backend, Kv, Drafter>::step() {
    take_inbox();
    if (!scheduler_.has_work()) return false;
    sched::StepPlan const plan = scheduler_.schedule(capacity_);
    for (RequestId const id : plan.rejected) {
        finish_without_token(id, FinishReason::aborted,
                             "the request cannot fit the KV cache even on its own");
    }
    for (sched::Preemption const& p : plan.preempted) {
        speculation_.release(p.id);
        kv_.preempt(p.id, live_.at(p.id), p.mode);
    }
    for (RequestId const id : plan.swapped_in) kv_.swap_in(id, live_.at(id));
    if (plan.work.empty()) return scheduler_.has_work();

    std::vector<sched::StepOutcome> const outcomes =
        runner_.run(model_, plan.work, live_, kv_, speculation_, metrics_, failed_, forked_);
    std::vector<RequestId> const ended = scheduler_.on_step_done(outcomes);
    // Before the leaders retire: one that ended on its first token still holds the prompt.
    for (auto const& fork : forked_) start_forked(fork);
    forked_.clear();
    for (auto& [id, error] : failed_) {
        finish_without_token(id, FinishReason::aborted, std::move(error));
    }
    failed_.clear();
    for (RequestId const id : ended) retire(id);
    if (handoff_.hand_off) hand_off_first_tokens(outcomes);
    if constexpr (evicts)
        for (auto& [id, r] : live_) kv_.evict(r.kv);
    metrics_.on_step(plan.token_count(), kv_.utilization(), kv_.usage());
    return scheduler_.has_work() || intake_.pending();
}

}  // namespace tinfer
