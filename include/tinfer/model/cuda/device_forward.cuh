#pragma once
// DeviceForwardPass<Cfg, KvLayout>: the model's weights in device memory and one step's forward
// pass over them, the layers being model/decoder_layer.hpp over CudaOps (cuda_ops.cuh), the same
// run_decoder_stack the host's Llama runs over HostOps. It owns no KV cache: each step gets the
// pool (KvLayout's byte layout) and a DeviceStepPlan whose block tables say where each sequence's
// positions are, so the block tables can be the device model's own (cuda::DeviceLlama) or a host
// kv::PagedKvCache's (cuda::DeviceModel, the Engine's CUDA backend).
//
//   host                                   device (one stream)
//   ----                                   -------------------
//   DeviceStepPlan ------ 1 H2D --------> [tokens|positions|rows->chunk|starts|contexts|
//                                          logit rows|block tables]
//                                          embedding (x sqrt(hidden)) -> hidden, rope table
//                                          run_decoder_stack over CudaOps: per layer
//                                            norm -> Q K V (+bias) -> [QK-norm] -> RoPE
//                                            -> kv_append (paged pool) -> attention: decode
//                                               (split-KV) when every chunk is one token, else
//                                               prefill (flash)
//                                            -> O -> [post-norm] -> hidden += ...
//                                            -> norm -> act(gate) * up -> down -> [post-norm]
//                                            -> hidden += ...
//                                          gather logit rows -> norm -> LM head -> [soft-cap]
//   logits <------------------ D2H ------
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/kernel_status.cuh>
#include <tinfer/model/cuda/cuda_ops.cuh>
#include <tinfer/model/cuda/step_plan.hpp>

namespace tinfer::cuda {

// A CUDA stream, destroyed once. Created blocking (ordered after work on the legacy default
// stream, where the buffers' synchronous copies and fills run).
class CudaStream {
  public:
    CudaStream() { kernels::cuda::check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
    CudaStream(CudaStream const&) = delete;
    CudaStream& operator=(CudaStream const&) = delete;
    ~CudaStream() {
        if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);  // a destructor cannot report
    }
    cudaStream_t get() const { return stream_; }

  private:
    cudaStream_t stream_ = nullptr;
};

// Ints of the largest DeviceStepPlan::packed for these sizes and block size: every array at its
// most, plus alignment padding.
inline std::size_t step_plan_capacity(DeviceStepSizes const& s, int block_size) {
    std::size_t const rows = static_cast<std::size_t>(s.max_rows);
    std::size_t const chunks = static_cast<std::size_t>(s.max_chunks);
    std::size_t const stride =
        static_cast<std::size_t>(DeviceBlockTables::blocks_for(s.max_context, block_size));
    constexpr std::size_t arrays = 8, padding = 4;
    return 4 * rows + (chunks + 1) + chunks + static_cast<std::size_t>(s.max_logit_rows) +
           chunks * stride + arrays * padding;
}

// The sizes with their defaults filled in (logit rows: one per chunk, at most the rows; context:
// the model's), checked: every size positive, the context at most the model's (tinfer::Error).
template <ModelConfig Cfg>
DeviceStepSizes resolved_step_sizes(DeviceStepSizes s) {
    if (s.max_logit_rows == 0) s.max_logit_rows = s.max_chunks;
    if (s.max_context == 0) s.max_context = Cfg.max_context;
    if (s.max_chunks <= 0 || s.max_rows <= 0 || s.max_logit_rows <= 0 || s.max_context <= 0 ||
        s.max_context > Cfg.max_context)
        throw Error("device step sizes: every size must be positive, max_context at most " +
                    std::to_string(Cfg.max_context));
    if (s.max_logit_rows > s.max_rows) s.max_logit_rows = s.max_rows;
    return s;
}

template <ModelConfig Cfg, class KvLayout>
requires ModelShape<Cfg>
class DeviceForwardPass {
  public:
    using KeyCodec = typename KvLayout::KeyCodec;
    using Ops = CudaOps<Cfg, KvLayout>;

