#pragma once
// The engine's front door: turns a GenerationRequest into prompt tokens, checks it against the
// one set of RequestLimits, and queues it (or an abort) for the serving thread. submit() and
// abort() may be called from any thread; the engine takes what arrived at the start of a step.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <tinfer/engine/handoff.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>

namespace tinfer {

class RequestIntake {
  public:
    // Choice i of an arrival has id `id + i` (ids are handed out n at a time) and samples with
    // request.sampling.seed + i.
    struct Arrival {
        sched::RequestId id{};
        GenerationRequest request;
        std::vector<std::int32_t> prompt;
        TokenCallback callback;
        sched::Clock::time_point submitted;  // by the metrics' clock: TTFT counts from here
        // Set for a request prefilled by another engine (adopt()): its first token and KV.
        struct Transferred {
            std::int32_t first_token = -1;
            int tokens = 0;
            std::vector<std::byte> blocks;
        };
        std::optional<Transferred> transferred;
    };
    // What one step takes: the arrivals, then the aborts.
    using Inbox = std::pair<std::vector<Arrival>, std::vector<sched::RequestId>>;
    // Sees (and may replace) what a step took before the scheduler does: tensor parallelism's
    // lockstep (distributed/lockstep.hpp) sends rank 0's inbox to every other rank with it.
    using InboxExchange = std::function<void(Inbox&)>;

    // The tokenizer, template and metrics must outlive the intake.
    RequestIntake(tok::Tokenizer const& tokenizer, tok::ChatTemplate const& chat,
                  RequestLimits limits, sched::MetricsRecorder const& metrics)
        : tokenizer_(&tokenizer), chat_(&chat), limits_(std::move(limits)), metrics_(&metrics) {}

    // The request's prompt as token ids: `prompt_tokens`, else the rendered chat, else text.
    std::vector<std::int32_t> prompt_of(GenerationRequest const& request) const {
        if (!request.prompt_tokens.empty()) return request.prompt_tokens;
        if (!request.messages.empty())
            return tokenizer_->encode_prompt(
                chat_->render(request.messages, /*add_generation_prompt=*/true));
        return tokenizer_->encode_prompt(request.prompt);
    }

    // Checks and queues; throws tinfer::RequestError (nothing queued) for a request that can
    // never be served.
    sched::RequestId submit(GenerationRequest request, TokenCallback callback) {
        Arrival arrival{.request = std::move(request), .callback = std::move(callback)};
        arrival.prompt = prompt_of(arrival.request);
        validate_request(arrival.request, arrival.prompt, limits_);
        return enqueue(std::move(arrival));
    }

    // A request another engine prefilled (engine/handoff.hpp): checked against the same
    // limits as any submit, its prompt the prefilled prompt_tokens.
    sched::RequestId adopt(PrefilledRequest prefilled, TokenCallback callback) {
        Arrival arrival{.request = std::move(prefilled.request), .callback = std::move(callback)};
        arrival.prompt = arrival.request.prompt_tokens;
        validate_request(arrival.request, arrival.prompt, limits_);
        arrival.transferred = Arrival::Transferred{.first_token = prefilled.first_token,
                                                   .tokens = prefilled.tokens,
                                                   .blocks = std::move(prefilled.blocks)};
        return enqueue(std::move(arrival));
    }

    void abort(sched::RequestId id) {
        std::lock_guard lock(mutex_);
        aborts_.push_back(id);
        ready_.notify_all();
    }

    // Hands over what arrived since the last call, arrivals first.
    Inbox take() {
        Inbox out;
        std::lock_guard lock(mutex_);
        out.first.swap(arrivals_);
        out.second.swap(aborts_);
        return out;
    }

    bool pending() const {
        std::lock_guard lock(mutex_);
        return !arrivals_.empty() || !aborts_.empty();
    }
    std::size_t queued() const {
        std::lock_guard lock(mutex_);
        return arrivals_.size();
    }

    // Sleeps until something arrives or `timeout` passes.
    void wait_for(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        ready_.wait_for(lock, timeout, [&] { return !arrivals_.empty() || !aborts_.empty(); });
    }

    RequestLimits const& limits() const { return limits_; }

  private:
    sched::RequestId enqueue(Arrival arrival) {
        arrival.submitted = metrics_->now();
        std::lock_guard lock(mutex_);
        arrival.request.sampling.seed =
            base_seed_of(arrival.request, [this] { return fresh_seeds_(); });
        arrival.id = sched::RequestId{next_id_};
        // The n choices of a request take consecutive ids.
        next_id_ += static_cast<std::uint64_t>(arrival.request.n);
        sched::RequestId const id = arrival.id;
        arrivals_.push_back(std::move(arrival));
        ready_.notify_all();
        return id;
    }

    tok::Tokenizer const* tokenizer_;
    tok::ChatTemplate const* chat_;
    RequestLimits limits_;
    sched::MetricsRecorder const* metrics_;
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::vector<Arrival> arrivals_;
    std::vector<sched::RequestId> aborts_;
    std::uint64_t next_id_ = 1;
    std::mt19937_64 fresh_seeds_{std::random_device{}()};  // for requests that chose no seed
};

}  // namespace tinfer
