#pragma once
// Engine<Model, Scheduler, Backend, Kv>: the serving loop. Requests come in (prompt text, chat
// messages or token ids, with sampling settings and stop conditions); every step() asks the
// scheduler for a plan, carries it out on the paged KV cache (admissions with prefix reuse,
// preemptions by recompute or swap to a host pool, swap-ins), runs the whole plan as ONE forward
// pass over a mixed batch of prefill chunks and decodes, samples, streams text to each request's
// callback, and reports back to the scheduler.
//
// Speculative decoding (docs/speculative.md) is per request: a request with draft_tokens = γ > 0
// asks the engine's Drafter for up to γ tokens whenever it decodes; its work item becomes
// [last token, drafts...] with logits for every row, verified by spec::verify_drafts. It shares
// the pass with requests that do not speculate. A drafter with per-request state (a draft model,
// the target's first layers: model_drafters.hpp) is told after each round which tokens were
// kept, and when a request ends or is preempted (spec::SequenceDrafter).
//
//   step():  inbox (submit/abort from any thread)
//              -> scheduler.schedule(kv capacity)          [sched/, no tensors]
//              -> rejected / preempted / swapped_in / reserve work   [kv/]
//              -> model.forward(chunks)                     [model/, kernels/]
//              -> sample, OutputStream, callbacks           [kernels/sampling, engine/]
//              -> scheduler.on_step_done, release finished  [sched/, kv/]
//
// Callbacks run on the thread that calls step(). submit() and abort() may be called from any
// thread; they take effect at the start of the next step.
#include <algorithm>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <omp.h>

#include <tinfer/core/backend.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/engine/drafters.hpp>
#include <tinfer/engine/model_drafters.hpp>
#include <tinfer/engine/output_stream.hpp>
#include <tinfer/engine/speculative.hpp>
#include <tinfer/engine/stop_conditions.hpp>
#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/format/tokenizer_gguf.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/scheduler.hpp>

namespace tinfer {

// The KV cache layout an engine uses: block size and the codecs of K and V.
template <int BlockSize = 16, class KeyCodec = kv::Fp32Codec, class ValueCodec = KeyCodec>
struct PagedKv {
    static constexpr int block_size = BlockSize;
    template <ModelConfig Cfg>
    using Cache = kv::PagedKvCache<Cfg, BlockSize, KeyCodec, ValueCodec>;
};

struct EngineOptions {
    std::size_t kv_budget_bytes = std::size_t{256} << 20;
    std::size_t host_swap_bytes = std::size_t{256} << 20;  // host pool for PreemptBySwap
    int threads = 0;                                       // 0: every core
    int max_step_tokens = 1024;  // rows of one forward call; a larger plan runs in several
    bool prefix_caching = true;
    // Activations of the matrix products: float32 (exact; the default) or quantized to int8 per
    // block of 32 as llama.cpp does (precision::Int8Activations: 4-5x faster decode on a CPU
    // with VNNI, accuracy in docs/performance.md). Greedy output may differ at near-ties.
    bool int8_activations = false;
    // Where the metrics read the time (TTFT, TPOT, latency); empty: the steady clock. Tests
    // inject a manual clock here.
    sched::ClockSource clock;
};

// One request. The prompt is `prompt_tokens` if given, else `messages` rendered with the
// model's chat template (with the generation prompt), else `prompt` as plain text.
struct GenerationRequest {
    std::string prompt;
    std::vector<tok::ChatMessage> messages;
    std::vector<std::int32_t> prompt_tokens;
    int max_tokens = 128;
    std::vector<std::string> stop;
    std::vector<std::int32_t> stop_token_ids;
    bool ignore_eos = false;
    kernels::SamplingParams sampling;
    int priority = 0;
    std::uint32_t tenant = 0;
    // γ: draft tokens verified per decode step; 0 decodes one token per step. Greedy output is
    // unchanged by it; sampled output keeps its distribution (not its exact tokens). Needs
    // sampling.logprobs off: verification does not compute the log-probabilities.
    int draft_tokens = 0;
};

// What a request's callback receives, once per generated token; the last event has `finish`.
// A request that ends without a token (aborted, or refused after it was queued) gets one
// event with token -1, `finish` set and, when it was refused, `error`.
struct TokenEvent {
    sched::RequestId id{};
    std::int32_t token = -1;
    std::string text;  // newly visible text; may be empty (a partial character, a stop string)
    std::optional<float> logprob;
    std::vector<kernels::TokenLogprob> top_logprobs;
    std::optional<FinishReason> finish;
    std::string error;
    spec::SpeculationStats speculation;  // the request's totals, on the event with `finish`
};

using TokenCallback = std::function<void(TokenEvent const&)>;

// What Engine::generate returns for each request.
struct Completion {
    sched::RequestId id{};
    std::vector<std::int32_t> prompt_tokens;
    std::vector<std::int32_t> tokens;
    std::string text;
    FinishReason finish = FinishReason::aborted;
    std::string error;
    spec::SpeculationStats speculation;  // zero for a request without draft_tokens
};

// The default drafter: prompt lookup over 3- down to 1-token suffixes. A Drafter here is one
// object serving every request; one that keeps state per request satisfies
// spec::SequenceDrafter (spec::LayerSkipDrafter, spec::DraftModelDrafter), and one that drafts
// with the target's own layers spec::TargetAttachedDrafter.
using DefaultDrafter = spec::PromptLookupDrafter<3, 1>;

template <class Model, class Scheduler, class Backend = Host, class Kv = PagedKv<>,
          class Drafter = DefaultDrafter>
class Engine {
    static_assert(std::same_as<Backend, Host>,
                  "Engine: the serving loop runs on the Host backend; the CUDA kernels are used "
                  "through tinfer::kernels::cuda directly");
    static_assert(spec::Drafter<Drafter>,
                  "Engine's 5th parameter must satisfy tinfer::spec::Drafter");

