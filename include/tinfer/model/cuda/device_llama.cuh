#pragma once
// DeviceLlama<Cfg>: the model on a CUDA device with a paged KV cache of its own in device
// memory: DeviceBlockTables (model/cuda/step_plan.hpp) map each sequence slot to its blocks, and
// each step runs DeviceForwardPass (device_forward.cuh): the one decoder layer of
// model/decoder_layer.hpp over the device's ops. This is the self-contained form the kernel
// tests and benchmarks drive with explicit chunks; the serving Engine's CUDA backend is
// cuda::DeviceModel (device_model.cuh), whose blocks the host's kv::PagedKvCache tables own.
//
// The KV pool has kv::PagedKvCache's byte layout, so its blocks could be swapped with a host
// cache as plain copies.
//
// Batch invariance: each kernel computes a token row with an order fixed by the row's own data
// and the kernel chosen (the linear kernels pick the weight-streaming path for steps of at most
// 8 tokens and the tiled GEMM above that; attention picks decode for all-single-token steps), so
// a sequence's results equal running it alone whenever both runs take the same paths.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/sampling.cuh>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/cuda/device_forward.cuh>
#include <tinfer/model/cuda/step_plan.hpp>

namespace tinfer::cuda {

// Sizes of what DeviceLlama allocates up front; a step beyond them is a RequestError.
struct DeviceLlamaOptions {
    int max_seqs = 64;           // sequence slots, and chunks per step
    int max_step_tokens = 2048;  // tokens per step, all chunks together
    int max_logit_rows = 0;      // rows of logits per step; 0: max_seqs
    int max_context = 0;         // positions per sequence; 0: the model's max_context
    std::size_t kv_budget_bytes = std::size_t{1} << 30;  // the paged KV pool
};

// Codec encodes the cache's K vectors, ValueCodec its V vectors (the same unless chosen apart,
// as kv::PagedKvCache allows). They are the cache's choice, not the shape's: fp32 as on the host
// unless given (a run-time name picks a pair with kv::with_kv_codecs).
template <ModelConfig Cfg, int BlockSize = 16, class Codec = kv::Fp32Codec,
          class ValueCodec = Codec>
requires ModelShape<Cfg> && kernels::cuda::DeviceKvCodec<Codec, Cfg.head_dim> &&
    kernels::cuda::DeviceKvCodec<ValueCodec, Cfg.head_dim>
class DeviceLlama {
    static_assert(BlockSize > 0, "DeviceLlama: BlockSize must be positive");

  public:
    static constexpr ModelConfig config = Cfg;
    static constexpr int block_size = BlockSize;
    // The pool's byte layout: kv::PagedKvCache's, for these constants.
    using KvLayout = kv::PagedKvCache<Cfg, BlockSize, Codec, ValueCodec>;

    // Uploads `weights` (host views, e.g. ModelWeights<Cfg>::bind(file)) and allocates every
    // buffer a step can need; the host weights may go away afterwards.
    explicit DeviceLlama(model::ModelWeights<Cfg> const& weights, DeviceLlamaOptions options = {})
        : options_(resolved(options)),
          pass_(weights, {.max_chunks = options_.max_seqs,
                          .max_rows = options_.max_step_tokens,
                          .max_logit_rows = options_.max_logit_rows,
                          .max_context = options_.max_context}),
          tables_(options_.max_seqs, pool_blocks(options_), BlockSize, options_.max_context),
          kv_pool_(static_cast<std::size_t>(tables_.total_blocks()) * KvLayout::bytes_per_block),
          greedy_tokens_(static_cast<std::size_t>(options_.max_seqs)) {}

    DeviceLlama(DeviceLlama const&) = delete;
    DeviceLlama& operator=(DeviceLlama const&) = delete;

    DeviceLlamaOptions const& options() const { return options_; }
    StepLimits limits() const { return pass_.limits(); }
    DeviceBlockTables const& block_tables() const { return tables_; }
    std::size_t weight_bytes() const { return pass_.weight_bytes(); }
    std::size_t streamed_weight_bytes() const { return pass_.streamed_weight_bytes(); }
    void set_profile(StepProfile* profile) { pass_.set_profile(profile); }
    // Prefill products through `gemm` (DeviceForwardPass::set_prefill_gemm); nullptr: float32.
    void set_prefill_gemm(PrefillGemm* gemm) { pass_.set_prefill_gemm(gemm); }
    // Decode steps replayed as CUDA graphs (DeviceForwardPass::use_cuda_graphs); off by default.
    void use_cuda_graphs(bool on) { pass_.use_cuda_graphs(on); }
    std::size_t kv_bytes() const { return kv_pool_.bytes(); }
    cudaStream_t stream() const { return pass_.stream(); }

