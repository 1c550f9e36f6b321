#pragma once
// Serving metrics, as vLLM and llama.cpp's server define them:
//   TTFT (time to first token) = first token - arrival;
//   TPOT (time per output token) = (finish - first token) / (generated - 1);
//   end-to-end latency = finish - arrival; queue time = first scheduled - arrival;
// and per run: generated tokens/s, finished requests/s, KV utilization, preemptions,
// prefix-cache hit rate. Timestamps only: no tensor is seen here.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tinfer/sched/request.hpp>

namespace tinfer::sched {

using Clock = std::chrono::steady_clock;

// Where the recorder reads the time: the steady clock, or a test's manual clock.
using ClockSource = std::function<Clock::time_point()>;

inline double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

struct RequestMetrics {
    RequestId id{};
    TenantId tenant{};
    int prompt_tokens = 0;
    int cached_prompt_tokens = 0;  // served by the prefix cache
    int generated_tokens = 0;
    int preemptions = 0;
    std::string finish_reason;
    Clock::time_point arrival{};
    std::optional<Clock::time_point> first_scheduled;
    std::optional<Clock::time_point> first_token;
    std::optional<Clock::time_point> finished;

    std::optional<double> ttft() const {
        if (!first_token) return std::nullopt;
        return seconds_between(arrival, *first_token);
    }
    std::optional<double> tpot() const {
        if (!first_token || !finished || generated_tokens < 2) return std::nullopt;
        return seconds_between(*first_token, *finished) / (generated_tokens - 1);
    }
    std::optional<double> end_to_end() const {
        if (!finished) return std::nullopt;
        return seconds_between(arrival, *finished);
    }
    std::optional<double> queue_time() const {
        if (!first_scheduled) return std::nullopt;
        return seconds_between(arrival, *first_scheduled);
    }
};

struct RunSummary {
    double seconds = 0;
    int finished_requests = 0;
    std::int64_t generated_tokens = 0;
    std::int64_t prompt_tokens = 0;
    std::int64_t computed_tokens = 0;  // every token through the model, recomputation included
    int preemptions = 0;
    int swap_outs = 0;  // preemptions that moved KV blocks to the host pool
    int swap_ins = 0;   // and those that brought them back
    std::int64_t swapped_out_blocks = 0;
    std::int64_t swapped_in_blocks = 0;
    int steps = 0;
    double mean_kv_utilization = 0;  // share of allocated KV slots holding live tokens
    double peak_kv_usage = 0;        // largest share of the pool in use
    double prefix_hit_rate = 0;      // prompt tokens served by the prefix cache

    double tokens_per_second() const { return seconds > 0 ? generated_tokens / seconds : 0; }
    double requests_per_second() const { return seconds > 0 ? finished_requests / seconds : 0; }
};

// Collects the timestamps of every request and a few per-step figures.
class MetricsRecorder {
  public:
    explicit MetricsRecorder(ClockSource clock = {}) : clock_(std::move(clock)) {}

    // `submitted`: when the caller handed the request over (the engine stamps it at submit(),
    // so TTFT and latency include the wait for the next step); now() when not given.
    void on_arrival(RequestId id, TenantId tenant, int prompt_tokens,
                    std::optional<Clock::time_point> submitted = std::nullopt) {
        RequestMetrics& m = live_[id];
        m.id = id;
        m.tenant = tenant;
        m.prompt_tokens = prompt_tokens;
        m.arrival = submitted ? *submitted : now();
        if (!run_start_) run_start_ = m.arrival;
        summary_.prompt_tokens += prompt_tokens;
    }
    void on_scheduled(RequestId id) {
        auto& m = live_.at(id);
        if (!m.first_scheduled) m.first_scheduled = now();
    }
    void on_prefix_hit(RequestId id, int cached_tokens) {
        live_.at(id).cached_prompt_tokens =
            std::max(live_.at(id).cached_prompt_tokens, cached_tokens);
    }
    void on_token(RequestId id) {
        auto& m = live_.at(id);
        if (!m.first_token) m.first_token = now();
        ++m.generated_tokens;
        ++summary_.generated_tokens;
    }
    void on_preempted(RequestId id) {
        ++live_.at(id).preemptions;
        ++summary_.preemptions;
    }
    void on_swapped_out(RequestId, int blocks) {
        ++summary_.swap_outs;
        summary_.swapped_out_blocks += blocks;
    }
    void on_swapped_in(RequestId, int blocks) {
        ++summary_.swap_ins;
        summary_.swapped_in_blocks += blocks;
    }
    void on_step(int computed_tokens, double kv_utilization, double kv_usage) {
        ++summary_.steps;
        summary_.computed_tokens += computed_tokens;
        utilization_sum_ += kv_utilization;
        summary_.peak_kv_usage = std::max(summary_.peak_kv_usage, kv_usage);
    }
    void on_finished(RequestId id, std::string reason) {
        auto node = live_.extract(id);
        if (node.empty()) return;
        RequestMetrics& m = node.mapped();
        m.finished = now();
        m.finish_reason = std::move(reason);
        ++summary_.finished_requests;
        cached_prompt_tokens_ += m.cached_prompt_tokens;
        done_.push_back(std::move(m));
    }