  public:
    static constexpr ModelConfig config = Model::config;
    using Cache = typename Kv::template Cache<config>;
    using Batching = typename Scheduler::batching_policy;
    using RequestId = sched::RequestId;
    // Token eviction: after every step, a sequence holding more than Eviction::max_kept() cache
    // slots keeps only Eviction::select_kept of them (compacted in place); its tokens keep the
    // RoPE positions they were written with, so a token's cache slot is its position minus the
    // tokens evicted before it.
    using Eviction = typename Scheduler::eviction_policy;
    static constexpr bool evicts = !std::same_as<Eviction, sched::NoEviction>;

    // The engine owns the file: the model's weights are views into its mapping.
    Engine(gguf::File file, EngineOptions options) requires std::default_initializable<Drafter>
        : Engine(std::move(file), options, Drafter{}) {}

    Engine(gguf::File file, EngineOptions options, Drafter drafter)
        : file_(std::move(file)),
          options_(options),
          model_(Model::bind(file_)),
          tokenizer_(tok::tokenizer_from_gguf(file_)),
          chat_(tok::chat_template_from_gguf(file_)),
          cache_(options.kv_budget_bytes),
          host_pool_blocks_(static_cast<int>(options.host_swap_bytes / Cache::bytes_per_block)),
          workspace_(step_rows(options),
                     options.threads > 0 ? options.threads : omp_get_num_procs()),
          sampling_(config.vocab),
          logits_(static_cast<std::size_t>(step_rows(options)) * config.vocab),
          metrics_(options.clock),
          drafter_(std::move(drafter)) {
        if constexpr (spec::TargetAttachedDrafter<Drafter, Model>)
            drafter_.attach(model_, workspace_.threads());
        // Model drafters run their passes in the engine's precision.
        if constexpr (requires { drafter_.set_int8_activations(true); })
            drafter_.set_int8_activations(options.int8_activations);
    }

    Engine(Engine const&) = delete;
    Engine& operator=(Engine const&) = delete;

    // Queues a request; returns its id. Thread-safe. A request that can never be served (empty
    // or too long for the model's context or the whole KV cache, nonsense sampling settings) is
    // refused here with tinfer::RequestError and nothing is queued.
    RequestId submit(GenerationRequest request, TokenCallback callback) {
        Pending pending{.request = std::move(request), .callback = std::move(callback)};
        pending.prompt = tokenize(pending.request);
        validate_request(pending.request, pending.prompt);
        std::lock_guard lock(inbox_mutex_);
        pending.id = RequestId{next_id_++};
        RequestId const id = pending.id;
        inbox_.push_back(std::move(pending));
        inbox_ready_.notify_all();
        return id;
    }

    // Ends a request at the next step; its callback gets a final event with finish = aborted.
    // Thread-safe; unknown or finished ids are ignored.
    void abort(RequestId id) {
        std::lock_guard lock(inbox_mutex_);
        aborts_.push_back(id);
        inbox_ready_.notify_all();
    }

