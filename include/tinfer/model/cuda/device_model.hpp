#pragma once
// DeviceModel<Cfg, Cache>: the model the serving Engine runs on its CUDA backend
// (Engine<Llama<Cfg>, Scheduler, Cuda>). The forward pass is DeviceForwardPass (the one decoder
// layer over the device's ops); the KV blocks are those of the Engine's own kv::PagedKvCache,
// whose storage policy keeps them in device memory (kv::DeviceBlocks): the host cache's
// allocator, block tables, reference counts, copy-on-write, prefix cache and swap stay the
// single source of truth, and each step hands the device its tables.
//
//   Engine (host)                               device
//   -------------                               ------
//   KvLifecycle: admit / grow / fork /          kv::DeviceBlocks: the pool's bytes
//   swap / prefix cache on the host tables      (CoW copies, swap in and out: cudaMemcpy)
//   StepRunner -> DeviceModel::forward
//     checks, CoW for shared blocks written,
//     DeviceStepPlan from cache.block_table()
//     -> DeviceForwardPass::run ------------->  embedding, layers, LM head (one stream)
//     <- logits (D2H); mark_written on success
//
// This header is plain C++: the Engine, the scheduler and the tokenizer compile with the host
// compiler (OpenMP and all), and only the device half, model/cuda/device_model.cuh, needs nvcc.
// A program that serves on a GPU compiles one .cu file that includes device_model.cuh and
// instantiates the models it runs, the cache type spelled out (nvcc 13's host code loses a
// class-type template argument reached through an alias template such as tinfer::CudaCache,
// which names the same type):
//
//   // engines.cu (nvcc)
//   #include <tinfer/model/cuda/device_model.cuh>
//   template class tinfer::cuda::DeviceModel<
//       cfg, tinfer::kv::PagedKvCache<cfg, 16, tinfer::kv::Fp32Codec, tinfer::kv::Fp32Codec,
//                                     tinfer::kv::DeviceBlocks>>;
//
// and links it with the rest and CUDA::cudart. What the device layer does not implement yet is a
// compile error there, naming the part (model/cuda/cuda_ops.cuh).
#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/sequence_chunk.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::cuda {

// Whether the device layer composes every part of Cfg (cuda_ops.cuh refuses the others at
// compile time): no sliding-window layers, scores scaled by 1/sqrt(head_dim), one RoPE base. A
// program choosing a backend at run time checks it before instantiating a device model.
template <ModelConfig Cfg>
inline constexpr bool runs_on_device =
    !Cfg.has_layer_kind(LayerKind::sliding) && Cfg.query_scale_dim() == Cfg.head_dim;

// What of Cfg the device layer lacks, for a refusal's message ("" where runs_on_device).
template <ModelConfig Cfg>
std::string missing_on_device() {
    if constexpr (Cfg.has_layer_kind(LayerKind::sliding))
        return "sliding-window attention layers";
    else if constexpr (Cfg.query_scale_dim() != Cfg.head_dim)
        return "a query scale other than 1/sqrt(head_dim) (query_pre_attn_scalar)";
    else
        return "";
}

template <ModelConfig Cfg, class Cache>
class DeviceModel {
    static_assert(Cache::group_count == 1,
                  "cuda::DeviceModel: the device cache has one layer group; sliding-window layer "
                  "groups are not implemented on the CUDA backend yet");

  public:
    static constexpr ModelConfig config = Cfg;
    static constexpr ModelConfig local_config = Cfg;
    using ParallelPolicy = model::NoParallel;

    // What the Engine's StepRunner sizes for a step; the device buffers are the model's own,
    // allocated by reserve_steps.
    class Workspace {
      public:
        Workspace(int max_tokens, int threads) : max_tokens_(max_tokens), threads_(threads) {
            if (max_tokens <= 0) throw Error("DeviceModel::Workspace: max_tokens must be positive");
        }
        int max_tokens() const { return max_tokens_; }
        int threads() const { return threads_; }

      private:
        int max_tokens_;
        int threads_;
    };

    // Uploads the file's weights (a matrix of a type the device kernels do not read is a
    // ConfigMismatch naming the tensor).
    static DeviceModel bind(gguf::File const& file, model::NoParallel = {}) {
        return DeviceModel(model::ModelWeights<Cfg>::bind(file));
    }
    explicit DeviceModel(model::ModelWeights<Cfg> const& weights);
    ~DeviceModel();
    DeviceModel(DeviceModel&&) noexcept;
    DeviceModel& operator=(DeviceModel&&) noexcept;

    // Allocates the device buffers of steps of at most `max_rows` tokens over `max_chunks`
    // sequences (the Engine calls it once it knows them, before serving).
    void reserve_steps(int max_rows, int max_chunks);

    // As model::Llama::forward: runs the chunks, their K and V into `cache`'s device blocks,
    // their logits ([rows][vocab] in chunk order) into `logits` (on the host). The chunks'
    // positions count as written only when the step succeeded. Token eviction's chunks (cache
    // slots apart from positions) run as on the host. Refused with RequestError: a chunk whose
    // cache slots the cache has not reserved, and attention scores (H2O) until the device
    // computes them.
    template <class Precision = kernels::Float32Activations, class Shapes = StaticShapes>
    void forward(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws,
                 std::span<float> logits, int layers = Cfg.layers) const {
        if constexpr (!std::same_as<Precision, kernels::Float32Activations>) {
            throw Error(
                "cuda::DeviceModel: int8 activations are not implemented on the CUDA backend; "
                "the device multiplies float32 activations with the decoded weights");
        } else {
            if (static_cast<std::size_t>(ws.max_tokens()) < rows_of(chunks))
                throw RequestError("the step has " + std::to_string(rows_of(chunks)) +
                                   " tokens, the workspace holds " +
                                   std::to_string(ws.max_tokens()));
            run_step(chunks, cache, logits, layers);
        }
    }

  private:
    static std::size_t rows_of(std::span<SequenceChunk const> chunks) {
        std::size_t rows = 0;
        for (SequenceChunk const& c : chunks) rows += c.tokens.size();
        return rows;
    }
    void run_step(std::span<SequenceChunk const> chunks, Cache& cache, std::span<float> logits,
                  int layers) const;

    struct Device;  // the forward pass: model/cuda/device_model.cuh
    std::unique_ptr<Device> device_;
};

}  // namespace tinfer::cuda