    std::vector<RequestMetrics> const& finished() const { return done_; }
    // Hands over the finished requests' records and forgets them, so a server that runs for
    // days keeps a bounded history; the run summary keeps counting.
    std::vector<RequestMetrics> take_finished() {
        std::vector<RequestMetrics> out;
        out.swap(done_);
        return out;
    }

    RunSummary summary() const {
        RunSummary s = summary_;
        if (run_start_) s.seconds = seconds_between(*run_start_, now());
        s.mean_kv_utilization = s.steps ? utilization_sum_ / s.steps : 0;
        s.prefix_hit_rate =
            s.prompt_tokens ? static_cast<double>(cached_prompt_tokens_) / s.prompt_tokens : 0;
        return s;
    }

    // One JSON object per finished request, then one for the run (times in seconds).
    void write_json_lines(std::ostream& out) const {
        auto const field = [&](char const* name, std::optional<double> v) {
            out << ",\"" << name << "\":";
            if (v)
                out << *v;
            else
                out << "null";
        };
        for (RequestMetrics const& m : done_) {
            out << "{\"request\":" << static_cast<std::uint64_t>(m.id)
                << ",\"tenant\":" << static_cast<std::uint32_t>(m.tenant)
                << ",\"prompt_tokens\":" << m.prompt_tokens
                << ",\"cached_prompt_tokens\":" << m.cached_prompt_tokens
                << ",\"generated_tokens\":" << m.generated_tokens
                << ",\"preemptions\":" << m.preemptions << ",\"finish_reason\":\""
                << m.finish_reason << "\"";
            field("ttft", m.ttft());
            field("tpot", m.tpot());
            field("e2e", m.end_to_end());
            field("queue", m.queue_time());
            out << "}\n";
        }
        RunSummary const s = summary();
        out << "{\"run\":true,\"seconds\":" << s.seconds << ",\"requests\":" << s.finished_requests
            << ",\"generated_tokens\":" << s.generated_tokens
            << ",\"tokens_per_second\":" << s.tokens_per_second()
            << ",\"requests_per_second\":" << s.requests_per_second()
            << ",\"computed_tokens\":" << s.computed_tokens << ",\"preemptions\":" << s.preemptions
            << ",\"steps\":" << s.steps << ",\"mean_kv_utilization\":" << s.mean_kv_utilization
            << ",\"peak_kv_usage\":" << s.peak_kv_usage
            << ",\"prefix_hit_rate\":" << s.prefix_hit_rate << "}\n";
    }

    // The recorder's clock (a test's manual one, or the steady clock).
    Clock::time_point now() const { return clock_ ? clock_() : Clock::now(); }

  private:
    ClockSource clock_;
    std::unordered_map<RequestId, RequestMetrics> live_;
    std::vector<RequestMetrics> done_;
    RunSummary summary_;
    double utilization_sum_ = 0;
    std::int64_t cached_prompt_tokens_ = 0;
    std::optional<Clock::time_point> run_start_;
};

}  // namespace tinfer::sched