    // One iteration of the serving loop. Returns whether work remains.
    bool step() {
        take_inbox();
        if (!scheduler_.has_work()) return false;
        sched::StepPlan const plan = scheduler_.schedule(capacity_);
        for (RequestId const id : plan.rejected) {
            finish_without_token(id, FinishReason::aborted,
                                 "the request cannot fit the KV cache even on its own");
        }
        for (sched::Preemption const& p : plan.preempted) preempt(p);
        for (RequestId const id : plan.swapped_in) swap_in(id);
        if (plan.work.empty()) return scheduler_.has_work();

        std::vector<sched::StepOutcome> outcomes = run(plan.work);
        std::vector<RequestId> const ended = scheduler_.on_step_done(outcomes);
        for (auto& [id, error] : failed_) {
            finish_without_token(id, FinishReason::aborted, std::move(error));
        }
        failed_.clear();
        for (RequestId const id : ended) retire(id, /*keep_prefix=*/true);
        if constexpr (evicts) evict();
        record_step(plan);
        return scheduler_.has_work() || inbox_pending();
    }

    void run_until_idle() {
        while (step() || inbox_pending()) {
        }
    }

    // Runs until `stop()` returns true, sleeping while there is nothing to do (a server's loop).
    template <class StopRequested>
    void serve(StopRequested stop) {
        while (!stop()) {
            if (step()) continue;
            std::unique_lock lock(inbox_mutex_);
            inbox_ready_.wait_for(lock, std::chrono::milliseconds(50),
                                  [&] { return !inbox_.empty() || !aborts_.empty(); });
        }
    }

    // Blocking: runs every request to its end and returns them in order.
    std::vector<Completion> generate(std::vector<GenerationRequest> requests) {
        std::vector<Completion> results(requests.size());
        for (std::size_t i = 0; i < requests.size(); ++i) {
            Completion& out = results[i];
            out.id = submit(std::move(requests[i]), [&out](TokenEvent const& e) {
                if (e.token >= 0) out.tokens.push_back(e.token);
                out.text += e.text;
                if (e.finish) out.finish = *e.finish;
                if (!e.error.empty()) out.error = e.error;
                if (e.finish) out.speculation = e.speculation;
            });
        }
        run_until_idle();
        return results;
    }

    tok::Tokenizer const& tokenizer() const { return tokenizer_; }
    tok::ChatTemplate const& chat_template() const { return chat_; }
    sched::MetricsRecorder const& metrics() const { return metrics_; }
    // For long-running loops: hands over the finished requests' metrics and forgets them.
    std::vector<sched::RequestMetrics> take_finished_metrics() { return metrics_.take_finished(); }
    // Speculation over every request so far: a round is one decode pass of a request with
    // draft_tokens > 0 (with or without drafts that step).
    spec::SpeculationStats const& speculation_stats() const { return speculation_totals_; }
    Cache const& cache() const { return cache_; }
    Drafter const& drafter() const { return drafter_; }
    Scheduler const& scheduler() const { return scheduler_; }
    std::size_t live_requests() const { return live_.size(); }
    int queued_requests() const {
        std::lock_guard lock(inbox_mutex_);
        return static_cast<int>(inbox_.size() + scheduler_.waiting().size());
    }

  private:
    struct Pending {
        RequestId id{};
        GenerationRequest request;
        std::vector<std::int32_t> prompt;
        TokenCallback callback;
    };

    // A queued or running request.
    struct Live {
        GenerationRequest request;
        std::vector<std::int32_t> prompt;
        TokenCallback callback;
        OutputStream output;
        std::vector<std::int32_t> context;  // prompt, then every sampled token
        int seq = -1;                       // its sequence in the KV cache while it holds one
        int evicted = 0;                    // tokens dropped by eviction: slot = position - this
        std::vector<float> scores;          // accumulated attention per cache slot (H2O)
        std::vector<std::byte> swapped;     // its KV blocks while swapped to the host
        int swapped_tokens = 0;
        spec::SpeculationStats speculation;

        int max_context() const { return static_cast<int>(prompt.size()) + request.max_tokens; }
    };

    // The scheduler's view of the cache: device blocks, plus the host pool for swapping.
    struct Capacity {
        Engine const* engine;
        int free_blocks() const { return engine->cache_.available_blocks(); }
        int blocks_needed(RequestId id, int length) const {
            Live const* r = engine->find(id);
            if (r && r->seq >= 0) return engine->cache_.blocks_needed(r->seq, length);
            // Swapped out: its import holds only what it held (a hybrid cache: the window).
            if (r && r->swapped_tokens > 0)
                return Cache::blocks_to_resume(r->swapped_tokens, length);
            return Cache::blocks_for(length);
        }
        int reclaimable_blocks(RequestId id) const {
            Live const* r = engine->find(id);
            return r && r->seq >= 0 ? engine->cache_.reclaimable_blocks(r->seq) : 0;
        }
        int free_host_blocks() const { return engine->host_pool_blocks_ - engine->host_used_; }
        int host_blocks_needed(RequestId id) const {
            Live const* r = engine->find(id);
            return r && r->seq >= 0 ? Cache::blocks_for(engine->cache_.tokens(r->seq)) : 0;
        }
    };

