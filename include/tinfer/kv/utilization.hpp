#pragma once
// How much of the KV memory a serving loop allocates actually holds live tokens, for a paged
// cache against preallocating every sequence's maximum length contiguously (the source quotes
// 20-40% for the latter). A synthetic workload of request lengths drives a simple continuous
// batching loop over the real cache; only block bookkeeping runs, no model.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace tinfer::kv {

struct RequestLengths {
    int prompt_tokens = 0;
    int output_tokens = 0;
};

// A length distribution: lognormal with the given median and log-space spread.
struct LognormalLength {
    double median = 0;
    double sigma = 0;
};

// `count` requests with prompt and output lengths drawn independently, each at least one
// token and together at most max_length (output shortened first).
inline std::vector<RequestLengths> lognormal_requests(std::uint64_t seed, int count,
                                                      LognormalLength prompt,
                                                      LognormalLength output, int max_length) {
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> prompt_dist(std::log(prompt.median), prompt.sigma);
    std::lognormal_distribution<double> output_dist(std::log(output.median), output.sigma);
    auto const draw = [&](auto& dist, int most) {
        return std::clamp(static_cast<int>(std::lround(dist(rng))), 1, most);
    };
    std::vector<RequestLengths> requests(static_cast<std::size_t>(count));
    for (auto& r : requests) {
        r.prompt_tokens = draw(prompt_dist, max_length - 1);
        r.output_tokens = draw(output_dist, max_length - r.prompt_tokens);
    }
    return requests;
}

struct UtilizationReport {
    double paged = 0;       // live tokens / token slots of the blocks in use
    double contiguous = 0;  // live tokens / (running sequences x max_length)
    int steps = 0;
    int peak_running = 0;
    int preemptions = 0;
};

// Serves `requests` in order on `cache` (a PagedKvCache with nothing in use): admit while the
// prompt's blocks fit, one decode token per running sequence per step, preempt the newest
// (recompute later) when a step finds no block, release on completion. Both shares are
// memory-time weighted: sums over steps of live tokens over sums of allocated slots, for the
// same set of running sequences at every step.
template <class Cache>
UtilizationReport measure_utilization(Cache& cache, std::span<RequestLengths const> requests,
                                      int max_length) {
    struct Running {
        int seq;
        std::size_t request;
        int generated;
    };
    std::deque<std::size_t> waiting;
    for (std::size_t i = 0; i < requests.size(); ++i) waiting.push_back(i);
    std::vector<Running> running;
    UtilizationReport report;
    double live_sum = 0, paged_sum = 0, contiguous_sum = 0;

    while (!waiting.empty() || !running.empty()) {
        while (!waiting.empty()) {
            RequestLengths const r = requests[waiting.front()];
            int const seq = cache.admit(r.prompt_tokens + r.output_tokens);
            if (!cache.reserve(seq, r.prompt_tokens)) {
                cache.release(seq);
                break;
            }
            running.push_back({seq, waiting.front(), 0});
            waiting.pop_front();
        }
        for (std::size_t i = 0; i < running.size();) {
            if (cache.reserve(running[i].seq, cache.reserved(running[i].seq) + 1)) {
                ++running[i].generated;
                ++i;
                continue;
            }
            // The newest sequence gives its blocks back; if that is this one, the step ends.
            cache.release(running.back().seq);
            waiting.push_front(running.back().request);
            running.pop_back();
            ++report.preemptions;
        }
        auto const live = static_cast<double>(cache.live_tokens());
        live_sum += live;
        paged_sum += static_cast<double>(cache.used_blocks()) * Cache::block_size;
        // Preallocation holds max_length positions of every layer group (live_tokens counts a
        // position once per group holding it).
        contiguous_sum += static_cast<double>(running.size()) * max_length * Cache::group_count;
        report.peak_running = std::max(report.peak_running, static_cast<int>(running.size()));
        ++report.steps;
        std::erase_if(running, [&](Running const& r) {
            bool const done = r.generated >= requests[r.request].output_tokens;
            if (done) cache.release(r.seq);
            return done;
        });
    }
    report.paged = paged_sum == 0 ? 1.0 : live_sum / paged_sum;
    report.contiguous = contiguous_sum == 0 ? 1.0 : live_sum / contiguous_sum;
    return report;
}

}  // namespace tinfer::kv