    // Rows of logits a step over these chunks produces.
    static std::size_t logit_rows(std::span<DeviceChunk const> chunks) {
        std::size_t rows = 0;
        for (DeviceChunk const& c : chunks) rows += c.all_logits ? c.tokens.size() : 1;
        return rows;
    }

    // Empties a sequence slot (its blocks go back to the pool).
    void release(int slot) { tables_.release(slot); }

    // Runs one step over the chunks (model/cuda/step_plan.hpp says what a chunk may be), writing
    // their K and V into the device cache. When not empty, `logits` receives
    // [logit_rows(chunks)][vocab] floats in chunk order, and `greedy` one token per chunk (the
    // lowest id of the largest logit; every chunk must then ask for its last row only). Returns
    // after the results are on the host. The chunks' positions count as cached only once the
    // step has succeeded: a step that throws leaves each slot with what it had before the
    // chunk's first position. A greedy row of NaN / +inf logits, or of all -inf, throws what the
    // host sampler throws for it.
    void forward(std::span<DeviceChunk const> chunks, std::span<float> logits,
                 std::span<std::int32_t> greedy = {}) {
        std::size_t const out_rows = logit_rows(chunks);
        if (!logits.empty() && logits.size() < out_rows * Cfg.vocab)
            throw RequestError("logits hold " + std::to_string(logits.size()) +
                               " floats, the step writes " + std::to_string(out_rows * Cfg.vocab));
        if (!greedy.empty()) {
            if (out_rows != chunks.size())
                throw RequestError("greedy tokens need one logit row per chunk (no all_logits)");
            if (greedy.size() < chunks.size())
                throw RequestError("greedy holds " + std::to_string(greedy.size()) +
                                   " tokens for " + std::to_string(chunks.size()) + " chunks");
        }
        DeviceStepPlan const plan = plan_step(chunks, tables_, limits());
        try {
            pass_.run(plan, kv_pool_.data(), logits, Cfg.layers, [&] {
                if (greedy.empty()) return;
                cudaStream_t const stream = pass_.stream();
                kernels::cuda::sample_greedy(pass_.device_logits(), plan.chunks, Cfg.vocab,
                                             greedy_tokens_.data(), stream);
                kernels::cuda::check(
                    cudaMemcpyAsync(greedy.data(), greedy_tokens_.data(),
                                    static_cast<std::size_t>(plan.chunks) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync greedy tokens to host");
            });
        } catch (...) {
            abandon_step(plan, tables_);
            throw;
        }
        commit_step(plan, tables_);
        if (!greedy.empty())
            kernels::check_sampled_tokens(greedy.first(static_cast<std::size_t>(plan.chunks)));
    }

  private:
    // The options' defaults filled in and checked as the forward pass's sizes are.
    static DeviceLlamaOptions resolved(DeviceLlamaOptions o) {
        DeviceStepSizes const sizes = resolved_step_sizes<Cfg>({.max_chunks = o.max_seqs,
                                                                .max_rows = o.max_step_tokens,
                                                                .max_logit_rows = o.max_logit_rows,
                                                                .max_context = o.max_context});
        o.max_logit_rows = sizes.max_logit_rows;
        o.max_context = sizes.max_context;
        return o;
    }
    static int pool_blocks(DeviceLlamaOptions const& o) {
        std::size_t const blocks = o.kv_budget_bytes / KvLayout::bytes_per_block;
        if (blocks == 0)
            throw Error("DeviceLlamaOptions: a KV budget of " + std::to_string(o.kv_budget_bytes) +
                        " bytes holds no block of " + std::to_string(KvLayout::bytes_per_block));
        constexpr std::size_t max_blocks = 1u << 30;
        return static_cast<int>(blocks < max_blocks ? blocks : max_blocks);
    }

    DeviceLlamaOptions options_;
    DeviceForwardPass<Cfg, KvLayout> pass_;
    DeviceBlockTables tables_;
    kernels::cuda::DeviceBuffer<std::byte> kv_pool_;  // [blocks][KvLayout::bytes_per_block]
    kernels::cuda::DeviceBuffer<std::int32_t> greedy_tokens_;
};

}  // namespace tinfer::cuda