    static int step_rows(EngineOptions const& options) {
        if (options.max_step_tokens <= 0)
            throw Error("EngineOptions.max_step_tokens must be positive");
        return std::min(options.max_step_tokens, Batching::max_batched_tokens);
    }

    std::vector<std::int32_t> tokenize(GenerationRequest const& request) const {
        if (!request.prompt_tokens.empty()) return request.prompt_tokens;
        if (!request.messages.empty())
            return tokenizer_.encode_prompt(
                chat_.render(request.messages, /*add_generation_prompt=*/true));
        return tokenizer_.encode_prompt(request.prompt);
    }

    void validate_request(GenerationRequest const& request,
                          std::vector<std::int32_t> const& prompt) const {
        if (prompt.empty()) throw RequestError("the prompt is empty");
        for (std::int32_t const t : prompt)
            if (t < 0 || t >= config.vocab)
                throw RequestError("prompt token " + std::to_string(t) +
                                   " is outside the vocabulary of " + std::to_string(config.vocab));
        if (request.max_tokens < 1)
            throw RequestError("max_tokens must be at least 1, got " +
                               std::to_string(request.max_tokens));
        std::int64_t const total = static_cast<std::int64_t>(prompt.size()) + request.max_tokens;
        if (total > config.max_context)
            throw RequestError("prompt (" + std::to_string(prompt.size()) +
                               " tokens) + max_tokens (" + std::to_string(request.max_tokens) +
                               ") exceeds the context of " + std::to_string(config.max_context) +
                               " tokens");
        // The fewest blocks it can be served in (grown a token at a time: a sliding window's
        // old blocks go back); the scheduler shortens prefill chunks to what fits.
        if (Cache::min_blocks_for(static_cast<int>(total)) > cache_.total_blocks())
            throw RequestError("prompt + max_tokens = " + std::to_string(total) +
                               " tokens needs more KV blocks than the whole cache holds (" +
                               std::to_string(cache_.capacity_tokens()) + " tokens)");
        kernels::validate(request.sampling, config.vocab);
        if (evicts && request.draft_tokens > 0)
            throw RequestError(
                "draft_tokens must be 0 under a token-eviction policy: rolling back drafts "
                "would need the slots eviction has already compacted");
        if (request.draft_tokens < 0 || request.draft_tokens >= step_rows(options_))
            throw RequestError("draft_tokens must be in [0, " +
                               std::to_string(step_rows(options_) - 1) + "], got " +
                               std::to_string(request.draft_tokens));
        if (request.draft_tokens > 0 &&
            (request.sampling.logprobs || request.sampling.top_logprobs > 0))
            throw RequestError(
                "draft_tokens needs sampling.logprobs and top_logprobs off: verification does "
                "not compute log-probabilities");
        validate(StopConditions{.max_new_tokens = request.max_tokens,
                                .stop_token_ids = request.stop_token_ids,
                                .stop_strings = request.stop,
                                .ignore_eos = request.ignore_eos});
    }

    bool inbox_pending() const {
        std::lock_guard lock(inbox_mutex_);
        return !inbox_.empty() || !aborts_.empty();
    }

    // Moves submitted requests into the scheduler and carries out aborts.
    void take_inbox() {
        std::vector<Pending> arrivals;
        std::vector<RequestId> aborts;
        {
            std::lock_guard lock(inbox_mutex_);
            arrivals.swap(inbox_);
            aborts.swap(aborts_);
        }
        for (Pending& p : arrivals) {
            GenerationRequest const& q = p.request;
            StopConditions conditions{.max_new_tokens = q.max_tokens,
                                      .stop_token_ids = q.stop_token_ids,
                                      .stop_strings = q.stop,
                                      .ignore_eos = q.ignore_eos};
            int const prompt_length = static_cast<int>(p.prompt.size());
            try {
                scheduler_.add({.id = p.id,
                                .prompt_length = prompt_length,
                                .max_new_tokens = q.max_tokens,
                                .priority = q.priority,
                                .tenant = sched::TenantId{q.tenant}});
            } catch (RequestError const& e) {
                TokenEvent event{.id = p.id, .finish = FinishReason::aborted, .error = e.what()};
                if (p.callback) p.callback(event);
                continue;
            }
            metrics_.on_arrival(p.id, sched::TenantId{q.tenant}, prompt_length);
            std::vector<std::int32_t> context = p.prompt;
            live_.emplace(p.id, Live{.request = std::move(p.request),
                                     .prompt = std::move(p.prompt),
                                     .callback = std::move(p.callback),
                                     .output = OutputStream(tokenizer_, std::move(conditions)),
                                     .context = std::move(context)});
        }
        for (RequestId const id : aborts) {
            if (!live_.contains(id)) continue;
            scheduler_.abort(id);
            finish_without_token(id, FinishReason::aborted, "");
        }
    }

