// pipeline_bench: SmolLM2-135M over a batch of sequences, in one process, as pipeline stages
// (--pp 2) or as tensor-parallel ranks (--tp 3; SmolLM2's 9 query heads and 3 KV heads split
// over 3 or 9 ranks only), for docs/scale-out.md's measured table:
//
//   pipeline_bench --threads 2                                            # one process
//   mpirun --oversubscribe --allow-run-as-root -n 2 pipeline_bench --pp 2 --micro-batches 4
//   mpirun --oversubscribe --allow-run-as-root -n 3 pipeline_bench --tp 3
//
// The step the engine runs, straight through Llama::forward: one prefill step of every
// sequence's prompt (seeded random tokens), then decode steps of the whole batch, greedy,
// float32 activations. Reported on rank 0: prefill tokens/s, decode tokens/s (batch x steps /
// decode time) and the per-token latency (a decode step's time: each sequence gets one token per
// step), mean and p50; and a hash of the generated tokens, equal across modes where the tokens
// are.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/presets/presets.hpp>

#ifdef TINFER_WITH_MPI
#include <mpi.h>

#include <tinfer/distributed/mpi_communicator.hpp>
#endif

namespace {

using namespace tinfer;
using Clock = std::chrono::steady_clock;
constexpr ModelConfig smol = presets::smollm2_135m;

struct Options {
    std::string model;
    int batch = 8;
    int prompt = 64;
    int decode_steps = 32;
    int threads = 1;
    int pipeline = 1;
    int tensor = 1;
    int micro_batches = 2;
    std::uint64_t seed = 20261201;
};

double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

template <class Model>
int run(Model const& model, Options const& o, bool prints, std::string const& mode,
        void (*share_tokens)(std::vector<std::int32_t>&)) {
    kv::ContiguousKvCache<Model::local_config> cache(o.batch, o.prompt + o.decode_steps + 1);
    typename Model::Workspace ws(o.batch * o.prompt, o.threads);
    std::vector<float> logits(static_cast<std::size_t>(o.batch) * smol.vocab);
    std::mt19937_64 rng(o.seed);
    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(o.batch));
    for (auto& p : prompts) {
        p.resize(static_cast<std::size_t>(o.prompt));
        for (auto& t : p) t = static_cast<std::int32_t>(rng() % smol.vocab);
    }
    std::vector<std::int32_t> next(static_cast<std::size_t>(o.batch));
    std::uint64_t hash = 1469598103934665603ull;  // FNV-1a over the generated tokens
    auto const pick = [&] {
        for (std::size_t q = 0; q < next.size(); ++q) {
            auto const row = logits.begin() + static_cast<std::ptrdiff_t>(q * smol.vocab);
            next[q] = static_cast<std::int32_t>(std::max_element(row, row + smol.vocab) - row);
        }
        share_tokens(next);
        for (std::int32_t const t : next)
            hash = (hash ^ static_cast<std::uint32_t>(t)) * 1099511628211ull;
    };
    std::vector<SequenceChunk> chunks(static_cast<std::size_t>(o.batch));
    auto const start = Clock::now();
    for (int q = 0; q < o.batch; ++q)
        chunks[static_cast<std::size_t>(q)] = {
            .slot = q, .first_position = 0, .tokens = prompts[static_cast<std::size_t>(q)]};
    model.forward(chunks, cache, ws, logits);
    pick();
    auto const prefilled = Clock::now();
    std::vector<double> step_seconds;
    for (int step = 0; step < o.decode_steps; ++step) {
        auto const begin = Clock::now();
        for (int q = 0; q < o.batch; ++q)
            chunks[static_cast<std::size_t>(q)] = {
                .slot = q,
                .first_position = o.prompt + step,
                .tokens = std::span<std::int32_t const>(&next[static_cast<std::size_t>(q)], 1)};
        model.forward(chunks, cache, ws, logits);
        pick();
        step_seconds.push_back(seconds(begin, Clock::now()));
    }
    auto const end = Clock::now();
    if (!prints) return 0;
    double const decode = seconds(prefilled, end);
    std::vector<double> sorted = step_seconds;
    std::sort(sorted.begin(), sorted.end());
    double const p50 = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    std::printf("| %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %016llx |\n", mode.c_str(),
                o.batch, o.prompt, o.decode_steps, o.batch * o.prompt / seconds(start, prefilled),
                o.batch * o.decode_steps / decode, decode / o.decode_steps * 1e3, p50 * 1e3,
                static_cast<unsigned long long>(hash));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    char const* env_model = std::getenv("TINFER_MODEL_PATH");
    o.model = env_model ? env_model : "";
    CLI::App app{"SmolLM2 over a batch: one process, pipeline stages or tensor-parallel ranks"};
    app.add_option("--model", o.model, "SmolLM2-135M GGUF (default: $TINFER_MODEL_PATH)");
    app.add_option("--batch", o.batch, "Sequences")->capture_default_str();
    app.add_option("--prompt", o.prompt, "Prompt tokens per sequence")->capture_default_str();
    app.add_option("--decode-steps", o.decode_steps, "Decode steps")->capture_default_str();
    app.add_option("--threads", o.threads, "Threads per process")->capture_default_str();
    app.add_option("--pp", o.pipeline, "Pipeline stages (2; run under mpirun -n 2)");
    app.add_option("--tp", o.tensor, "Tensor-parallel degree (3; run under mpirun -n 3)");
    app.add_option("--micro-batches", o.micro_batches, "Micro-batches per step under --pp")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        if (o.model.empty()) throw Error("--model (or TINFER_MODEL_PATH) names the GGUF");
        auto const file = gguf::File::open(o.model);
        if (o.pipeline == 1 && o.tensor == 1)
            return run(model::Llama<smol>::bind(file), o, true,
                       "1 process, " + std::to_string(o.threads) + " threads",
                       [](std::vector<std::int32_t>&) {});
#ifdef TINFER_WITH_MPI
        distributed::MpiEnvironment environment(&argc, &argv);
        distributed::MpiCommunicator comm;
        auto const share = [](std::vector<std::int32_t>& tokens) {
            MPI_Bcast(tokens.data(), static_cast<int>(tokens.size()), MPI_INT32_T, 0,
                      MPI_COMM_WORLD);
        };
        bool const prints = comm.rank() == 0;
        std::string const per_rank = ", " + std::to_string(o.threads) + " thread(s) each";
        if (o.pipeline == 2 && o.tensor == 1) {
            using Parallel = model::PipelineParallel<2, distributed::MpiCommunicator>;
            return run(model::Llama<smol, Parallel>::bind(file, Parallel(comm, o.micro_batches)), o,
                       prints,
                       "PP 2, " + std::to_string(o.micro_batches) + " micro-batches" + per_rank,
                       share);
        }
        if (o.tensor == 3 && o.pipeline == 1) {
            using Parallel = model::TensorParallel<3, distributed::MpiCommunicator>;
            return run(model::Llama<smol, Parallel>::bind(file, Parallel(comm)), o, prints,
                       "TP 3" + per_rank, share);
        }
        throw Error("compiled for --pp 2 or --tp 3 (one at a time)");
#else
        throw Error("--pp and --tp need a build with MPI");
#endif
    } catch (std::exception const& e) {
        std::fprintf(stderr, "pipeline_bench: %s\n", e.what());
        return 1;
    }
}
