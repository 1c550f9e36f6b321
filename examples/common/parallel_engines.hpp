#pragma once
// --tp N and --pp N of the example programs (serve, generate) under `mpirun -n N`: every rank
// holds its part of the model, a tensor-parallel shard (Megatron's split, model/parallel.hpp) or
// a pipeline stage's contiguous layers (model/pipeline_parallel.hpp), and runs its own
// tinfer::Engine over it. Rank 0 alone hears requests (serve's HTTP, generate's prompts); the
// ranks stay in step through tinfer::distributed::Lockstep (rank 0's engine sends what each step
// took to the others; docs/scale-out.md). Without MPI (a build without it), both are refused.
//
// The engine type is one per (shape, split): under a split the KV cache is float32, so the KV
// codec list is not multiplied by the degrees and stage counts (each is one more engine per
// shipped shape it fits, and the engine is most of a program's build time).
#include <unistd.h>

#include <concepts>
#include <cstddef>
#include <iostream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <CLI/CLI.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/model/shipped_presets.hpp>

#include "cli_checks.hpp"

#ifdef TINFER_WITH_MPI
#include <tinfer/distributed/lockstep.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#endif

namespace tinfer::examples {

// The tensor-parallel degrees compiled in: each is one more engine per shipped shape that it
// divides (SmolLM2-135M: 3; Gemma 3 270M: 2).
inline constexpr int tensor_parallel_degrees[] = {2, 3};
// The pipeline stage counts compiled in: one more engine per shape whose layers they cut into
// stages of one layer pattern (SmolLM2-135M's 30 layers: 2; not Gemma 3's 18, whose global
// layer comes every 6th).
inline constexpr int pipeline_stage_counts[] = {2};

// How a run is split over the ranks of its mpirun: --tp, --pp (and its --micro-batches).
struct ParallelSplit {
    int tensor = 1;
    int pipeline = 1;
    int micro_batches = 2;
    bool split() const { return tensor > 1 || pipeline > 1; }
};

// --tp, --pp and --micro-batches of `program` (serve, generate), whose rank 0 `rank0_does`.
inline void add_split_options(CLI::App& app, ParallelSplit& split, std::string const& program,
                              std::string const& rank0_does) {
    app.add_option("--tp", split.tensor,
                   "Tensor-parallel degree: run as `mpirun -n N " + program + " --tp N`; rank 0 " +
                       rank0_does +
                       ", every rank computes its shard of each step (float32 KV "
                       "cache)")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    auto* pp_option = app.add_option("--pp", split.pipeline,
                                     "Pipeline stages: run as `mpirun -n N " + program +
                                         " --pp N`; rank 0 " + rank0_does +
                                         ", rank r computes stage r's layers of each step "
                                         "(float32 KV cache)")
                          ->capture_default_str()
                          ->check(tinfer::examples::at_least(1));
    app.add_option("--micro-batches", split.micro_batches,
                   "Pieces a step's rows are cut into under --pp, so the stages overlap")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1))
        ->needs(pp_option);
}

#ifdef TINFER_WITH_MPI
struct LockstepRanks {
    distributed::MpiCommunicator comm;
    distributed::Lockstep lockstep{comm};
    int micro_batches = 2;  // under --pp
    int rank() const { return comm.rank(); }
    int size() const { return comm.size(); }
};
#else
struct LockstepRanks {
    int rank() const { return 0; }
    int size() const { return 1; }
};
#endif

// --draft-model FILE (serve, generate), checked before anything loads: it drafts
// --speculative-tokens per step, in one process, over a float32 KV cache (the engines
// serving_engines.hpp compiles for it).
inline void check_draft_model_options(std::string const& draft_model, int speculative_tokens,
                                      std::string const& kv_cache_dtype,
                                      ParallelSplit const& split) {
    if (draft_model.empty()) return;
    if (speculative_tokens == 0)
        throw std::runtime_error(
            "--draft-model needs --speculative-tokens N (the draft tokens per step)");
    if (split.split())
        throw std::runtime_error("--draft-model cannot be combined with --tp or --pp");
    if (kv_cache_dtype != "fp32")
        throw std::runtime_error("--kv-cache-dtype " + kv_cache_dtype +
                                 " is not supported with --draft-model: fp32 only");
}

// The engine: the whole model, or this rank's part of it (`ranks` given). An engine whose
// drafter is a separate model (spec::DraftModelDrafter) binds it to `draft_model`, a file of the
// engine's shape; another is refused naming the flag.
template <class ParallelEngine>
ParallelEngine make_engine(gguf::File file, EngineOptions options,
                           [[maybe_unused]] LockstepRanks* ranks,
                           [[maybe_unused]] std::string const& draft_model = {}) {
    using Parallel = typename ParallelEngine::Parallel;
    using Drafter = std::remove_cvref_t<decltype(std::declval<ParallelEngine const&>().drafter())>;
    if constexpr (!std::default_initializable<Drafter>) {
        static_assert(Parallel::degree == 1, "make_engine: a draft model runs in one process");
        auto drafter = [&] {
            try {
                return Drafter(gguf::File::open(draft_model));
            } catch (std::exception const& e) {
                throw std::runtime_error("--draft-model " + draft_model + ": " + e.what());
            }
        }();
        return ParallelEngine(std::move(file), std::move(options), std::move(drafter));
    } else if constexpr (Parallel::degree == 1) {
        return ParallelEngine(std::move(file), std::move(options));
    } else {
#ifdef TINFER_WITH_MPI
        if constexpr (model::is_pipeline_parallel<Parallel>) {
            return ParallelEngine(std::move(file), std::move(options), {},
                                  Parallel(ranks->comm, ranks->micro_batches));
        } else {
            return ParallelEngine(std::move(file), std::move(options), {}, Parallel(ranks->comm));
        }
#endif
    }
}

