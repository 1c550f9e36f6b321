#pragma once
// CudaOps: the GPU's set of ops the decoder layer (model/decoder_layer.hpp) is written over, the
// device twin of model/host_ops.hpp behind the same signatures. The host picks the ops with the
// backend; run_decoder_stack and run_decoder_layer are the same templates on both, so a part an
// architecture composes (biases, QK-norm, sandwich norms, GeGLU, soft-capping, the embedding
// scale) is one `if constexpr` on the layer plan in each backend's op, and what the device does
// not implement yet is a static_assert naming the part, never a silent skip.
//
// Every op queues kernels on the step's stream and returns; an op cannot fail on the device
// side without the host knowing later: a launch error throws at once (check_launch), a kernel's
// refusal (a context outside the plan) is written to the step's status word and thrown after
// the step by its owner (model/cuda/device_forward.cuh). So failed() is always false here.
//
// Weight types are per matrix, as on the host: each product dispatches on the matrix's own type
// to the kernel instantiated for it (dispatch_device_weight_type); the input width is static.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/dispatch.hpp>
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
#include <tinfer/kernels/cuda/swiglu.cuh>
#include <tinfer/model/cuda/step_plan.hpp>
#include <tinfer/model/cuda/step_profile.cuh>
// model/weights.hpp binds the embedding with a lambda whose template parameter appears only in
// its body (`[]<DType T>() {...}`, called explicitly): valid C++20 that nvcc's front end flags as
// warning 445 ("constant T is not used in declaring the parameter types"), an error under
// --Werror all-warnings. Silenced for these headers only.
#if defined(__CUDACC__)
#pragma nv_diag_suppress 445
#endif
#include <tinfer/model/cuda/weight_layout.hpp>
#include <tinfer/model/decoder_layer.hpp>
#include <tinfer/model/weights.hpp>
#if defined(__CUDACC__)
#pragma nv_diag_default 445
#endif

namespace tinfer::cuda {

// Calls body.template operator()<W>() for the device weight type equal to `type`.
template <class Body>
void dispatch_device_weight_type(DType type, Body&& body) {
    dispatch<DType::q4_0, DType::q4_1, DType::q8_0, DType::f16, DType::bf16, DType::f32>(
        type, std::forward<Body>(body), [](DType a, DType b) { return a == b; },
        "device weight type");
}

// y [rows][w.rows] = x [rows][In] . W^T with the kernel of W's own type.
template <int In>
void linear_any(kernels::WeightMatrix const& w, float const* x, int rows, float* y,
                cudaStream_t stream) {
    dispatch_device_weight_type(
        w.type, [&]<DType W>() { kernels::cuda::linear<W, In>(w, x, rows, y, stream); });
}

// Another way to run a prefill step's matrix products (more rows than the weight-streaming
// kernel takes), e.g. kernels::cuda::CublasBf16Gemm on tensor cores: y [rows][w.rows] =
// x [rows][w.cols] . W^T on `stream`. A virtual call per product (a few hundred per step), so
// the forward pass depends on no library until a program hands it one.
class PrefillGemm {
  public:
    virtual ~PrefillGemm() = default;
    virtual void run(kernels::WeightMatrix const& w, float const* x, int rows, float* y,
                     cudaStream_t stream) = 0;
};

// Sizes of a device step, and so of every buffer the forward pass allocates up front.
struct DeviceStepSizes {
    int max_chunks = 64;     // sequences per step
    int max_rows = 2048;     // tokens per step, all chunks together
    int max_logit_rows = 0;  // rows of logits per step
    int max_context = 0;     // positions per sequence
};

// The step's activations, [max_rows][width] each (logits [max_logit_rows][vocab]), and the
// decode attention's split-KV workspace, allocated once.
template <ModelConfig Cfg, class KeyCodec>
struct DeviceActivations {
    explicit DeviceActivations(DeviceStepSizes const& sizes)
        : hidden(rows(sizes, Cfg.hidden)),
          normed(rows(sizes, Cfg.hidden)),
          projected(rows(sizes, Cfg.hidden)),
          q(rows(sizes, Cfg.q_width())),
          k(rows(sizes, Cfg.kv_width())),
          v(rows(sizes, Cfg.kv_width())),
          attended(rows(sizes, Cfg.q_width())),
          gate(rows(sizes, Cfg.ffn)),
          up(rows(sizes, Cfg.ffn)),
          rope(rows(sizes, Cfg.head_dim)),
          logits(static_cast<std::size_t>(sizes.max_logit_rows) * Cfg.vocab),
          decode_workspace(kernels::cuda::decode_attention_workspace_floats<KeyCodec, Cfg.head_dim,
                                                                            Cfg.group_size()>(
              sizes.max_chunks, Cfg.kv_heads, sizes.max_context)) {}

