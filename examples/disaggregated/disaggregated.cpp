// disaggregated: prefill on one MPI process, decode on another, each an Engine in its role
// (distributed/disaggregation.hpp). Two modes:
//
// One prompt: rank 0 prefills it, streams the first token and ships the KV blocks; rank 1
// adopts them and decodes; its tokens come back to rank 0, which prints them as they arrive.
//
//   mpirun --oversubscribe --allow-run-as-root -n 2 build/examples/disaggregated --prompt "..."
//
// --load: what disaggregation is for. Steady decoding of short requests (--concurrency of them
// in flight, each replaced when it ends) while --long-prompts long prompts (--long-tokens)
// arrive --long-every seconds apart; prints the short requests' time per output token
// (each gap between two of a request's tokens, as its client sees it) at p50/p90/p99, and the
// long prompts' TTFT. Under mpirun -n 2 the decode rank never runs a prefill; started as one
// process (no mpirun) the same load runs on one colocated Engine, whose steps mix the long
// prompts' chunks with the decodes.
//
//   build/examples/disaggregated --load --threads 1                      # colocated
//   mpirun --oversubscribe --allow-run-as-root -n 2 build/examples/disaggregated --load --threads 1
//
// The KV cache stores fp32, so the text is exactly what build/examples/generate prints for the
// same prompt and sampling settings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <omp.h>
#include <CLI/CLI.hpp>

#include "../common/cli_options.hpp"

#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/with_preset.hpp>
#include <tinfer/presets/presets.hpp>

namespace {

using namespace tinfer;
using Clock = std::chrono::steady_clock;

constexpr int prefill_rank = 0;
constexpr int decode_rank = 1;

struct Options {
    std::string model;
    std::string prompt;
    bool chat = false;
    int max_tokens = 64;
    int threads = 0;
    int prefill_chunk = 256;
    std::size_t kv_budget_mb = 256;
    kernels::SamplingParams sampling;
    // --load
    bool load = false;
    double seconds = 20;
    int concurrency = 8;
    int short_prompt_tokens = 32;
    int short_max_tokens = 32;
    int long_tokens = 1500;
    double long_every = 2;
    int long_prompts = 2;
};

// serve's policies (examples/serve/serve.cpp): chunked prefill lets a long prompt share each
// step with the decodes instead of stalling them for its whole prefill.
using Batching = sched::ContinuousBatching<64, 1024>;
using Prefill = sched::ChunkedPrefill<256>;
using Serving = sched::Scheduler<Batching, Prefill, sched::PreemptByRecompute, sched::Fcfs>;
template <ModelConfig Cfg>
using ServingEngine = Engine<model::Llama<Cfg>, Serving, Host, PagedKv<16, kv::Fp32Codec>>;

template <ModelConfig Cfg>
ServingEngine<Cfg> make_engine(std::string const& path, Options const& options, int ranks) {
    int const threads =
        options.threads > 0 ? options.threads : std::max(1, omp_get_num_procs() / ranks);
    return ServingEngine<Cfg>(gguf::File::open(path),
                              {.kv_budget_bytes = options.kv_budget_mb << 20, .threads = threads},
                              Serving(Batching{}, Prefill{.max_chunk = options.prefill_chunk}));
}

// ---- the load ----

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0;
    std::ranges::sort(values);
    auto const index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
    return values[std::min(index, values.size() - 1)];
}