    // Uploads `weights` (host views, e.g. ModelWeights<Cfg>::bind(file); a matrix of a type the
    // device kernels do not read is a ConfigMismatch naming it); the host weights may go away
    // afterwards. Steps need reserve() first.
    explicit DeviceForwardPass(model::ModelWeights<Cfg> const& weights)
        : layout_(DeviceWeightLayout<Cfg>::plan(weights)),
          arena_(layout_.bytes),
          weights_(layout_.on_device(arena_.data())) {
        for (WeightSegment const& s : layout_.segments)
            kernels::cuda::check(
                cudaMemcpy(arena_.data() + s.offset, s.host, s.bytes, cudaMemcpyHostToDevice),
                "cudaMemcpy weights to device");
        kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after upload");
    }
    DeviceForwardPass(model::ModelWeights<Cfg> const& weights, DeviceStepSizes const& sizes)
        : DeviceForwardPass(weights) {
        reserve(sizes);
    }

    // Allocates every buffer a step of `sizes` can need (once, before serving: a decode step
    // allocates nothing).
    void reserve(DeviceStepSizes const& sizes) {
        sizes_ = resolved_step_sizes<Cfg>(sizes);
        activations_ = std::make_unique<DeviceActivations<Cfg, KeyCodec>>(sizes_);
        plan_buffer_ = kernels::cuda::DeviceBuffer<std::int32_t>(
            step_plan_capacity(sizes_, KvLayout::block_size));
    }

    DeviceForwardPass(DeviceForwardPass const&) = delete;
    DeviceForwardPass& operator=(DeviceForwardPass const&) = delete;

    DeviceStepSizes const& sizes() const { return sizes_; }
    StepLimits limits() const {
        return {.max_chunks = sizes_.max_chunks,
                .max_rows = sizes_.max_rows,
                .max_logit_rows = sizes_.max_logit_rows,
                .vocab = Cfg.vocab,
                .context_granularity = graphs_ ? graph_context_granularity : 1};
    }

    // Decode steps (every chunk one token) captured as CUDA graphs and replayed: one graph per
    // launch shape (chunks, table stride, context bound), which plans made with limits() share
    // for graph_context_granularity positions. Off by default. The plan's upload, the logits'
    // download and the sampler stay outside the graph (host memory is pageable).
    static constexpr int graph_context_granularity = 256;
    void use_cuda_graphs(bool on) {
        if (!on) release_graphs();
        graphs_ = on;
    }
    std::size_t weight_bytes() const { return arena_.bytes(); }
    // Weight bytes one step reads: every tensor but the token embedding (a row per token),
    // unless the LM head is the embedding (tied). The numerator of a decode roofline.
    std::size_t streamed_weight_bytes() const {
        if (layout_.output.offset == layout_.token_embedding.offset) return layout_.bytes;
        for (WeightSegment const& s : layout_.segments)
            if (s.offset == layout_.token_embedding.offset) return layout_.bytes - s.bytes;
        return layout_.bytes;
    }
    // Events after each op of the following steps, for a time breakdown (nullptr: none).
    void set_profile(StepProfile* profile) { profile_ = profile; }
    // Prefill products (steps of more than 8 rows) through `gemm`, e.g. a
    // kernels::cuda::CublasBf16Gemm on tensor cores (nullptr: the float32 kernels). It must
    // outlive its use and hold the model's largest matrix and widest input at reserve()'s rows.
    void set_prefill_gemm(PrefillGemm* gemm) { prefill_gemm_ = gemm; }
    cudaStream_t stream() const { return stream_.get(); }
    // logits of the last step, [plan.logit_rows][vocab] (device memory).
    float const* device_logits() const { return activations_->logits.data(); }

