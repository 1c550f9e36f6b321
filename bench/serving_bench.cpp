// serving_bench: the engine under open-loop load on the real model. Requests arrive as a seeded
// Poisson process at each offered rate; every request has a random-token prompt and a fixed
// number of output tokens (ignore_eos), both drawn from seeded uniform distributions, so every
// configuration and every rate serves the SAME requests and only the arrival spacing changes.
//
// Configurations: static batching (StaticBatching<8>) against continuous batching
// (ContinuousBatching<16, 256>), each with whole-prompt and chunked (ChunkedPrefill<64>) prefill,
// all with PreemptByRecompute and Fcfs.
//
// Latencies are measured as a client sees them, from the request's SCHEDULED arrival time: the
// loop submits requests between steps, so a request that comes due during a step waits for that
// step to end, and that wait belongs to its TTFT (the engine's own recorder starts the clock at
// the next step's inbox, which would hide it).
//   TTFT = first token - arrival;  TPOT = (last token - first token) / (tokens - 1);
//   E2E = last token - arrival;    throughput = tokens (requests) / (last finish - first arrival).
// Mean KV utilization, peak KV usage and preemptions come from the engine's MetricsRecorder.
//
// Prints a Markdown table and writes a TSV (one row per configuration and rate) for
// bench/plot_serving.gp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/common/cli_options.hpp"

#include <tinfer/engine/engine.hpp>
#include <tinfer/presets/presets.hpp>