    Live* find(RequestId id) {
        auto const it = live_.find(id);
        return it == live_.end() ? nullptr : &it->second;
    }
    Live const* find(RequestId id) const {
        auto const it = live_.find(id);
        return it == live_.end() ? nullptr : &it->second;
    }

    // Frees what a request holds and forgets it; its blocks may stay in the prefix cache.
    void retire(RequestId id, bool keep_prefix) {
        Live* r = find(id);
        if (!r) return;
        release_draft(id);
        release_kv(*r, keep_prefix);
        if (r->swapped_tokens > 0) host_used_ -= Cache::blocks_for(r->swapped_tokens);
        auto const finish = r->output.finish_reason();
        metrics_.on_finished(id, std::string(name_of(finish.value_or(FinishReason::length))));
        live_.erase(id);
    }

    // A drafter's per-request state goes when the request ends or is preempted (a preempted
    // request drafts again from scratch when it runs again).
    void release_draft(RequestId id) {
        if constexpr (spec::SequenceDrafter<Drafter>)
            drafter_.release(static_cast<std::uint64_t>(id));
    }

    void release_kv(Live& r, bool keep_prefix) {
        if (r.seq < 0) return;
        if (keep_prefix && options_.prefix_caching && !evicts) {
            int const tokens = cache_.tokens(r.seq);
            cache_.cache_prefix(
                r.seq, std::span<int const>(r.context.data(), static_cast<std::size_t>(tokens)));
        }
        cache_.release(r.seq);
        r.seq = -1;
    }

    void finish_without_token(RequestId id, FinishReason reason, std::string error) {
        Live* r = find(id);
        if (!r) return;
        TokenEvent event{.id = id, .finish = reason, .error = std::move(error)};
        if (r->callback) r->callback(event);
        release_draft(id);
        release_kv(*r, /*keep_prefix=*/false);
        if (r->swapped_tokens > 0) host_used_ -= Cache::blocks_for(r->swapped_tokens);
        metrics_.on_finished(id, std::string(name_of(reason)));
        live_.erase(id);
    }

    void preempt(sched::Preemption const& p) {
        Live& r = live_.at(p.id);
        metrics_.on_preempted(p.id);
        release_draft(p.id);
        if (p.mode == sched::PreemptionMode::swap && r.seq >= 0) {
            r.swapped.clear();
            r.swapped_tokens = cache_.export_blocks(r.seq, r.swapped);
            host_used_ += Cache::blocks_for(r.swapped_tokens);
            metrics_.on_swapped_out(p.id, Cache::blocks_for(r.swapped_tokens));
            cache_.release(r.seq);
            r.seq = -1;
            return;
        }
        // Recompute: the blocks go to the prefix cache, so the re-prefill mostly hits it; the
        // re-prefill starts from an empty cache, so nothing counts as evicted.
        release_kv(r, /*keep_prefix=*/true);
        r.evicted = 0;
        r.scores.clear();
    }

    void swap_in(RequestId id) {
        Live& r = live_.at(id);
        auto const seq = cache_.import_blocks(r.swapped, r.swapped_tokens, r.max_context());
        if (!seq)
            throw std::logic_error("Engine: the scheduler swapped in a request that does not fit");
        host_used_ -= Cache::blocks_for(r.swapped_tokens);
        metrics_.on_swapped_in(id, Cache::blocks_for(r.swapped_tokens));
        r.seq = *seq;
        r.swapped.clear();
        r.swapped.shrink_to_fit();
        r.swapped_tokens = 0;
    }

