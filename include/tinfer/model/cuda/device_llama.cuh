#pragma once
// DeviceLlama<Cfg>: the Llama forward pass on a CUDA device, composed from the device kernels
// (kernels/cuda/), with the weights and a paged KV cache in device memory.
//
//   host                                   device (one stream)
//   ----                                   -------------------
//   chunks --plan_step--> DeviceStepPlan --1 H2D--> [tokens|positions|rows->chunk|starts|contexts|
//   (DeviceBlockTables:                        logit rows|block tables]
//    slot -> physical blocks)                        |
//                                          embedding -> hidden [rows][hidden]
//                                          rope table  [rows][head_dim]
//                                          x layers:  rmsnorm -> q,k,v linear -> rope(q,k)
//                                                     -> kv_append (paged pool)
//                                                     -> attention: decode (split-KV) when every
//                                                        chunk is one token, else prefill (flash)
//                                                     -> output linear, hidden += ...
//                                                     -> rmsnorm -> gate, up linear -> swiglu
//                                                     -> down linear, hidden += ...
//                                          gather logit rows -> rmsnorm -> LM head -> logits
//                                          (greedy: the device sampler at temperature 0)
//   logits / tokens <--------- D2H ---------
//
// The weights are uploaded once, quantized blocks as the GGUF file stores them
// (model/cuda/weight_layout.hpp); every matrix product dequantizes on the fly with the host's
// arithmetic. The KV pool has kv::PagedKvCache's byte layout, so its blocks could be swapped
// with a host cache as plain copies.
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
#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/attention.cuh>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/embedding.cuh>
#include <tinfer/kernels/cuda/kernel_status.cuh>
#include <tinfer/kernels/cuda/kv_cache.cuh>
#include <tinfer/kernels/cuda/linear.cuh>
#include <tinfer/kernels/cuda/rmsnorm.cuh>
#include <tinfer/kernels/cuda/rope.cuh>
#include <tinfer/kernels/cuda/rows.cuh>
#include <tinfer/kernels/cuda/sampling.cuh>
#include <tinfer/kernels/cuda/swiglu.cuh>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/cuda/step_plan.hpp>
// model/weights.hpp binds the embedding with a lambda whose template parameter appears only in
// its body (`[]<DType T>() {...}`, called explicitly): valid C++20 that nvcc's front end flags as
// warning 445 ("constant T is not used in declaring the parameter types"), an error under
// --Werror all-warnings. Silenced for these headers only.
#if defined(__CUDACC__)
#pragma nv_diag_suppress 445
#endif
#include <tinfer/model/cuda/weight_layout.hpp>
#include <tinfer/model/weights.hpp>
#if defined(__CUDACC__)
#pragma nv_diag_default 445
#endif

namespace tinfer::cuda {

// Calls body.template operator()<W>() for the device weight type equal to `type` (the
// embedding and LM head, whose encoding the file chooses).
template <class Body>
void dispatch_device_weight_type(DType type, Body&& body) {
    dispatch<DType::q4_0, DType::q4_1, DType::q8_0, DType::f16, DType::bf16, DType::f32>(
        type, std::forward<Body>(body), [](DType a, DType b) { return a == b; },
        "device weight type");
}

// Sizes of what DeviceLlama allocates up front; a step beyond them is a RequestError.
struct DeviceLlamaOptions {
    int max_seqs = 64;           // sequence slots, and chunks per step
    int max_step_tokens = 2048;  // tokens per step, all chunks together
    int max_logit_rows = 0;      // rows of logits per step; 0: max_seqs
    int max_context = 0;         // positions per sequence; 0: the model's max_context
    std::size_t kv_budget_bytes = std::size_t{1} << 30;  // the paged KV pool
};

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

// Codec encodes the cache's K vectors, ValueCodec its V vectors (the same unless chosen apart,
// as kv::PagedKvCache allows). They are the cache's choice, not the shape's: fp32 as on the host
// unless given (a run-time name picks a pair with kv::with_kv_codecs).
template <ModelConfig Cfg, int BlockSize = 16, class Codec = kv::Fp32Codec,
          class ValueCodec = Codec>
requires ModelShape<Cfg> && kernels::cuda::DeviceWeightType<Cfg.weights> &&
    kernels::cuda::DeviceKvCodec<Codec, Cfg.head_dim> &&
    kernels::cuda::DeviceKvCodec<ValueCodec, Cfg.head_dim>
class DeviceLlama {
    static_assert(BlockSize > 0, "DeviceLlama: BlockSize must be positive");
    static_assert(Cfg.arch == Architecture{} && Cfg.sliding_window == 0,
                  "cuda::DeviceLlama runs Llama's parts only (pre-norm, SwiGLU, adjacent RoPE, "
                  "full attention, tied head): Cfg.arch must be Architecture{} and "
                  "Cfg.sliding_window 0 until the device model is rebuilt on "
                  "model/decoder_layer.hpp (SmolLM2's shape)");