namespace {

using namespace tinfer;
namespace s = tinfer::sched;
using Model = model::Llama<presets::smollm2_135m>;
using Clock = std::chrono::steady_clock;

using StaticWhole =
    s::Scheduler<s::StaticBatching<8>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using StaticChunked =
    s::Scheduler<s::StaticBatching<8>, s::ChunkedPrefill<64>, s::PreemptByRecompute, s::Fcfs>;
using ContinuousWhole =
    s::Scheduler<s::ContinuousBatching<16, 256>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using ContinuousChunked = s::Scheduler<s::ContinuousBatching<16, 256>, s::ChunkedPrefill<64>,
                                       s::PreemptByRecompute, s::Fcfs>;

std::vector<std::string> const all_configurations{"static", "static+chunked", "continuous",
                                                  "continuous+chunked"};

struct Options {
    std::string model;
    // Under- to over-load for these requests on a 2-core machine at load ~10 (one thread).
    std::vector<double> rates{0.15, 0.3, 0.6, 1.2};
    std::vector<std::string> configurations = all_configurations;
    int requests = 12;  // keeps a full sweep near 15 minutes there; -n 30 for tighter tails
    int min_prompt = 16, max_prompt = 128;
    int min_output = 8, max_output = 48;
    int threads = 1;
    double kv_budget_mib = 64;
    // Off by default: random-token prompts share no prefix, so the prefix cache would only keep
    // dead blocks, which count as used and make KV utilization and peak use meaningless.
    bool prefix_caching = false;
    std::uint64_t seed = 1;
    std::string tsv = "serving_bench.tsv";
    std::string precision = "f32";
};

struct Job {
    double arrival_offset = 0;  // seconds after the point starts
    std::vector<std::int32_t> prompt;
    int output_tokens = 0;
};

// Arrival gaps are drawn once at rate 1 and divided by the rate: common random numbers, so the
// points differ in load only, not in which requests happen to come in bursts.
std::vector<Job> make_jobs(Options const& options, double rate) {
    std::mt19937_64 rng(options.seed);
    std::exponential_distribution<double> gap_at_unit_rate(1.0);
    std::uniform_int_distribution<int> prompt_length(options.min_prompt, options.max_prompt),
        output_length(options.min_output, options.max_output);
    // Ordinary vocabulary ids: skips the special tokens at the start of SmolLM2's vocabulary.
    std::uniform_int_distribution<std::int32_t> token(17, Model::config.vocab - 1);
    std::vector<Job> jobs(static_cast<std::size_t>(options.requests));
    double unit_time = 0;
    for (Job& job : jobs) {
        job.arrival_offset = unit_time / rate;
        unit_time += gap_at_unit_rate(rng);
        job.prompt.resize(static_cast<std::size_t>(prompt_length(rng)));
        for (auto& t : job.prompt) t = token(rng);
        job.output_tokens = output_length(rng);
    }
    return jobs;
}

// What the client sees of one request.
struct Observed {
    Clock::time_point arrival{};
    std::optional<Clock::time_point> first_token;
    Clock::time_point last_token{};
    int tokens = 0;
    bool finished = false;
};

struct Point {
    std::string configuration;
    double rate = 0;
    int finished = 0;
    double seconds = 0;
    double tokens_per_second = 0, requests_per_second = 0;
    double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0, e2e_p50 = 0, e2e_p99 = 0;
    double mean_kv_utilization = 0, peak_kv_usage = 0;
    int preemptions = 0;
    double load_average = 0;  // 1-minute load average when the point ended
};

// Nearest-rank percentile; with ~30 samples p99 is the largest value, and the docs say so.
double percentile(std::vector<double> values, double p) {
    if (values.empty()) return std::nan("");
    std::sort(values.begin(), values.end());
    auto const rank = static_cast<std::size_t>(std::ceil(p / 100.0 * values.size()));
    return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

double load_average() {
    std::ifstream in("/proc/loadavg");
    double one_minute = std::nan("");
    in >> one_minute;
    return one_minute;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

EngineOptions engine_options(Options const& options) {
    auto const budget = static_cast<std::size_t>(options.kv_budget_mib * 1024 * 1024);
    return {.kv_budget_bytes = budget,
            .host_swap_bytes = budget,
            .threads = options.threads,
            .max_step_tokens = 1024,
            .prefix_caching = options.prefix_caching,
            .int8_activations = options.precision == "int8"};
}

GenerationRequest request_for(Job const& job) {
    GenerationRequest r;
    r.prompt_tokens = job.prompt;
    r.max_tokens = job.output_tokens;
    r.ignore_eos = true;  // the drawn output length is the real one
    r.sampling.temperature = 0;
    return r;
}

// One open-loop run: submits each job when its arrival time comes, stepping the engine in
// between, until every request has finished.
template <class Scheduler>
Point run_point(std::string const& name, Options const& options, double rate) {
    Engine<Model, Scheduler> engine(gguf::File::open(options.model), engine_options(options));
    std::vector<Job> const jobs = make_jobs(options, rate);
    std::vector<Observed> observed(jobs.size());

    Clock::time_point const start = Clock::now();
    std::size_t next = 0;
    int finished = 0;
    while (finished < static_cast<int>(jobs.size())) {
        Clock::time_point const now = Clock::now();
        for (; next < jobs.size(); ++next) {
            auto const due = start + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(jobs[next].arrival_offset));
            if (due > now) break;
            Observed& seen = observed[next];
            seen.arrival = due;
            engine.submit(request_for(jobs[next]), [&seen, &finished](TokenEvent const& e) {
                auto const at = Clock::now();
                if (e.token >= 0) {
                    if (!seen.first_token) seen.first_token = at;
                    seen.last_token = at;
                    ++seen.tokens;
                }
                if (e.finish) {
                    seen.finished = true;
                    ++finished;
                }
            });
        }
        if (engine.step()) continue;
        // Idle: sleep until the next arrival rather than spinning on a loaded machine.
        if (next < jobs.size()) {
            auto const due = start + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(jobs[next].arrival_offset));
            std::this_thread::sleep_until(due);
        }
    }

    Point point{.configuration = name, .rate = rate, .load_average = load_average()};
    std::vector<double> ttft, tpot, e2e;
    Clock::time_point last_finish = start;
    std::int64_t tokens = 0;
    for (Observed const& seen : observed) {
        if (!seen.first_token) continue;
        ++point.finished;
        tokens += seen.tokens;
        last_finish = std::max(last_finish, seen.last_token);
        ttft.push_back(seconds_between(seen.arrival, *seen.first_token));
        e2e.push_back(seconds_between(seen.arrival, seen.last_token));
        if (seen.tokens > 1)
            tpot.push_back(seconds_between(*seen.first_token, seen.last_token) / (seen.tokens - 1));
    }
    point.seconds = seconds_between(start, last_finish);  // the first job arrives at offset 0
    point.tokens_per_second = tokens / point.seconds;
    point.requests_per_second = point.finished / point.seconds;
    point.ttft_p50 = percentile(ttft, 50);
    point.ttft_p99 = percentile(ttft, 99);
    point.tpot_p50 = percentile(tpot, 50);
    point.tpot_p99 = percentile(tpot, 99);
    point.e2e_p50 = percentile(e2e, 50);
    point.e2e_p99 = percentile(e2e, 99);
    s::RunSummary const summary = engine.metrics().summary();
    point.mean_kv_utilization = summary.mean_kv_utilization;
    point.peak_kv_usage = summary.peak_kv_usage;
    point.preemptions = summary.preemptions;
    return point;
}

Point run_configuration(std::string const& name, Options const& options, double rate) {
    if (name == "static") return run_point<StaticWhole>(name, options, rate);
    if (name == "static+chunked") return run_point<StaticChunked>(name, options, rate);
    if (name == "continuous") return run_point<ContinuousWhole>(name, options, rate);
    return run_point<ContinuousChunked>(name, options, rate);
}

// Pages the weights in and starts the OpenMP threads before anything is timed.
void warm_up(Options const& options) {
    Engine<Model, ContinuousWhole> engine(gguf::File::open(options.model), engine_options(options));
    Options small = options;
    small.requests = 2;
    for (Job const& job : make_jobs(small, 1.0)) engine.submit(request_for(job), {});
    engine.run_until_idle();
}

void print_header() {
    std::printf(
        "| configuration | rate (req/s) | done | tok/s | req/s | TTFT p50 (s) | TTFT p99 (s) | "
        "TPOT p50 (ms) | TPOT p99 (ms) | E2E p50 (s) | mean KV util | peak KV use | "
        "preemptions | load |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

void print_row(Point const& p) {
    std::printf(
        "| %s | %.2f | %d | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f | %.2f | %.2f | %d | "
        "%.1f |\n",
        p.configuration.c_str(), p.rate, p.finished, p.tokens_per_second, p.requests_per_second,
        p.ttft_p50, p.ttft_p99, p.tpot_p50 * 1e3, p.tpot_p99 * 1e3, p.e2e_p50,
        p.mean_kv_utilization, p.peak_kv_usage, p.preemptions, p.load_average);
    std::fflush(stdout);
}

void write_tsv(std::string const& path, std::vector<Point> const& points) {
    std::ofstream out(path);
    out << "configuration\trate\tfinished\tseconds\ttokens_per_s\trequests_per_s\tttft_p50\t"
           "ttft_p99\ttpot_p50\ttpot_p99\te2e_p50\te2e_p99\tmean_kv_utilization\tpeak_kv_usage\t"
           "preemptions\tload1\n";
    for (Point const& p : points)
        out << p.configuration << '\t' << p.rate << '\t' << p.finished << '\t' << p.seconds << '\t'
            << p.tokens_per_second << '\t' << p.requests_per_second << '\t' << p.ttft_p50 << '\t'
            << p.ttft_p99 << '\t' << p.tpot_p50 << '\t' << p.tpot_p99 << '\t' << p.e2e_p50 << '\t'
            << p.e2e_p99 << '\t' << p.mean_kv_utilization << '\t' << p.peak_kv_usage << '\t'
            << p.preemptions << '\t' << p.load_average << '\n';
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{
        "Serving under Poisson load: static vs continuous batching, whole vs chunked "
        "prefill"};
    app.add_option("-m,--model", options.model)->capture_default_str();
    app.add_option("-r,--rates", options.rates, "Offered loads, requests per second")
        ->capture_default_str();
    app.add_option("-c,--configurations", options.configurations)
        ->check(CLI::IsMember(all_configurations))
        ->capture_default_str();
    app.add_option("-n,--requests", options.requests, "Requests per (configuration, rate)")
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("--min-prompt", options.min_prompt)->capture_default_str();
    app.add_option("--max-prompt", options.max_prompt)->capture_default_str();
    app.add_option("--min-output", options.min_output)->capture_default_str();
    app.add_option("--max-output", options.max_output)->capture_default_str();
    app.add_option("-t,--threads", options.threads)->capture_default_str();
    app.add_option("--kv-mib", options.kv_budget_mib, "KV cache budget (fp32 KV)")
        ->capture_default_str();
    app.add_flag("--prefix-caching", options.prefix_caching,
                 "Keep finished requests' blocks in the prefix cache (no hits on random prompts)");
    app.add_option("--seed", options.seed)->capture_default_str();
    app.add_option("--precision", options.precision,
                   "Activations of the matrix products: f32 or int8 (EngineOptions)")
        ->check(CLI::IsMember({"f32", "int8"}))
        ->capture_default_str();
    app.add_option("-o,--tsv", options.tsv, "Data file for bench/plot_serving.gp")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    if (options.min_prompt < 1 || options.max_prompt < options.min_prompt ||
        options.min_output < 1 || options.max_output < options.min_output) {
        std::fprintf(stderr, "serving_bench: need 1 <= min <= max for prompt and output\n");
        return 1;
    }
    try {
        std::printf(
            "serving_bench: %d requests per point, prompts %d-%d random tokens, outputs %d-%d "
            "tokens (ignore_eos, greedy), %d thread(s), %s activations, KV budget %.0f MiB, "
            "prefix cache %s, seed %llu, load %.1f\n\n",
            options.requests, options.min_prompt, options.max_prompt, options.min_output,
            options.max_output, options.threads, options.precision.c_str(), options.kv_budget_mib,
            options.prefix_caching ? "on" : "off", static_cast<unsigned long long>(options.seed),
            load_average());
        warm_up(options);
        print_header();
        std::vector<Point> points;
        for (std::string const& name : options.configurations)
            for (double const rate : options.rates) {
                points.push_back(run_configuration(name, options, rate));
                print_row(points.back());
                write_tsv(options.tsv, points);  // after every point: a cut-short sweep keeps data
            }
    } catch (std::exception const& e) {
        std::fprintf(stderr, "serving_bench: %s\n", e.what());
        return 1;
    }
}