    // Makes room for a work item and returns the tokens to run: those of its positions the
    // cache does not hold yet (a prefix-cache hit skips the matched ones).
    std::span<std::int32_t const> prepare(sched::ScheduledWork const& w, Live& r, int& first) {
        if (r.seq < 0) {
            // An evicting cache no longer mirrors the token sequence, so it never shares blocks.
            if (options_.prefix_caching && !evicts) {
                auto const admission = cache_.admit(
                    std::span<int const>(r.context.data(), r.context.size()), r.max_context());
                r.seq = admission.seq;
                metrics_.on_prefix_hit(w.id, admission.cached_tokens);
            } else {
                r.seq = cache_.admit(r.max_context());
            }
        }
        if (!cache_.reserve(r.seq, w.kv_length))
            throw std::logic_error("Engine: the scheduler planned more KV than the cache holds");
        first = std::max(w.first_position, cache_.tokens(r.seq) + r.evicted);
        if constexpr (Eviction::needs_attention_scores) {
            if (r.scores.size() < static_cast<std::size_t>(w.kv_length))
                r.scores.resize(static_cast<std::size_t>(w.kv_length), 0.0f);
        }
        int const end = w.first_position + w.token_count;
        if (first >= end) return {};
        return std::span<std::int32_t const>(r.context).subspan(
            static_cast<std::size_t>(first), static_cast<std::size_t>(end - first));
    }

    // A speculating work item's round: its drafts and the tokens it runs, [last token, drafts].
    struct Round {
        bool decoding = false;  // a decode of a request with draft_tokens > 0: counts as a round
        spec::DraftProposal proposal;
        std::vector<std::int32_t> tokens;  // empty: no drafts this step, run as a plain decode
    };

    // Drafts for a work item that decodes (the cache holds all of its context but the last
    // token) and reserves their KV. Runs after every planned reservation, so the drafts only
    // take blocks the plan left free; when none are left the item runs without drafts.
    void draft(sched::ScheduledWork const& w, Live& r, std::span<std::int32_t const> tokens,
               int first, Round& round) {
        round.tokens.clear();
        int const generated = static_cast<int>(r.output.tokens().size());
        // The first token comes from the prompt's pass (even when the prefix cache left only the
        // prompt's last token to run): rounds start with the second.
        round.decoding =
            r.request.draft_tokens > 0 && w.samples_token && tokens.size() == 1 && generated > 0;
        if (!round.decoding) return;
        // A round appends drafts + 1 tokens: never draft past max_tokens, nor past one pass.
        int const wanted = std::min({r.request.draft_tokens, r.request.max_tokens - generated - 1,
                                     workspace_.max_tokens() - 1});
        if (wanted <= 0) return;
        spec::SequenceView const sequence{
            .tokens = r.context, .prompt_length = r.prompt.size(), .request_id = 0};
        drafter_.propose({.sequence = sequence,
                          .max_drafts = wanted,
                          .params = r.request.sampling,
                          .sequence_id = static_cast<std::uint64_t>(w.id)},
                         round.proposal);
        if (round.proposal.empty()) return;
        int const drafts = round.proposal.size();
        if (drafts > wanted)
            throw std::logic_error("Engine: the drafter proposed " + std::to_string(drafts) +
                                   " tokens, more than the " + std::to_string(wanted) + " asked");
        if (!cache_.reserve(r.seq, first + 1 + drafts)) {
            round.proposal.clear();
            return;
        }
        round.tokens.push_back(tokens.front());
        auto const proposed = round.proposal.tokens().first(static_cast<std::size_t>(drafts));
        round.tokens.insert(round.tokens.end(), proposed.begin(), proposed.end());
    }