    // Queues the step's kernels (layers [0, layers), then, with logits, the final norm and the
    // LM head) and, when `logits` is not empty, the copy of its logits to the host; then waits
    // and throws for any failure: a launch's, the stream's, or a refusal the kernels reported.
    // `after_kernels` runs on the host after the kernels are queued, before the wait (the
    // device sampler queues itself there).
    template <class AfterKernels>
    void run(DeviceStepPlan const& plan, std::byte* kv_pool, std::span<float> logits, int layers,
             AfterKernels&& after_kernels) {
        namespace k = kernels::cuda;
        cudaStream_t const stream = stream_.get();
        if (layers < 1 || layers > Cfg.layers)
            throw RequestError("a device forward over " + std::to_string(layers) +
                               " layers; the model has 1.." + std::to_string(Cfg.layers));
        if (!activations_) throw Error("DeviceForwardPass: reserve() before the first step");
        if (plan.packed.size() > plan_buffer_.size())
            throw Error("DeviceForwardPass: step plan larger than its buffer (a sizing bug)");
        if (!logits.empty() &&
            logits.size() < static_cast<std::size_t>(plan.logit_rows) * Cfg.vocab)
            throw RequestError(
                "logits hold " + std::to_string(logits.size()) + " floats, the step writes " +
                std::to_string(static_cast<std::size_t>(plan.logit_rows) * Cfg.vocab));
        status_.reset(stream);
        k::check(cudaMemcpyAsync(plan_buffer_.data(), plan.packed.data(),
                                 plan.packed.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                 stream),
                 "cudaMemcpyAsync step plan to device");
        if (profile_ != nullptr) profile_->begin(stream);
        DeviceStep const step{.plan = plan,
                              .ints = plan_buffer_.data(),
                              .kv_pool = kv_pool,
                              .status = status_.get(),
                              .stream = stream,
                              .profile = profile_,
                              .prefill_gemm = prefill_gemm_};
        auto const queue_layers = [&] {
            Ops ops(*activations_, step);
            ops.embed(weights_);
            model::run_decoder_stack<Cfg, Cfg>(ops, weights_.layers, 0, layers);
            ops.logits(weights_);
        };
        if (graphs_ && plan.decode_only && profile_ == nullptr) {
            k::check(cudaGraphLaunch(graph_for(plan, layers, queue_layers), stream),
                     "cudaGraphLaunch decode step");
        } else {
            queue_layers();
        }
        if (!logits.empty())
            k::check(cudaMemcpyAsync(
                         logits.data(), activations_->logits.data(),
                         static_cast<std::size_t>(plan.logit_rows) * Cfg.vocab * sizeof(float),
                         cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync logits to host");
        after_kernels();
        k::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after step");
        status_.throw_if_failed(stream);
    }

    ~DeviceForwardPass() { release_graphs(); }

  private:
    // The graph of this launch shape, captured from `queue_layers` the first time.
    template <class QueueLayers>
    cudaGraphExec_t graph_for(DeviceStepPlan const& plan, int layers,
                              QueueLayers const& queue_layers) {
        GraphKey const key{plan.chunks,       plan.rows,        plan.logit_rows,
                           plan.table_stride, plan.max_context, layers};
        for (auto const& [known, exec] : graphs_by_shape_)
            if (known == key) return exec;
        cudaStream_t const stream = stream_.get();
        namespace k = kernels::cuda;
        k::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                 "cudaStreamBeginCapture decode step");
        cudaGraph_t graph = nullptr;
        try {
            queue_layers();
        } catch (...) {
            (void)cudaStreamEndCapture(stream, &graph);  // ends the capture; the graph is dropped
            if (graph != nullptr) (void)cudaGraphDestroy(graph);
            throw;
        }
        k::check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture decode step");
        cudaGraphExec_t exec = nullptr;
        cudaError_t const instantiated = cudaGraphInstantiate(&exec, graph, 0);
        (void)cudaGraphDestroy(graph);
        k::check(instantiated, "cudaGraphInstantiate decode step");
        graphs_by_shape_.emplace_back(key, exec);
        return exec;
    }
    void release_graphs() noexcept {
        for (auto const& [key, exec] : graphs_by_shape_) (void)cudaGraphExecDestroy(exec);
        graphs_by_shape_.clear();
    }

    DeviceStepSizes sizes_;
    DeviceWeightLayout<Cfg> layout_;
    CudaStream stream_;
    kernels::cuda::DeviceBuffer<std::byte> arena_;  // every weight, layout_'s offsets
    model::ModelWeights<Cfg> weights_;              // views into arena_
    std::unique_ptr<DeviceActivations<Cfg, KeyCodec>> activations_;
    kernels::cuda::DeviceBuffer<std::int32_t> plan_buffer_;  // DeviceStepPlan::packed
    kernels::cuda::DeviceStatus status_;  // what the attention kernels refused, per step
    StepProfile* profile_ = nullptr;
    PrefillGemm* prefill_gemm_ = nullptr;
    // Captured decode steps by launch shape: chunks, rows, logit rows, table stride, context
    // bound, layers.
    using GraphKey = std::array<int, 6>;
    bool graphs_ = false;
    std::vector<std::pair<GraphKey, cudaGraphExec_t>> graphs_by_shape_;
};

}  // namespace tinfer::cuda