    kernels::cuda::DeviceBuffer<float> hidden, normed, projected, q, k, v, attended, gate, up, rope;
    kernels::cuda::DeviceBuffer<float> logits;
    kernels::cuda::DeviceBuffer<float> decode_workspace;

  private:
    static std::size_t rows(DeviceStepSizes const& sizes, int width) {
        return static_cast<std::size_t>(sizes.max_rows) * static_cast<std::size_t>(width);
    }
};

// What a step's kernels read besides the activations: the plan and its integer arrays already
// on the device, the KV pool (KvLayout's byte layout) and where kernels report refusals.
struct DeviceStep {
    DeviceStepPlan const& plan;
    std::int32_t const* ints = nullptr;  // plan.packed on the device
    std::byte* kv_pool = nullptr;
    kernels::cuda::KernelStatus* status = nullptr;
    cudaStream_t stream = nullptr;
    StepProfile* profile = nullptr;       // when set, an event after each op (step_profile.cuh)
    PrefillGemm* prefill_gemm = nullptr;  // when set, products of more than 8 rows
};

// KvLayout: a kv::PagedKvCache type whose byte layout the pool has (its codecs are the K and V
// encodings the kernels append and read).
template <ModelConfig Cfg, class KvLayout>
class CudaOps {
    using KeyCodec = typename KvLayout::KeyCodec;
    using ValueCodec = typename KvLayout::ValueCodec;
    static_assert(Cfg.query_scale_dim() == Cfg.head_dim,
                  "CudaOps: the device attention scales scores by 1/sqrt(head_dim); "
                  "Cfg.arch.query_pre_attn_scalar other than head_dim is not implemented on the "
                  "CUDA backend yet");
    static constexpr float norm_eps = static_cast<float>(Cfg.norm_eps);

  public:
    CudaOps(DeviceActivations<Cfg, KeyCodec>& activations, DeviceStep const& step)
        : a_(activations), step_(step), rows_(step.plan.rows) {}

    static constexpr bool failed() { return false; }

    // The step's token embeddings into hidden (scaled where the architecture scales them) and
    // the RoPE table of its positions.
    void embed(model::ModelWeights<Cfg> const& weights) {
        dispatch_device_weight_type(weights.token_embedding.type, [&]<DType W>() {
            kernels::cuda::embedding<W, Cfg.hidden>(weights.token_embedding,
                                                    step_.ints + step_.plan.tokens, rows_,
                                                    a_.hidden.data(), step_.stream);
        });
        if constexpr (Cfg.arch.scale_embedding) {
            // The host's float sqrt(hidden) (model/llama.hpp).
            constexpr float scale = static_cast<float>(kernels::constexpr_sqrt(Cfg.hidden));
            kernels::cuda::scale_in_place(a_.hidden.data(), scale, elements(Cfg.hidden),
                                          step_.stream);
        }
        kernels::cuda::rope_table<Cfg.head_dim>(rope_base(), step_.ints + step_.plan.positions,
                                                rows_, a_.rope.data(), step_.stream);
        mark("embedding, rope table");
    }

    void normalize(std::span<float const> weight) {
        kernels::cuda::rmsnorm<Cfg.hidden>(a_.hidden.data(), weight.data(), norm_eps, rows_,
                                           a_.normed.data(), step_.stream);
        mark("rmsnorm");
    }