    // Runs the plan's work as forward passes of at most the workspace's rows (one pass when the
    // plan fits), then samples for the items that reach the end of their context.
    std::vector<sched::StepOutcome> run(std::vector<sched::ScheduledWork> const& work) {
        struct Piece {
            std::size_t work_index;
            SequenceChunk chunk;
        };
        int const rows_per_pass = workspace_.max_tokens();
        std::vector<std::span<std::int32_t const>> tokens_of(work.size());
        std::vector<int> first_of(work.size(), 0);
        for (std::size_t i = 0; i < work.size(); ++i) {
            metrics_.on_scheduled(work[i].id);
            tokens_of[i] = prepare(work[i], live_.at(work[i].id), first_of[i]);
        }
        rounds_.resize(std::max(rounds_.size(), work.size()));
        for (std::size_t i = 0; i < work.size(); ++i)
            draft(work[i], live_.at(work[i].id), tokens_of[i], first_of[i], rounds_[i]);

        std::vector<Piece> pieces;
        for (std::size_t i = 0; i < work.size(); ++i) {
            Live& r = live_.at(work[i].id);
            int first = first_of[i];
            if (!rounds_[i].tokens.empty()) {
                pieces.push_back({i, SequenceChunk{.slot = r.seq,
                                                   .first_position = first,
                                                   .tokens = rounds_[i].tokens,
                                                   .all_logits = true}});
                continue;
            }
            auto tokens = tokens_of[i];
            // A chunk longer than a pass is split; only its last piece's logits are used.
            while (!tokens.empty()) {
                auto const n =
                    std::min<std::size_t>(tokens.size(), static_cast<std::size_t>(rows_per_pass));
                pieces.push_back({i, SequenceChunk{.slot = r.seq,
                                                   .first_position = first,
                                                   .tokens = tokens.first(n),
                                                   .first_cache_slot = first - r.evicted,
                                                   .attention_scores = scores_of(r)}});
                tokens = tokens.subspan(n);
                first += static_cast<int>(n);
            }
        }

        // Passes: consecutive pieces while their rows fit; each piece returns one logits row, a
        // speculating one a row per token.
        std::vector<std::vector<float>> logits_of_work(work.size());
        for (std::size_t begin = 0; begin < pieces.size();) {
            std::size_t end = begin;
            int rows = 0;
            while (end < pieces.size() &&
                   rows + static_cast<int>(pieces[end].chunk.tokens.size()) <= rows_per_pass) {
                rows += static_cast<int>(pieces[end].chunk.tokens.size());
                ++end;
            }
            std::vector<SequenceChunk> chunks;
            for (std::size_t p = begin; p < end; ++p) chunks.push_back(pieces[p].chunk);
            if (options_.int8_activations) {
                model_.template forward<precision::Int8Activations>(chunks, cache_, workspace_,
                                                                    logits_);
            } else {
                model_.forward(chunks, cache_, workspace_, logits_);
            }
            std::size_t row = 0;
            for (std::size_t p = begin; p < end; ++p) {
                std::size_t const w = pieces[p].work_index;
                std::size_t const piece_rows =
                    pieces[p].chunk.all_logits ? pieces[p].chunk.tokens.size() : 1;
                auto const first_row = std::span<float const>(logits_).subspan(
                    row * config.vocab, piece_rows * config.vocab);
                row += piece_rows;
                if (!work[w].samples_token) continue;
                logits_of_work[w].assign(first_row.begin(),
                                         first_row.end());  // the latest piece wins
            }
            begin = end;
        }

        std::vector<sched::StepOutcome> outcomes;
        for (std::size_t i = 0; i < work.size(); ++i) {
            if (!work[i].samples_token) continue;
            Live& r = live_.at(work[i].id);
            if (logits_of_work[i].empty())
                throw std::logic_error("Engine: a sampling work item produced no logits");
            try {
                if (!rounds_[i].tokens.empty()) {
                    outcomes.push_back(
                        verify(work[i].id, r, first_of[i] + 1, rounds_[i], logits_of_work[i]));
                    continue;
                }
                if (rounds_[i].decoding) record_round(r, 0, 0, 1);
                outcomes.push_back(sample(work[i].id, r, logits_of_work[i]));
            } catch (RequestError const& e) {
                // This request's settings leave nothing to sample (every token banned, say):
                // it ends with the error, the others go on.
                failed_.emplace_back(work[i].id, e.what());
                outcomes.push_back({.id = work[i].id, .tokens_generated = 1, .finished = true});
            }
        }
        return outcomes;
    }

    void record_round(Live& r, int drafted, int accepted, int tokens) {
        for (spec::SpeculationStats* stats : {&r.speculation, &speculation_totals_}) {
            ++stats->rounds;
            stats->drafted += drafted;
            stats->accepted += accepted;
            stats->tokens_generated += tokens;
        }
    }

    // Verifies a round of a sequence of `length` tokens (the cache held length - 1 before it),
    // streams its tokens and rolls the cache back to the kept ones. A stop condition may end the
    // request mid-round: the tokens after it are dropped.
    sched::StepOutcome verify(RequestId id, Live& r, int length, Round& round,
                              std::span<float const> logits) {
        int const drafts = static_cast<int>(round.tokens.size()) - 1;
        spec::DraftProposal const& proposal = round.proposal;
        spec::SequenceView const sequence{
            .tokens = r.context, .prompt_length = r.prompt.size(), .request_id = 0};
        spec::Verdict const verdict =
            spec::verify_drafts(sequence, proposal, logits, r.request.sampling, speculative_);
        std::vector<std::int32_t> kept;
        spec::append_round_tokens(kept, proposal, verdict);

        int fed = 0;
        std::optional<FinishReason> finish;
        std::vector<TokenEvent> events;
        for (std::int32_t const token : kept) {
            OutputStream::Step emitted = r.output.accept(token);
            r.context.push_back(token);
            ++fed;
            events.push_back({.id = id,
                              .token = token,
                              .text = std::move(emitted.text),
                              .finish = emitted.finish});
            if (emitted.finish) {
                finish = emitted.finish;
                break;
            }
        }
        // Position length + i holds draft i; only the accepted drafts that were also streamed
        // belong to the context.
        cache_.truncate(r.seq, length + std::min(verdict.accepted_drafts, fed));
        // The drafter's own state drops the rejected drafts too.
        if constexpr (spec::SequenceDrafter<Drafter>)
            drafter_.rollback(static_cast<std::uint64_t>(id), r.context);
        record_round(r, drafts, verdict.accepted_drafts, fed);
        for (TokenEvent& event : events) {
            if (event.finish) event.speculation = r.speculation;
            metrics_.on_token(id);
            if (r.callback) r.callback(event);
        }
        return {.id = id, .tokens_generated = fed, .finished = finish.has_value()};
    }