// Rank 0 leads (returns nothing: it goes on to take requests); any other rank follows rank 0's
// steps until rank 0 finishes, and returns its exit status. Without `ranks`: nothing to do.
// `program` prefixes a follower's error.
template <class ParallelEngine>
std::optional<int> join_lockstep([[maybe_unused]] ParallelEngine& engine,
                                 [[maybe_unused]] LockstepRanks* ranks,
                                 [[maybe_unused]] char const* program) {
#ifdef TINFER_WITH_MPI
    if (ranks == nullptr) return std::nullopt;
    if (ranks->lockstep.leads()) {
        ranks->lockstep.lead(engine);
        return std::nullopt;
    }
    try {
        ranks->lockstep.follow(engine);
    } catch (std::exception const& e) {
        // Rank 0 may be waiting in a collective this rank will never join: end the job.
        std::cerr << program << ": rank " << ranks->comm.rank() << ": " << e.what() << std::endl;
        ranks->lockstep.abandon();
    }
    return 0;
#else
    return std::nullopt;
#endif
}

// Rank 0 after its engine's last step: the other ranks stop.
inline void finish_lockstep([[maybe_unused]] LockstepRanks* ranks) {
#ifdef TINFER_WITH_MPI
    if (ranks != nullptr) ranks->lockstep.finish();
#endif
}

// Rank 0's engine failed inside a step: the others wait in a collective, so the job ends.
inline void abandon_lockstep([[maybe_unused]] LockstepRanks* ranks) {
#ifdef TINFER_WITH_MPI
    if (ranks != nullptr) ranks->lockstep.abandon();
#endif
}

// "tensor parallel over 2 ranks" / "pipeline parallel over 2 stages (4 micro-batches)".
inline std::string describe(ParallelSplit const& split) {
    if (split.pipeline > 1)
        return "pipeline parallel over " + std::to_string(split.pipeline) + " stages (" +
               std::to_string(split.micro_batches) + " micro-batches)";
    return "tensor parallel over " + std::to_string(split.tensor) + " ranks";
}

// --tp or --pp: starts MPI, checks the rank count and calls
// body.template operator()<Engine>(ranks) with the engine of the file's shape split that way
// (Engine<Llama<Cfg, TensorParallel or PipelineParallel>, Serving>, float32 KV). `program`
// names the program in the messages ("serve", "generate").
template <class Serving, class Body>
int with_parallel_engine([[maybe_unused]] gguf::File const& file, ParallelSplit const& split,
                         char const* program, [[maybe_unused]] Body&& body) {
    bool const pipeline = split.pipeline > 1;
    std::string const flag = pipeline ? "--pp " + std::to_string(split.pipeline)
                                      : "--tp " + std::to_string(split.tensor);
    if (split.tensor > 1 && split.pipeline > 1)
        throw std::runtime_error("--tp and --pp cannot be combined (one split per run)");
#ifdef TINFER_WITH_MPI
    int const ranks_wanted = pipeline ? split.pipeline : split.tensor;
    // Serialized: serve's engine runs on a thread of its own, not main's.
    distributed::MpiEnvironment mpi(nullptr, nullptr, MPI_THREAD_SERIALIZED);
    LockstepRanks ranks;
    ranks.micro_batches = split.micro_batches;
    if (ranks.comm.size() != ranks_wanted)
        throw std::runtime_error(flag + " needs as many MPI ranks; this run has " +
                                 std::to_string(ranks.comm.size()) + " (mpirun -n N " + program +
                                 (pipeline ? " --pp N ...)" : " --tp N ...)"));
    return model::with_shipped_preset(file, [&]<ModelConfig Cfg>() {
        std::optional<int> result;
        std::string fitting;
        auto const note_fit = [&](int value) {
            fitting += (fitting.empty() ? "" : ", ") + std::to_string(value);
        };
        auto const try_degree = [&]<int Tp>() {
            if constexpr (model::tensor_parallel_fits<Cfg, Tp>()) {
                note_fit(Tp);
                if (split.tensor == Tp) {
                    using Parallel = model::TensorParallel<Tp, distributed::MpiCommunicator>;
                    result = body.template operator()<Engine<model::Llama<Cfg, Parallel>, Serving>>(
                        ranks);
                }
            }
        };
        auto const try_stages = [&]<int Stages>() {
            if constexpr (model::pipeline_fits<Cfg, Stages>()) {
                note_fit(Stages);
                if (split.pipeline == Stages) {
                    using Parallel = model::PipelineParallel<Stages, distributed::MpiCommunicator>;
                    result = body.template operator()<Engine<model::Llama<Cfg, Parallel>, Serving>>(
                        ranks);
                }
            }
        };
        if (pipeline) {
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                (try_stages.template operator()<pipeline_stage_counts[I]>(), ...);
            }
            (std::make_index_sequence<std::size(pipeline_stage_counts)>());
            if (!result)
                throw std::runtime_error(
                    flag + ": this model's layers split into equal stages of one layer pattern " +
                    (fitting.empty() ? std::string("over none of the compiled-in stage counts (2)")
                                     : "over " + fitting));
        } else {
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                (try_degree.template operator()<tensor_parallel_degrees[I]>(), ...);
            }
            (std::make_index_sequence<std::size(tensor_parallel_degrees)>());
            if (!result)
                throw std::runtime_error(
                    flag + ": this model's heads, KV heads and FFN split evenly over " +
                    (fitting.empty() ? std::string("none of the compiled-in degrees (2, 3)")
                                     : fitting));
        }
        return *result;
    });
#else
    throw std::runtime_error(flag + " needs " + program +
                             " built with MPI (examples/CMakeLists.txt finds it)");
#endif
}

}  // namespace tinfer::examples