    void project_qkv(model::LayerWeights const& w) {
        linear<Cfg.hidden>(w.q, a_.normed.data(), rows_, a_.q.data(), step_.stream);
        linear<Cfg.hidden>(w.k, a_.normed.data(), rows_, a_.k.data(), step_.stream);
        linear<Cfg.hidden>(w.v, a_.normed.data(), rows_, a_.v.data(), step_.stream);
        mark("q, k, v projections");
    }

    template <class Plan>
    void position_queries_and_keys(model::LayerWeights const& w) {
        static_assert(Plan::rope_base == rope_base(),
                      "CudaOps: one RoPE table per step on the device; a layer kind with a RoPE "
                      "base of its own (Cfg.arch.rope_base_sliding) is not implemented on the "
                      "CUDA backend yet");
        cudaStream_t const stream = step_.stream;
        if constexpr (Plan::qkv_bias) {
            kernels::cuda::add_row_bias(a_.q.data(), w.q_bias.data(), rows_, Cfg.q_width(), stream);
            kernels::cuda::add_row_bias(a_.k.data(), w.k_bias.data(), rows_, Cfg.kv_width(),
                                        stream);
            kernels::cuda::add_row_bias(a_.v.data(), w.v_bias.data(), rows_, Cfg.kv_width(),
                                        stream);
        }
        if constexpr (Plan::qk_norm) {
            // Each head of each row is a row of head_dim floats.
            kernels::cuda::rmsnorm<Cfg.head_dim>(a_.q.data(), w.q_norm.data(), norm_eps,
                                                 rows_ * Cfg.heads, a_.q.data(), stream);
            kernels::cuda::rmsnorm<Cfg.head_dim>(a_.k.data(), w.k_norm.data(), norm_eps,
                                                 rows_ * Cfg.kv_heads, a_.k.data(), stream);
        }
        kernels::cuda::apply_rope<Cfg>(a_.q.data(), rows_, Cfg.heads, a_.rope.data(), stream);
        kernels::cuda::apply_rope<Cfg>(a_.k.data(), rows_, Cfg.kv_heads, a_.rope.data(), stream);
        mark("bias, qk-norm, rope");
    }

    // Appends the step's K and V to the paged pool, then attends: attended.
    template <class Plan>
    bool attend(int layer) {
        static_assert(Plan::window == 0,
                      "CudaOps: the device attention kernels have no sliding-window mask, and the "
                      "device cache no sliding layer groups; sliding-window layers "
                      "(Cfg.sliding_window, Cfg.arch.global_every) are not implemented on the "
                      "CUDA backend yet");
        namespace k = kernels::cuda;
        DeviceStepPlan const& plan = step_.plan;
        std::int32_t const* ints = step_.ints;
        k::PagedKvLayer const kv_layer = k::paged_kv_layer<KvLayout>(
            step_.kv_pool, layer, ints + plan.block_tables, plan.table_stride);
        k::kv_append<KeyCodec, Cfg.head_dim, ValueCodec>(
            kv_layer, Cfg.kv_heads, a_.k.data(), a_.v.data(), ints + plan.row_chunks,
            ints + plan.cache_slots, rows_, step_.stream);
        if (plan.decode_only) {
            k::DecodeAttentionArguments const arguments{
                .queries = a_.q.data(),
                .out = a_.attended.data(),
                .context_lengths = ints + plan.context_lengths,
                .seqs = plan.chunks,
                .kv_heads = Cfg.kv_heads,
                .max_context_length = plan.max_context,
                .workspace = a_.decode_workspace.data(),
                .status = step_.status,
            };
            k::decode_attention<Cfg, KeyCodec, ValueCodec>(kv_layer, arguments, step_.stream);
        } else {
            k::PrefillAttentionArguments const arguments{
                .queries = a_.q.data(),
                .out = a_.attended.data(),
                .query_starts = ints + plan.query_starts,
                .context_lengths = ints + plan.context_lengths,
                .seqs = plan.chunks,
                .kv_heads = Cfg.kv_heads,
                .max_queries = plan.max_queries,
                .status = step_.status,
            };
            k::prefill_attention<Cfg, KeyCodec, ValueCodec>(kv_layer, arguments, step_.stream);
        }
        mark("kv append, attention");
        return true;
    }