// Drives `engine` (or the prefill role around it) with the mixed load; `step` is one loop pass
// that returns whether work remains.
template <class Engine, class Step>
void run_load(Engine& engine, Step step, Options const& options, char const* mode) {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<std::int32_t> token(100, Engine::config.vocab - 1);
    auto const random_prompt = [&](int n) {
        std::vector<std::int32_t> prompt(static_cast<std::size_t>(n));
        for (auto& t : prompt) t = token(rng);  // fresh tokens: no prefix-cache hits
        return prompt;
    };
    kernels::SamplingParams greedy;
    greedy.temperature = 0;

    std::mutex mutex;
    std::vector<double> gaps;       // seconds between consecutive tokens of a short request
    std::vector<double> long_ttft;  // seconds from submit to first token of a long prompt
    int short_live = 0, long_live = 0, short_done = 0, long_done = 0;
    auto const start = Clock::now();
    auto const elapsed = [&] {
        return std::chrono::duration<double>(Clock::now() - start).count();
    };

    auto const submit_short = [&] {
        {
            std::lock_guard lock(mutex);
            ++short_live;
        }
        auto last = std::make_shared<std::optional<Clock::time_point>>();
        engine.submit(
            {.prompt_tokens = random_prompt(options.short_prompt_tokens),
             .max_tokens = options.short_max_tokens,
             .ignore_eos = true,
             .sampling = greedy},
            [&, last](TokenEvent const& e) {
                auto const now = Clock::now();
                std::lock_guard lock(mutex);
                if (e.token >= 0) {
                    if (*last) gaps.push_back(std::chrono::duration<double>(now - **last).count());
                    *last = now;
                }
                if (e.finish) --short_live, ++short_done;
            });
    };
    auto const submit_long = [&] {
        {
            std::lock_guard lock(mutex);
            ++long_live;
        }
        auto const submitted = Clock::now();
        auto seen = std::make_shared<bool>(false);
        engine.submit({.prompt_tokens = random_prompt(options.long_tokens),
                       .max_tokens = 2,
                       .ignore_eos = true,
                       .sampling = greedy},
                      [&, submitted, seen](TokenEvent const& e) {
                          std::lock_guard lock(mutex);
                          if (e.token >= 0 && !*seen) {
                              *seen = true;
                              long_ttft.push_back(
                                  std::chrono::duration<double>(Clock::now() - submitted).count());
                          }
                          if (e.finish) --long_live, ++long_done;
                      });
    };

    auto const live = [&] {
        std::lock_guard lock(mutex);
        return std::pair(short_live, long_live);
    };
    // Warm up: the short requests reach steady decoding before the first long prompt. Short
    // requests keep coming for --seconds and until every long prompt has been answered.
    int longs_sent = 0;
    double next_long = 1.0;
    for (;;) {
        double const t = elapsed();
        if (longs_sent < options.long_prompts && t >= next_long) {
            submit_long();
            ++longs_sent;
            next_long = t + options.long_every;
        }
        bool const open =
            t < options.seconds || longs_sent < options.long_prompts || live().second > 0;
        while (open && live().first < options.concurrency) submit_short();
        bool const busy = step();
        if (!busy && !open && live() == std::pair(0, 0)) break;
        if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::printf(
        "%s: %.1f s, %d short requests (%d-token prompts, %d tokens, %d in flight), %d long "
        "prompts of %d tokens (%.1f s apart)\n",
        mode, elapsed(), short_done, options.short_prompt_tokens, options.short_max_tokens,
        options.concurrency, long_done, options.long_tokens, options.long_every);
    std::printf(
        "  short requests' time per output token: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, "
        "max %.1f ms (%zu gaps)\n",
        1e3 * percentile(gaps, 0.5), 1e3 * percentile(gaps, 0.9), 1e3 * percentile(gaps, 0.99),
        1e3 * percentile(gaps, 1.0), gaps.size());
    std::printf("  long prompts' TTFT: p50 %.0f ms, max %.0f ms\n",
                1e3 * percentile(long_ttft, 0.5), 1e3 * percentile(long_ttft, 1.0));
}

// ---- one prompt ----

template <class Engine, class Run>
int serve_one(Engine& engine, Options const& options, Run run) {
    GenerationRequest request{.max_tokens = options.max_tokens, .sampling = options.sampling};
    if (options.chat) {
        request.messages = {{"user", options.prompt}};
    } else {
        request.prompt = options.prompt;
    }
    auto const start = Clock::now();
    std::optional<Clock::time_point> first;
    int tokens = 0;
    FinishReason finish = FinishReason::aborted;
    engine.submit(std::move(request), [&](TokenEvent const& e) {
        if (e.token >= 0 && !first) first = Clock::now();
        tokens += e.token >= 0;
        std::cout << e.text << std::flush;
        if (!e.error.empty()) std::cerr << "\n[disaggregated] error: " << e.error << "\n";
        if (e.finish) finish = *e.finish;
    });
    run();
    auto const end = Clock::now();
    std::cout << std::endl;
    auto const ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::fprintf(stderr,
                 "[disaggregated] %d tokens (%s): first after %.1f ms, then %.1f ms/token\n",
                 tokens, std::string(name_of(finish)).c_str(), first ? ms(*first - start) : 0.0,
                 first && tokens > 1 ? ms(end - *first) / (tokens - 1) : 0.0);
    return 0;
}

template <ModelConfig Cfg>
int run(Options const& options, std::optional<distributed::MpiCommunicator>& comm) {
    int const ranks = comm ? comm->size() : 1;
    auto engine = make_engine<Cfg>(options.model, options, ranks);
    if (!comm) {  // colocated: one engine does both phases
        auto const step = [&] { return engine.step(); };
        if (options.load) {
            run_load(engine, step, options, "colocated (1 process)");
            return 0;
        }
        return serve_one(engine, options, [&] { engine.run_until_idle(); });
    }
    if (comm->rank() == decode_rank) {
        distributed::DecodeRole decode(engine, *comm, {.peer = prefill_rank});
        decode.serve();
        return 0;
    }
    distributed::PrefillRole prefill(engine, *comm, {.peer = decode_rank});
    if (options.load) {
        run_load(
            engine, [&] { return prefill.step(); }, options,
            "disaggregated (prefill rank 0, decode rank 1)");
    } else {
        serve_one(engine, options, [&] { prefill.run_until_idle(); });
    }
    auto const& stats = prefill.stats();
    std::fprintf(
        stderr,
        "[disaggregated] %d hand-offs, %lld prompt positions, %.1f MB of KV sent in %.1f ms\n",
        stats.handoffs, static_cast<long long>(stats.tokens),
        static_cast<double>(stats.kv_bytes) / 1e6, stats.transfer_seconds * 1e3);
    prefill.shutdown();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Started by mpirun (its launcher sets these) or as one plain process (colocated).
    bool const under_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
    std::optional<distributed::MpiEnvironment> environment;
    // PrefillRole receives the decode rank's tokens on a thread of its own.
    if (under_mpi) environment.emplace(&argc, &argv, MPI_THREAD_MULTIPLE);
    Options options;
    options.model = examples::default_model_path().string();
    CLI::App app{"Prefill on MPI rank 0, decode on rank 1 (or both in one process without mpirun)"};
    app.add_option("--model", options.model, "GGUF file")->capture_default_str();
    app.add_option("--prompt", options.prompt, "Prompt text (a user message with --chat)");
    app.add_flag("--chat", options.chat, "Wrap the prompt in the model's chat template");
    app.add_option("--max-tokens", options.max_tokens, "Most tokens to generate")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    examples::add_sampling_options(app, options.sampling);
    app.add_option("--threads", options.threads, "CPU threads per rank (0: cores / ranks)")
        ->check(tinfer::examples::at_least(0));
    app.add_option("--prefill-chunk", options.prefill_chunk,
                   "Most prompt tokens per request per step")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--kv-budget-mb", options.kv_budget_mb, "KV cache per rank in MiB")
        ->capture_default_str();
    app.add_flag("--load", options.load, "Measure TPOT under long prompts mixed into decoding");
    app.add_option("--seconds", options.seconds, "--load: how long new requests arrive")
        ->capture_default_str();
    app.add_option("--concurrency", options.concurrency, "--load: short requests in flight")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--short-max-tokens", options.short_max_tokens,
                   "--load: tokens per short request")
        ->capture_default_str()
        ->check(CLI::Range(2, 100000));
    app.add_option("--long-tokens", options.long_tokens, "--load: tokens of each long prompt")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--long-prompts", options.long_prompts, "--load: how many long prompts")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(0));
    app.add_option("--long-every", options.long_every,
                   "--load: seconds from one long prompt's arrival to the next")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    CLI11_PARSE(app, argc, argv);

    std::optional<distributed::MpiCommunicator> comm;
    try {
        if (under_mpi) {
            comm.emplace();
            if (comm->size() != 2)
                throw Error("started on " + std::to_string(comm->size()) +
                            " ranks; run it as mpirun -n 2 (rank 0 prefills, rank 1 decodes), "
                            "or without mpirun for one colocated process");
        }
        if (!options.load && options.prompt.empty())
            throw RequestError("--prompt is empty (or give --load)");
        auto const file = gguf::File::open(options.model);
        // SmolLM2 only: distributed::KvBlockLayout ships blocks of one layer group, and Gemma 3's
        // hybrid cache has six (a sliding-window shape does not compile here).
        return model::with_preset<presets::smollm2_135m>(
            file, [&]<ModelConfig Cfg>() { return run<Cfg>(options, comm); });
    } catch (std::exception const& e) {
        std::cerr << "disaggregated: " << e.what() << "\n";
        // The other rank may be blocked waiting for this one.
        if (under_mpi) MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
}