  public:
    static constexpr ModelConfig config = Cfg;
    static constexpr int block_size = BlockSize;
    // The pool's byte layout: kv::PagedKvCache's, for these constants.
    using KvLayout = kv::PagedKvCache<Cfg, BlockSize, Codec, ValueCodec>;

    // Uploads `weights` (host views, e.g. ModelWeights<Cfg>::bind(file)) and allocates every
    // buffer a step can need; the host weights may go away afterwards.
    explicit DeviceLlama(model::ModelWeights<Cfg> const& weights, DeviceLlamaOptions options = {})
        : options_(resolved(options)),
          layout_(DeviceWeightLayout<Cfg>::plan(weights)),
          tables_(options_.max_seqs, pool_blocks(options_), BlockSize, options_.max_context),
          arena_(layout_.bytes),
          kv_pool_(static_cast<std::size_t>(tables_.total_blocks()) * KvLayout::bytes_per_block),
          plan_buffer_(plan_capacity(options_)),
          hidden_(floats(Cfg.hidden)),
          normed_(floats(Cfg.hidden)),
          projected_(floats(Cfg.hidden)),
          q_(floats(Cfg.q_width())),
          k_(floats(Cfg.kv_width())),
          v_(floats(Cfg.kv_width())),
          attended_(floats(Cfg.q_width())),
          gate_(floats(Cfg.ffn)),
          up_(floats(Cfg.ffn)),
          rope_(floats(Cfg.head_dim)),
          logits_(static_cast<std::size_t>(options_.max_logit_rows) * Cfg.vocab),
          decode_workspace_(kernels::cuda::decode_attention_workspace_floats<Codec, Cfg.head_dim,
                                                                             Cfg.group_size()>(
              options_.max_seqs, Cfg.kv_heads, options_.max_context)),
          sampler_(options_.max_seqs, Cfg.vocab, stream_.get()),
          greedy_params_(std::vector<kernels::cuda::DeviceSamplingParams>(
              static_cast<std::size_t>(options_.max_seqs),
              kernels::cuda::DeviceSamplingParams{.temperature = 0})),
          greedy_tokens_(static_cast<std::size_t>(options_.max_seqs)) {
        for (WeightSegment const& s : layout_.segments)
            kernels::cuda::check(
                cudaMemcpy(arena_.data() + s.offset, s.host, s.bytes, cudaMemcpyHostToDevice),
                "cudaMemcpy weights to device");
        kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after upload");
    }

    DeviceLlama(DeviceLlama const&) = delete;
    DeviceLlama& operator=(DeviceLlama const&) = delete;

