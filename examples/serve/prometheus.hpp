#pragma once
// The server's metrics in Prometheus' text exposition format (version 0.0.4), named after
// vLLM's (vllm:time_to_first_token_seconds -> tinfer:time_to_first_token_seconds) so the same
// dashboards read either server.
//
// Two sources feed it. The engine thread records per-token latencies from the request
// callbacks (so a counter is updated before the client can have received the token it counts)
// and, once per engine step, a snapshot of the scheduler and KV cache, which only that thread
// may read. HTTP threads render the text. One mutex guards everything: updates are a few
// additions, far cheaper than the forward pass between them.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace serve {

// A cumulative histogram with fixed upper bounds; the +Inf bucket is the count.
class Histogram {
  public:
    explicit Histogram(std::vector<double> upper_bounds)
        : bounds_(std::move(upper_bounds)), counts_(bounds_.size(), 0) {}

    void observe(double value) {
        for (std::size_t i = 0; i < bounds_.size(); ++i)
            if (value <= bounds_[i]) ++counts_[i];
        sum_ += value;
        ++count_;
    }

    void write(std::ostream& out, std::string const& name, std::string const& labels) const {
        for (std::size_t i = 0; i < bounds_.size(); ++i)
            out << name << "_bucket{" << labels << ",le=\"" << bounds_[i] << "\"} " << counts_[i]
                << "\n";
        out << name << "_bucket{" << labels << ",le=\"+Inf\"} " << count_ << "\n";
        out << name << "_sum{" << labels << "} " << sum_ << "\n";
        out << name << "_count{" << labels << "} " << count_ << "\n";
    }

  private:
    std::vector<double> bounds_;
    std::vector<std::uint64_t> counts_;  // cumulative: observations <= bounds_[i]
    double sum_ = 0;
    std::uint64_t count_ = 0;
};

// What only the engine thread can see, copied once per step.
struct EngineSnapshot {
    int running = 0;
    int waiting = 0;
    std::int64_t live = 0;  // the engine's request table: submitted and not yet finished
    // The KV pool's blocks: held by live sequences, held only by the prefix cache (evictable),
    // free. sequence + prefix_only + free = total.
    int total_blocks = 0;
    int sequence_blocks = 0;
    int prefix_only_blocks = 0;
    int free_blocks = 0;
    std::int64_t preemptions = 0;
    // Prompt-lookup speculation (--speculative-tokens): drafts proposed and kept, as vLLM's
    // spec_decode counters.
    std::int64_t draft_tokens = 0;
    std::int64_t accepted_draft_tokens = 0;
    // Every position run through the model: prefill (once per prompt for the n choices of a
    // request), re-prefill after preemption, decode.
    std::int64_t computed_tokens = 0;
};

// How a request ended, as vLLM labels tinfer:request_success_total.
enum class FinishLabel { stop, length, abort };

class ServerMetrics {
  public:
    explicit ServerMetrics(std::string model_name)
        : model_label_("model_name=\"" + model_name + "\"") {}

    // One engine sequence submitted (a choice of a prompt).
    void on_submitted(int prompt_tokens) {
        std::lock_guard lock(mutex_);
        prompt_tokens_ += prompt_tokens;
        ++submitted_;
    }
    void on_first_token(double seconds_since_arrival) {
        std::lock_guard lock(mutex_);
        ++generation_tokens_;
        time_to_first_token_.observe(seconds_since_arrival);
    }
    void on_next_token(double seconds_since_previous) {
        std::lock_guard lock(mutex_);
        ++generation_tokens_;
        inter_token_latency_.observe(seconds_since_previous);
    }
    void on_finished(FinishLabel how, double seconds_since_arrival) {
        std::lock_guard lock(mutex_);
        ++finished_[static_cast<std::size_t>(how)];
        end_to_end_latency_.observe(seconds_since_arrival);
    }
    void on_queue_time(double seconds, int prompt_tokens, int cached_prompt_tokens) {
        std::lock_guard lock(mutex_);
        queue_time_.observe(seconds);
        prefix_cache_queries_ += prompt_tokens;
        prefix_cache_hits_ += cached_prompt_tokens;
    }
    void on_engine_step(EngineSnapshot const& snapshot) {
        std::lock_guard lock(mutex_);
        engine_ = snapshot;
    }
    void on_response(int http_status) {
        std::lock_guard lock(mutex_);
        ++responses_by_status_[http_status];
    }
    // A response_format or grammar compiled to a constraint (`compiled`), or found compiled.
    void on_structured_output(bool compiled) {
        std::lock_guard lock(mutex_);
        ++(compiled ? constraint_compilations_ : constraint_cache_hits_);
    }
    void on_admitted(int change) {
        std::lock_guard lock(mutex_);
        admitted_ += change;
    }

