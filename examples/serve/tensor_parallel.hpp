#pragma once
// serve --tp N under `mpirun -n N`: every rank holds its shard of the model (Megatron's split,
// model/parallel.hpp) and runs the same engine steps; rank 0 alone serves HTTP. The ranks stay
// in step through tinfer::distributed::Lockstep (rank 0's engine sends what each step took to
// the others; docs/scale-out.md). Without MPI (a build without it), --tp > 1 is refused.
#include <unistd.h>

#include <cstddef>
#include <iostream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <tinfer/engine/engine.hpp>
#include <tinfer/model/shipped_presets.hpp>

#ifdef TINFER_WITH_MPI
#include <tinfer/distributed/lockstep.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/model/parallel.hpp>
#endif

namespace serve {

// The tensor-parallel degrees serve compiles in: each is one more engine per shipped shape
// that it divides (SmolLM2-135M: 3; Gemma 3 270M: 2).
inline constexpr int tensor_parallel_degrees[] = {2, 3};

#ifdef TINFER_WITH_MPI
struct TensorParallelRanks {
    tinfer::distributed::MpiCommunicator comm;
    tinfer::distributed::Lockstep lockstep{comm};
};
#else
struct TensorParallelRanks {};
#endif

// The engine: the whole model, or this rank's shard of it (`ranks` given).
template <class ServingEngine>
ServingEngine make_engine(tinfer::gguf::File file, tinfer::EngineOptions options,
                          [[maybe_unused]] TensorParallelRanks* ranks) {
    using Parallel = typename ServingEngine::Parallel;
    if constexpr (Parallel::degree > 1) {
        return ServingEngine(std::move(file), std::move(options), {}, Parallel(ranks->comm));
    } else {
        return ServingEngine(std::move(file), std::move(options));
    }
}

// Rank 0 leads (returns nothing: it goes on to serve HTTP); any other rank follows rank 0's
// steps until rank 0 finishes, and returns its exit status. Without `ranks`: nothing to do.
template <class ServingEngine>
std::optional<int> join_lockstep([[maybe_unused]] ServingEngine& engine,
                                 [[maybe_unused]] TensorParallelRanks* ranks) {
#ifdef TINFER_WITH_MPI
    if (ranks == nullptr) return std::nullopt;
    if (ranks->lockstep.leads()) {
        ranks->lockstep.lead(engine);
        // The pid: SIGTERM to rank 0 stops the job cleanly (mpirun's own forwarding may kill).
        std::cout << "serve: tensor parallel over " << ranks->comm.size() << " ranks; rank 0 (pid "
                  << getpid() << ") serves HTTP" << std::endl;
        return std::nullopt;
    }
    try {
        ranks->lockstep.follow(engine);
    } catch (std::exception const& e) {
        // Rank 0 may be waiting in a collective this rank will never join: end the job.
        std::cerr << "serve: rank " << ranks->comm.rank() << ": " << e.what() << std::endl;
        ranks->lockstep.abandon();
    }
    return 0;
#else
    return std::nullopt;
#endif
}

// Rank 0 after its engine's last step: the other ranks stop.
inline void finish_lockstep([[maybe_unused]] TensorParallelRanks* ranks) {
#ifdef TINFER_WITH_MPI
    if (ranks != nullptr) ranks->lockstep.finish();
#endif
}

// Rank 0's engine failed inside a step: the others wait in a collective, so the job ends.
inline void abandon_lockstep([[maybe_unused]] TensorParallelRanks* ranks) {
#ifdef TINFER_WITH_MPI
    if (ranks != nullptr) ranks->lockstep.abandon();
#endif
}

// --tp `degree`: starts MPI, checks the rank count and calls
// body.template operator()<Engine>(ranks) with the tensor-parallel engine of the file's shape.
// Under --tp the KV cache is float32 (the codec list is not multiplied by the degrees).
template <class Serving, class Body>
int with_tensor_parallel_engine([[maybe_unused]] tinfer::gguf::File const& file, int degree,
                                [[maybe_unused]] Body&& body) {
#ifdef TINFER_WITH_MPI
    using namespace tinfer;
    distributed::MpiEnvironment mpi(nullptr, nullptr, MPI_THREAD_SERIALIZED);
    TensorParallelRanks ranks;
    if (ranks.comm.size() != degree)
        throw std::runtime_error(
            "--tp " + std::to_string(degree) + " needs as many MPI ranks; this run has " +
            std::to_string(ranks.comm.size()) + " (mpirun -n N serve --tp N ...)");
    return model::with_shipped_preset(file, [&]<ModelConfig Cfg>() {
        std::optional<int> result;
        std::string fitting;
        auto const try_degree = [&]<int Tp>() {
            if constexpr (model::tensor_parallel_fits<Cfg, Tp>()) {
                fitting += (fitting.empty() ? "" : ", ") + std::to_string(Tp);
                if (degree == Tp) {
                    using Parallel = model::TensorParallel<Tp, distributed::MpiCommunicator>;
                    using TensorParallelEngine = Engine<model::Llama<Cfg, Parallel>, Serving>;
                    result = body.template operator()<TensorParallelEngine>(ranks);
                }
            }
        };
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (try_degree.template operator()<tensor_parallel_degrees[I]>(), ...);
        }
        (std::make_index_sequence<std::size(tensor_parallel_degrees)>());
        if (!result)
            throw std::runtime_error("--tp " + std::to_string(degree) +
                                     ": this model's heads, KV heads and FFN split evenly over " +
                                     (fitting.empty()
                                          ? std::string("none of the compiled-in degrees (2, 3)")
                                          : fitting));
        return *result;
    });
#else
    throw std::runtime_error("--tp " + std::to_string(degree) +
                             " needs a build with MPI (examples/CMakeLists.txt finds it)");
#endif
}

}  // namespace serve