    sched::StepOutcome sample(RequestId id, Live& r, std::span<float const> logits) {
        auto const& output_tokens = r.output.tokens();
        kernels::TokenHistory const history{r.prompt, output_tokens};
        auto const step = static_cast<std::uint32_t>(output_tokens.size());
        // Draws depend on (seed, step) only, so a seeded request repeats itself whatever else
        // runs beside it.
        kernels::SampledToken const sampled = kernels::sample_token(
            logits, r.request.sampling, history, /*request_id=*/0, step, sampling_);
        TokenEvent event{.id = id, .token = sampled.token, .logprob = sampled.logprob};
        event.top_logprobs.assign(sampled.top_logprobs.begin(), sampled.top_logprobs.end());
        OutputStream::Step emitted = r.output.accept(sampled.token);
        r.context.push_back(sampled.token);
        event.text = std::move(emitted.text);
        event.finish = emitted.finish;
        if (event.finish) event.speculation = r.speculation;
        metrics_.on_token(id);
        if (r.callback) r.callback(event);
        return {.id = id, .tokens_generated = 1, .finished = emitted.finish.has_value()};
    }

    std::span<float> scores_of(Live& r) {
        if constexpr (Eviction::needs_attention_scores) return r.scores;
        return {};
    }

    // The scheduler's contract: after each step, every sequence holding more than max_kept()
    // slots keeps only the policy's choice of them.
    void evict() {
        for (auto& [id, r] : live_) {
            if (r.seq < 0) continue;
            int const held = cache_.tokens(r.seq);
            if (held <= Eviction::max_kept()) continue;
            std::span<float const> scores;
            if constexpr (Eviction::needs_attention_scores)
                scores = std::span<float const>(r.scores).first(static_cast<std::size_t>(held));
            std::vector<int> const kept = Eviction::select_kept(held, scores);
            cache_.retain_slots(r.seq, kept);
            if constexpr (Eviction::needs_attention_scores) {
                std::vector<float> compacted(kept.size());
                for (std::size_t i = 0; i < kept.size(); ++i)
                    compacted[i] = r.scores[static_cast<std::size_t>(kept[i])];
                r.scores = std::move(compacted);
            }
            r.evicted += held - static_cast<int>(kept.size());
        }
    }

    void record_step(sched::StepPlan const& plan) {
        double const usage = cache_.total_blocks()
                                 ? static_cast<double>(cache_.used_blocks()) / cache_.total_blocks()
                                 : 0.0;
        metrics_.on_step(plan.token_count(), cache_.memory_utilization(), usage);
    }

    gguf::File file_;
    EngineOptions options_;
    Model model_;
    tok::Tokenizer tokenizer_;
    tok::ChatTemplate chat_;
    Cache cache_;
    int host_pool_blocks_;
    int host_used_ = 0;
    typename Model::Workspace workspace_;
    kernels::SamplingWorkspace sampling_;
    std::vector<float> logits_;
    Scheduler scheduler_;
    Capacity capacity_{this};
    std::unordered_map<RequestId, Live> live_;
    std::vector<std::pair<RequestId, std::string>> failed_;  // ended by an error this step
    sched::MetricsRecorder metrics_;
    Drafter drafter_;
    std::vector<Round> rounds_;  // per work item of the current step, reused across steps
    spec::SpeculativeWorkspace speculative_{config.vocab};
    spec::SpeculationStats speculation_totals_;

    mutable std::mutex inbox_mutex_;
    std::condition_variable inbox_ready_;
    std::vector<Pending> inbox_;
    std::vector<RequestId> aborts_;
    std::uint64_t next_id_ = 1;
};

}  // namespace tinfer