    std::string render() const {
        std::lock_guard lock(mutex_);
        std::ostringstream out;
        out.precision(9);
        std::string const& l = model_label_;
        auto const header = [&](char const* name, char const* type, char const* help) {
            out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
        };
        auto const scalar = [&](char const* name, char const* type, char const* help, auto value) {
            header(name, type, help);
            out << name << "{" << l << "} " << value << "\n";
        };
        scalar("tinfer:num_requests_running", "gauge", "Requests in the engine's running batch.",
               engine_.running);
        scalar("tinfer:num_requests_waiting", "gauge",
               "Requests submitted to the engine and waiting to be scheduled.", engine_.waiting);
        scalar("tinfer:num_requests_admitted", "gauge",
               "Generation requests the HTTP front end holds (the --max-queue limit counts "
               "these).",
               admitted_);
        scalar("tinfer:num_requests_live", "gauge",
               "Requests in the engine's table (submitted, not yet finished).", engine_.live);
        scalar("tinfer:request_submitted_total", "counter",
               "Engine requests submitted (one per choice of each prompt); each ends once in "
               "tinfer:request_success_total.",
               submitted_);
        auto const share = [&](int blocks) {
            return engine_.total_blocks ? static_cast<double>(blocks) / engine_.total_blocks : 0.0;
        };
        scalar("tinfer:kv_cache_usage_perc", "gauge",
               "Share of the KV cache's blocks held by live sequences (1 = full); blocks only "
               "the prefix cache holds are evictable and count as free, as in vLLM.",
               share(engine_.sequence_blocks));
        scalar("tinfer:prefix_cache_usage_perc", "gauge",
               "Share of the KV cache's blocks held only by the prefix cache (evictable).",
               share(engine_.prefix_only_blocks));
        scalar("tinfer:kv_cache_total_blocks", "gauge", "Blocks in the KV pool.",
               engine_.total_blocks);
        scalar("tinfer:kv_cache_sequence_blocks", "gauge",
               "KV blocks held by live sequences (a shared block counts once).",
               engine_.sequence_blocks);
        scalar("tinfer:kv_cache_prefix_only_blocks", "gauge",
               "KV blocks held only by the prefix cache.", engine_.prefix_only_blocks);
        scalar("tinfer:kv_cache_free_blocks", "gauge", "KV blocks on the pool's free list.",
               engine_.free_blocks);
        scalar("tinfer:num_preemptions_total", "counter", "Cumulative preemptions.",
               engine_.preemptions);
        scalar("tinfer:spec_decode_num_draft_tokens_total", "counter",
               "Draft tokens proposed by speculative decoding.", engine_.draft_tokens);
        scalar("tinfer:spec_decode_num_accepted_tokens_total", "counter",
               "Draft tokens speculative decoding kept.", engine_.accepted_draft_tokens);
        scalar("tinfer:prompt_tokens_total", "counter", "Prompt tokens admitted (once per choice).",
               prompt_tokens_);
        scalar("tinfer:model_tokens_computed_total", "counter",
               "Positions run through the model: prefill (a prompt once for all its choices), "
               "re-prefill after preemption, decode.",
               engine_.computed_tokens);
        scalar("tinfer:structured_output_compilations_total", "counter",
               "JSON schemas and grammars compiled to constraints.", constraint_compilations_);
        scalar("tinfer:structured_output_cache_hits_total", "counter",
               "Structured-output requests whose schema or grammar was already compiled.",
               constraint_cache_hits_);
        scalar("tinfer:generation_tokens_total", "counter", "Tokens generated.",
               generation_tokens_);
        scalar("tinfer:prefix_cache_queries_total", "counter",
               "Prompt tokens of requests that reached the KV cache.", prefix_cache_queries_);
        scalar("tinfer:prefix_cache_hits_total", "counter",
               "Prompt tokens served by the prefix cache.", prefix_cache_hits_);

        header("tinfer:request_success_total", "counter",
               "Finished requests by finish reason (abort: client gone or server stopping).");
        constexpr std::array<char const*, 3> reasons{"stop", "length", "abort"};
        for (std::size_t i = 0; i < reasons.size(); ++i)
            out << "tinfer:request_success_total{" << l << ",finished_reason=\"" << reasons[i]
                << "\"} " << finished_[i] << "\n";

        header("tinfer:http_responses_total", "counter", "HTTP responses by status code.");
        for (auto const& [status, count] : responses_by_status_)
            out << "tinfer:http_responses_total{" << l << ",status=\"" << status << "\"} " << count
                << "\n";

        header("tinfer:time_to_first_token_seconds", "histogram",
               "Time from arrival to the first generated token.");
        time_to_first_token_.write(out, "tinfer:time_to_first_token_seconds", l);
        header("tinfer:inter_token_latency_seconds", "histogram",
               "Time between consecutive generated tokens of a request.");
        inter_token_latency_.write(out, "tinfer:inter_token_latency_seconds", l);
        header("tinfer:e2e_request_latency_seconds", "histogram",
               "Time from arrival to the last token.");
        end_to_end_latency_.write(out, "tinfer:e2e_request_latency_seconds", l);
        header("tinfer:request_queue_time_seconds", "histogram",
               "Time from arrival to the first step that scheduled the request.");
        queue_time_.write(out, "tinfer:request_queue_time_seconds", l);
        return out.str();
    }

  private:
    // vLLM's bucket bounds, so histograms from both servers line up.
    static std::vector<double> latency_bounds() {
        return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
    }
    static std::vector<double> token_gap_bounds() {
        return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
    }
    static std::vector<double> request_bounds() {
        return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0,
                20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};
    }

    mutable std::mutex mutex_;
    std::string model_label_;
    EngineSnapshot engine_;
    int admitted_ = 0;
    std::int64_t submitted_ = 0;
    std::int64_t prompt_tokens_ = 0;
    std::int64_t generation_tokens_ = 0;
    std::int64_t prefix_cache_queries_ = 0;
    std::int64_t prefix_cache_hits_ = 0;
    std::int64_t constraint_compilations_ = 0;
    std::int64_t constraint_cache_hits_ = 0;
    std::array<std::int64_t, 3> finished_{};
    std::map<int, std::int64_t> responses_by_status_;
    Histogram time_to_first_token_{latency_bounds()};
    Histogram inter_token_latency_{token_gap_bounds()};
    Histogram end_to_end_latency_{request_bounds()};
    Histogram queue_time_{request_bounds()};
};

}  // namespace serve
