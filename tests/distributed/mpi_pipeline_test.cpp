// Pipeline parallelism over 2 ranks (model/pipeline_parallel.hpp), against one process.
//
// Engine: every rank runs its own Engine in lockstep over a 2-stage model (each rank holds 2 of
// a synthetic model's 4 layers and their KV), fed the same requests under continuous batching
// with chunked prefill, the prefix cache, preemption forced by a small KV budget, speculative
// rounds (prompt lookup: all-logits chunks) and greedy and seeded sampled requests together;
// 3 micro-batches per step, so chunks are cut between micro-batches. Checked: every request's
// tokens equal one process's bitwise (the forward pass is batch- and chunk-invariant, and a
// stage boundary moves floats unchanged), on every rank.
//
// SmolLM2-135M (30 layers, 15 per stage): a mixed step of prefill chunks, then decode steps,
// straight through Llama::forward; every step's logits equal one process's bitwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/synthetic_model.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/presets/presets.hpp>

#include "lockstep_load.hpp"
#include "mpi_testing.hpp"

using namespace tinfer;
namespace s = tinfer::sched;

namespace {

constexpr int stages = 2;
using Pipeline = model::PipelineParallel<stages, distributed::MpiCommunicator>;

constexpr ModelConfig tiny{.layers = 4,
                           .hidden = 96,
                           .heads = 6,
                           .kv_heads = 3,
                           .head_dim = 16,
                           .ffn = 192,
                           .vocab = 64,
                           .max_context = 256,
                           .rope_base = 10000.0,
                           .norm_eps = 1e-5,
                           .arch = {.lm_head = LmHead::separate}};
using Serving = s::Scheduler<s::ContinuousBatching<4, 64>, s::ChunkedPrefill<16>,
                             s::PreemptByRecompute, s::Fcfs>;
using Single = Engine<model::Llama<tiny>, Serving>;
using Staged = Engine<model::Llama<tiny, Pipeline>, Serving>;
static_assert(Staged::Cache::bytes_per_block * stages == Single::Cache::bytes_per_block,
              "a stage's KV blocks hold its own layers only");

using testing::mpi::lockstep_load;
using testing::mpi::serve_load;
using testing::mpi::Stream;

// Rank 0's vector on every rank, to compare with this rank's.
std::vector<std::int32_t> rank0_of(std::vector<std::int32_t> tokens, MPI_Comm comm) {
    int length = static_cast<int>(tokens.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, comm);
    tokens.resize(static_cast<std::size_t>(length));
    MPI_Bcast(tokens.data(), length, MPI_INT32_T, 0, comm);
    return tokens;
}

void engine_case(testing::mpi::Checks& checks, distributed::MpiCommunicator& mpi,
                 std::uint64_t seed) {
    gguf::SyntheticModel model(tiny, 20261201);
    model.with_tokenizer();
    std::vector<std::byte> const bytes = model.bytes();
    auto const requests = lockstep_load(seed, {.speculate = true});
    // 10 blocks of 16 tokens on every rank, as in the one process: the load needs more, so
    // both preempt, at the same steps.
    Single single(gguf::File::from_bytes(bytes),
                  {.kv_budget_bytes = 10 * Single::Cache::bytes_per_block, .threads = 1});
    std::vector<Stream> const expected = serve_load(single, requests, "one process");
    Staged staged(gguf::File::from_bytes(bytes),
                  {.kv_budget_bytes = 10 * Staged::Cache::bytes_per_block, .threads = 1}, {},
                  Pipeline(mpi, /*micro_batches=*/3));
    std::vector<Stream> const got = serve_load(staged, requests, "2 stages");

    auto const summary = staged.metrics().summary();
    checks.expect(summary.preemptions > 0, "the small KV budget forced preemptions");
    checks.expect(summary.prefix_hit_rate > 0, "the shared prefix was a prefix-cache hit");
    checks.expect(staged.speculation_stats().drafted > 0,
                  "speculative rounds verified drafts (all-logits chunks)");
    checks.expect(staged.cache().used_blocks() == staged.cache().prefix_only_blocks(),
                  "every sequence's blocks went back");
    for (std::size_t i = 0; i < requests.size(); ++i) {
        std::string const which = "request " + std::to_string(i);
        checks.expect(!got[i].tokens.empty(), which + " streamed tokens");
        checks.expect(got[i].tokens == expected[i].tokens,
                      which + ": the pipeline's tokens equal one process's");
        checks.expect(got[i].finish == expected[i].finish, which + ": the same finish reason");
        checks.expect(rank0_of(got[i].tokens, mpi.handle()) == got[i].tokens,
                      which + ": this rank's tokens equal rank 0's");
    }
    if (mpi.rank() == 0)
        std::printf(
            "engine: %zu requests, %d preemptions, prefix hit rate %.2f, %ld drafts, "
            "%ld accepted\n",
            requests.size(), summary.preemptions, summary.prefix_hit_rate,
            staged.speculation_stats().drafted, staged.speculation_stats().accepted);
}

// SmolLM2 through Llama::forward: one step of three prefill chunks (two micro-batches cut one
// of them), then decode steps of all three; logits compared bitwise with one process on rank 0
// (every rank holds the same logits after the step: checked on rank 1 against rank 0's).
void smollm2_case(testing::mpi::Checks& checks, distributed::MpiCommunicator& mpi,
                  std::uint64_t seed) {
    char const* path = std::getenv("TINFER_MODEL_PATH");
    if (!checks.expect(path != nullptr && *path, "TINFER_MODEL_PATH names the SmolLM2 GGUF"))
        return;
    constexpr ModelConfig smol = presets::smollm2_135m;
    using Whole = model::Llama<smol>;
    using Stage = model::Llama<smol, Pipeline>;
    gguf::File const file = gguf::File::open(path);
    Stage const stage = Stage::bind(file, Pipeline(mpi, /*micro_batches=*/2));
    std::mt19937_64 rng(seed);
    constexpr int sequences = 3, decode_steps = 4;
    std::vector<std::vector<std::int32_t>> prompts(sequences);
    for (auto& p : prompts) {
        p.resize(9 + rng() % 12);
        for (auto& t : p) t = static_cast<std::int32_t>(rng() % smol.vocab);
    }
    int const capacity = 32;
    kv::ContiguousKvCache<Stage::local_config> stage_cache(sequences, capacity);
    typename Stage::Workspace stage_ws(64, 1);
    std::vector<float> stage_logits(sequences * static_cast<std::size_t>(smol.vocab));
    // The reference: rank 0 only (the ranks share the 2 cores).
    bool const reference = mpi.rank() == 0;
    std::optional<Whole> whole;
    std::optional<kv::ContiguousKvCache<smol>> whole_cache;
    std::optional<typename Whole::Workspace> whole_ws;
    std::vector<float> whole_logits(stage_logits.size());
    if (reference) {
        whole.emplace(Whole::bind(file));
        whole_cache.emplace(sequences, capacity);
        whole_ws.emplace(64, 1);
    }
    std::vector<std::int32_t> next(sequences);
    for (int step = 0; step <= decode_steps; ++step) {
        std::vector<SequenceChunk> chunks;
        for (int q = 0; q < sequences; ++q) {
            auto const sq = static_cast<std::size_t>(q);
            int const position = step == 0 ? 0 : static_cast<int>(prompts[sq].size()) + step - 1;
            chunks.push_back({.slot = q,
                              .first_position = position,
                              .tokens = step == 0 ? std::span<std::int32_t const>(prompts[sq])
                                                  : std::span<std::int32_t const>(&next[sq], 1)});
        }
        std::fill(stage_logits.begin(), stage_logits.end(), std::nanf(""));
        stage.forward(chunks, stage_cache, stage_ws, stage_logits);
        if (reference) {
            whole->forward(chunks, *whole_cache, *whole_ws, whole_logits);
            checks.expect(std::memcmp(whole_logits.data(), stage_logits.data(),
                                      whole_logits.size() * sizeof(float)) == 0,
                          "step " + std::to_string(step) +
                              ": SmolLM2's logits over 2 stages equal one process's bitwise");
        }
        // Every rank's logits are the last stage's: rank 0's bytes equal rank 1's.
        std::vector<std::int32_t> as_ints(stage_logits.size());
        std::memcpy(as_ints.data(), stage_logits.data(), as_ints.size() * sizeof(float));
        checks.expect(rank0_of(as_ints, mpi.handle()) == as_ints,
                      "step " + std::to_string(step) + ": every rank holds the same logits");
        // Greedy next tokens, the same on every rank (the same logits).
        for (int q = 0; q < sequences; ++q) {
            auto const row = std::span<float const>(stage_logits)
                                 .subspan(static_cast<std::size_t>(q) * smol.vocab, smol.vocab);
            next[static_cast<std::size_t>(q)] =
                static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        }
    }
}

void refusals_case(testing::mpi::Checks& checks, distributed::MpiCommunicator& mpi) {
    auto const refuses = [&](auto make, std::string const& what) {
        try {
            make();
            checks.expect(false, what + " was refused");
        } catch (Error const& e) {
            checks.expect(std::string(e.what()).find("PipelineParallel") != std::string::npos,
                          what + ": the message names PipelineParallel (" + e.what() + ")");
        }
    };
    refuses([&] { model::PipelineParallel<3, distributed::MpiCommunicator>{mpi}; },
            "3 stages over 2 ranks");
    refuses([&] { Pipeline(mpi, 0); }, "0 micro-batches");
    // Drafting with the first layers would need layers of the other stage.
    gguf::SyntheticModel model(tiny, 7);
    std::vector<std::byte> const bytes = model.bytes();
    gguf::File const file = gguf::File::from_bytes(bytes);
    auto const staged = model::Llama<tiny, Pipeline>::bind(file, Pipeline(mpi));
    kv::ContiguousKvCache<model::Llama<tiny, Pipeline>::local_config> cache(1, 8);
    typename model::Llama<tiny, Pipeline>::Workspace ws(8, 1);
    std::vector<float> logits(tiny.vocab);
    std::int32_t const token = 1;
    SequenceChunk const chunk{.slot = 0, .first_position = 0, .tokens = std::span(&token, 1)};
    try {
        staged.forward(std::span(&chunk, 1), cache, ws, logits, /*layers=*/1);
        checks.expect(false, "a forward over 1 of 4 layers was refused");
    } catch (RequestError const& e) {
        checks.expect(std::string(e.what()).find("pipeline parallelism") != std::string::npos,
                      std::string("the refusal names pipeline parallelism: ") + e.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "mpi_pipeline_test", [](testing::mpi::Checks& checks) {
        std::uint64_t const seed = testing::mpi::shared_seed();
        distributed::MpiCommunicator mpi;
        if (!checks.expect(mpi.size() == stages, "needs 2 ranks")) return;
        refusals_case(checks, mpi);
        engine_case(checks, mpi, seed);
        smollm2_case(checks, mpi, seed);
    });
}