    // hidden += x . W^T, or hidden += rmsnorm(x . W^T) with sandwich norms.
    template <class Plan>
    bool add_to_residual(kernels::WeightMatrix const& w, model::Activations input,
                         std::span<float const> post_norm) {
        float* const projected = a_.projected.data();
        switch (input) {
            case model::Activations::normed:
                linear<Cfg.hidden>(w, a_.normed.data(), rows_, projected, step_.stream);
                break;
            case model::Activations::attended:
                linear<Cfg.q_width()>(w, a_.attended.data(), rows_, projected, step_.stream);
                break;
            case model::Activations::ffn_hidden:
                linear<Cfg.ffn>(w, a_.gate.data(), rows_, projected, step_.stream);
                break;
        }
        if constexpr (Plan::post_norms) {
            kernels::cuda::rmsnorm<Cfg.hidden>(projected, post_norm.data(), norm_eps, rows_,
                                               projected, step_.stream);
        }
        (void)post_norm;
        kernels::cuda::add_in_place(a_.hidden.data(), projected, elements(Cfg.hidden),
                                    step_.stream);
        mark(input == model::Activations::attended ? "attention output projection"
                                                   : "ffn down projection");
        return true;
    }

    // gate = act(normed . G^T) * (normed . U^T).
    template <class Plan>
    void gated_ffn(kernels::WeightMatrix const& gate, kernels::WeightMatrix const& up) {
        linear<Cfg.hidden>(gate, a_.normed.data(), rows_, a_.gate.data(), step_.stream);
        linear<Cfg.hidden>(up, a_.normed.data(), rows_, a_.up.data(), step_.stream);
        kernels::cuda::gated_activation<Plan::activation>(
            a_.gate.data(), a_.up.data(), elements(Cfg.ffn), a_.gate.data(), step_.stream);
        mark("ffn gate, up, activation");
    }

    // The final norm, the LM head and soft-capping for the rows that give logits: logits.
    void logits(model::ModelWeights<Cfg> const& weights) {
        namespace k = kernels::cuda;
        DeviceStepPlan const& plan = step_.plan;
        k::gather_rows<Cfg.hidden>(a_.hidden.data(), step_.ints + plan.logit_row_ids,
                                   plan.logit_rows, rows_, a_.projected.data(), step_.stream);
        k::rmsnorm<Cfg.hidden>(a_.projected.data(), weights.output_norm.data(), norm_eps,
                               plan.logit_rows, a_.normed.data(), step_.stream);
        linear<Cfg.hidden>(weights.output, a_.normed.data(), plan.logit_rows, a_.logits.data(),
                           step_.stream);
        if constexpr (Cfg.arch.final_logit_softcap > 0) {
            k::soft_cap(a_.logits.data(), static_cast<float>(Cfg.arch.final_logit_softcap),
                        static_cast<std::size_t>(plan.logit_rows) * Cfg.vocab, step_.stream);
        }
        mark("final norm, lm head");
    }

  private:
    // y = x . W^T for the step's rows: the weight-streaming or tiled kernel of W's type, or the
    // program's PrefillGemm for a step of more rows than the streaming kernel takes.
    template <int In>
    void linear(kernels::WeightMatrix const& w, float const* x, int rows, float* y,
                cudaStream_t stream) {
        if (step_.prefill_gemm != nullptr && rows > kernels::cuda::LinearDecodeShape::max_tokens) {
            step_.prefill_gemm->run(w, x, rows, y, stream);
        } else {
            linear_any<In>(w, x, rows, y, stream);
        }
    }
    void mark(char const* part) {
        if (step_.profile != nullptr) step_.profile->mark(part, step_.stream);
    }
    static constexpr double rope_base() {
        return Cfg.rope_base_of(Cfg.has_layer_kind(LayerKind::global) ? LayerKind::global
                                                                      : Cfg.layer_kind(0));
    }
    std::size_t elements(int width) const {
        return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(width);
    }

    DeviceActivations<Cfg, KeyCodec>& a_;
    DeviceStep const& step_;
    int rows_;
};

}  // namespace tinfer::cuda