    DeviceLlamaOptions const& options() const { return options_; }
    StepLimits limits() const {
        return {.max_chunks = options_.max_seqs,
                .max_rows = options_.max_step_tokens,
                .max_logit_rows = options_.max_logit_rows,
                .vocab = Cfg.vocab};
    }
    DeviceBlockTables const& block_tables() const { return tables_; }
    std::size_t weight_bytes() const { return arena_.bytes(); }
    std::size_t kv_bytes() const { return kv_pool_.bytes(); }
    cudaStream_t stream() const { return stream_.get(); }

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
            run_and_collect(plan, logits, greedy);
        } catch (...) {
            abandon_step(plan, tables_);
            throw;
        }
        commit_step(plan, tables_);
        if (!greedy.empty())
            kernels::check_sampled_tokens(greedy.first(static_cast<std::size_t>(plan.chunks)));
    }

  private:
    // The step's kernels and copies, then the wait for them; throws for any failure, a launch's,
    // the stream's, or a refusal the kernels reported in status_.
    void run_and_collect(DeviceStepPlan const& plan, std::span<float> logits,
                         std::span<std::int32_t> greedy) {
        cudaStream_t const stream = stream_.get();
        status_.reset(stream);
        run(plan);
        if (!logits.empty())
            kernels::cuda::check(cudaMemcpyAsync(logits.data(), logits_.data(),
                                                 static_cast<std::size_t>(plan.logit_rows) *
                                                     Cfg.vocab * sizeof(float),
                                                 cudaMemcpyDeviceToHost, stream),
                                 "cudaMemcpyAsync logits to host");
        if (!greedy.empty()) {
            sampler_.sample(logits_.data(), greedy_params_.data(), plan.chunks,
                            greedy_tokens_.data(), stream);
            kernels::cuda::check(
                cudaMemcpyAsync(greedy.data(), greedy_tokens_.data(),
                                static_cast<std::size_t>(plan.chunks) * sizeof(std::int32_t),
                                cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync greedy tokens to host");
        }
        kernels::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after step");
        status_.throw_if_failed(stream);
    }

    static DeviceLlamaOptions resolved(DeviceLlamaOptions o) {
        if (o.max_logit_rows == 0) o.max_logit_rows = o.max_seqs;
        if (o.max_context == 0) o.max_context = Cfg.max_context;
        if (o.max_seqs <= 0 || o.max_step_tokens <= 0 || o.max_logit_rows <= 0 ||
            o.max_context <= 0 || o.max_context > Cfg.max_context)
            throw Error("DeviceLlamaOptions: sizes must be positive, max_context at most " +
                        std::to_string(Cfg.max_context));
        if (o.max_logit_rows > o.max_step_tokens) o.max_logit_rows = o.max_step_tokens;
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
    // Ints of the largest DeviceStepPlan::packed: every array at its most, plus alignment padding.
    static std::size_t plan_capacity(DeviceLlamaOptions const& o) {
        std::size_t const rows = static_cast<std::size_t>(o.max_step_tokens);
        std::size_t const chunks = static_cast<std::size_t>(o.max_seqs);
        std::size_t const stride =
            static_cast<std::size_t>(DeviceBlockTables::blocks_for(o.max_context, BlockSize));
        constexpr std::size_t arrays = 7, padding = 4;
        return 3 * rows + (chunks + 1) + chunks + static_cast<std::size_t>(o.max_logit_rows) +
               chunks * stride + arrays * padding;
    }
    std::size_t floats(int width) const {
        return static_cast<std::size_t>(options_.max_step_tokens) * static_cast<std::size_t>(width);
    }
    float const* norm(std::size_t offset) const {
        return reinterpret_cast<float const*>(arena_.data() + offset);
    }
    kernels::WeightMatrix matrix(ArenaMatrix const& m) const { return m.at(arena_.data()); }

    // The step's kernels, queued on the stream; logits_ holds plan.logit_rows rows after it.
    void run(DeviceStepPlan const& plan) {
        namespace k = kernels::cuda;
        cudaStream_t const stream = stream_.get();
        if (plan.packed.size() > plan_buffer_.size())
            throw Error("DeviceLlama: step plan larger than its buffer (a sizing bug)");
        k::check(cudaMemcpyAsync(plan_buffer_.data(), plan.packed.data(),
                                 plan.packed.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                 stream),
                 "cudaMemcpyAsync step plan to device");
        std::int32_t const* const ints = plan_buffer_.data();
        int const rows = plan.rows;
        std::size_t const row_count = static_cast<std::size_t>(rows);

        dispatch_device_weight_type(layout_.token_embedding.type, [&]<DType W>() {
            k::embedding<W, Cfg.hidden>(matrix(layout_.token_embedding), ints + plan.tokens, rows,
                                        hidden_.data(), stream);
        });
        k::rope_table<Cfg.head_dim>(Cfg.rope_base, ints + plan.positions, rows, rope_.data(),
                                    stream);

        k::DecodeAttentionArguments const decode{
            .queries = q_.data(),
            .out = attended_.data(),
            .context_lengths = ints + plan.context_lengths,
            .seqs = plan.chunks,
            .kv_heads = Cfg.kv_heads,
            .max_context_length = plan.max_context,
            .workspace = decode_workspace_.data(),
            .status = status_.get(),
        };
        k::PrefillAttentionArguments const prefill{
            .queries = q_.data(),
            .out = attended_.data(),
            .query_starts = ints + plan.query_starts,
            .context_lengths = ints + plan.context_lengths,
            .seqs = plan.chunks,
            .kv_heads = Cfg.kv_heads,
            .max_queries = plan.max_queries,
            .status = status_.get(),
        };

        constexpr DType W = Cfg.weights;
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            auto const& w = layout_.layers[static_cast<std::size_t>(layer)];
            k::rmsnorm<Cfg>(hidden_.data(), norm(w.attention_norm), rows, normed_.data(), stream);
            k::linear<W, Cfg.hidden>(matrix(w.q), normed_.data(), rows, q_.data(), stream);
            k::linear<W, Cfg.hidden>(matrix(w.k), normed_.data(), rows, k_.data(), stream);
            k::linear<W, Cfg.hidden>(matrix(w.v), normed_.data(), rows, v_.data(), stream);
            k::apply_rope<Cfg>(q_.data(), rows, Cfg.heads, rope_.data(), stream);
            k::apply_rope<Cfg>(k_.data(), rows, Cfg.kv_heads, rope_.data(), stream);

            k::PagedKvLayer const kv_layer = k::paged_kv_layer<KvLayout>(
                kv_pool_.data(), layer, ints + plan.block_tables, plan.table_stride);
            k::kv_append<Codec, Cfg.head_dim, ValueCodec>(kv_layer, Cfg.kv_heads, k_.data(),
                                                          v_.data(), ints + plan.row_chunks,
                                                          ints + plan.positions, rows, stream);
            if (plan.decode_only)
                k::decode_attention<Cfg, Codec, ValueCodec>(kv_layer, decode, stream);
            else
                k::prefill_attention<Cfg, Codec, ValueCodec>(kv_layer, prefill, stream);
            k::linear<W, Cfg.q_width()>(matrix(w.output), attended_.data(), rows, projected_.data(),
                                        stream);
            k::add_in_place(hidden_.data(), projected_.data(), row_count * Cfg.hidden, stream);

            k::rmsnorm<Cfg>(hidden_.data(), norm(w.ffn_norm), rows, normed_.data(), stream);
            k::linear<W, Cfg.hidden>(matrix(w.gate), normed_.data(), rows, gate_.data(), stream);
            k::linear<W, Cfg.hidden>(matrix(w.up), normed_.data(), rows, up_.data(), stream);
            k::swiglu(gate_.data(), up_.data(), row_count * Cfg.ffn, gate_.data(), stream);
            k::linear<W, Cfg.ffn>(matrix(w.down), gate_.data(), rows, projected_.data(), stream);
            k::add_in_place(hidden_.data(), projected_.data(), row_count * Cfg.hidden, stream);
        }

        // Only the rows that give logits go through the final norm and the LM head.
        k::gather_rows<Cfg.hidden>(hidden_.data(), ints + plan.logit_row_ids, plan.logit_rows, rows,
                                   projected_.data(), stream);
        k::rmsnorm<Cfg>(projected_.data(), norm(layout_.output_norm), plan.logit_rows,
                        normed_.data(), stream);
        dispatch_device_weight_type(layout_.output.type, [&]<DType Head>() {
            k::linear<Head, Cfg.hidden>(matrix(layout_.output), normed_.data(), plan.logit_rows,
                                        logits_.data(), stream);
        });
    }

    DeviceLlamaOptions options_;
    DeviceWeightLayout<Cfg> layout_;
    DeviceBlockTables tables_;
    CudaStream stream_;
    kernels::cuda::DeviceBuffer<std::byte> arena_;           // every weight, layout_'s offsets
    kernels::cuda::DeviceBuffer<std::byte> kv_pool_;         // [blocks][KvLayout::bytes_per_block]
    kernels::cuda::DeviceBuffer<std::int32_t> plan_buffer_;  // DeviceStepPlan::packed
    // Activations, [max_step_tokens][width] each.
    kernels::cuda::DeviceBuffer<float> hidden_, normed_, projected_, q_, k_, v_, attended_, gate_,
        up_, rope_;
    kernels::cuda::DeviceBuffer<float> logits_;  // [max_logit_rows][vocab]
    kernels::cuda::DeviceBuffer<float> decode_workspace_;
    kernels::cuda::DeviceSamplingWorkspace sampler_;
    kernels::cuda::DeviceBuffer<kernels::cuda::DeviceSamplingParams> greedy_params_;
    kernels::cuda::DeviceBuffer<std::int32_t> greedy_tokens_;
    kernels::cuda::DeviceStatus status_;  // what the attention kernels refused, per step
};

}  // namespace tinfer::cuda
