// What an instantiation costs to compile: scripts/instantiation_cost.sh compiles this file once
// per (part, form) and reports the seconds and the object's code bytes. Each form holds what a
// build serving both shipped shapes (SmolLM2 and Gemma 3 270M) instantiates of the part:
//   static:  one instantiation per shape (and per layer kind where Gemma's two differ);
//   dynamic: one instantiation that serves every shape (the dimensions are arguments).
// TINFER_PART: 0 nothing (the headers alone, the baseline the others are read against),
// 1 attention (prefill and decode, one routine), 2 RMSNorm row, 3 RoPE rotation,
// 4 the whole forward pass of both models (Llama::forward, int8 activations, StaticShapes or
// DynamicShapes). TINFER_STATIC: 1 static, 0 dynamic.
#include <cstdint>
#include <span>

#include <tinfer/core/extent.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

namespace cost {

using namespace tinfer;
constexpr int part = TINFER_PART;
constexpr bool is_static = TINFER_STATIC != 0;

template <int head_dim, int group, int window, int scale_dim>
void attention_static(kv::FloatKvView const& view, int kv_heads, kernels::AttentionChunk const& c,
                      std::span<float> scratch) {
    kernels::Attention<head_dim, group, window, scale_dim>::attend(view, kv_heads, c, 1, scratch);
}

template <int = 0>  // a template, emitted only where used, as the static forms
void attention_dynamic(int head_dim, int group, int window, int scale_dim,
                       kv::FloatKvView const& view, int kv_heads, kernels::AttentionChunk const& c,
                       std::span<float> scratch) {
    kernels::AttentionKernel<DynamicExtent, DynamicExtent, DynamicExtent, DynamicExtent> const
        kernel(DynamicExtent{head_dim}, DynamicExtent{group}, DynamicExtent{window},
               DynamicExtent{scale_dim});
    kernel.attend(view, kv_heads, c, 1, scratch);
}

template <int width>
void rmsnorm_static(float const* x, float const* w, float* out) {
    kernels::rmsnorm_row(StaticExtent<width>{}, x, w, 1e-6f, out);
}

template <int = 0>
void rmsnorm_dynamic(int width, float const* x, float const* w, float* out) {
    kernels::rmsnorm_row(DynamicExtent{width}, x, w, 1e-6f, out);
}

template <int head_dim, RopePairing pairing>
void rope_static(float* x, int heads, float const* table) {
    kernels::apply_rope_row<pairing>(StaticExtent<head_dim>{}, x, heads, table);
}

template <RopePairing pairing>
void rope_dynamic(int head_dim, float* x, int heads, float const* table) {
    kernels::apply_rope_row<pairing>(DynamicExtent{head_dim}, x, heads, table);
}

template <ModelConfig Cfg>
void forward(model::Llama<Cfg> const& m, std::span<SequenceChunk const> chunks,
             kv::ContiguousKvCache<Cfg>& cache, typename model::Llama<Cfg>::Workspace& ws,
             std::span<float> logits) {
    using Shapes = std::conditional_t<is_static, StaticShapes, DynamicShapes>;
    m.template forward<kernels::Int8Activations, Shapes>(chunks, cache, ws, logits);
}

// The address of every instantiation of the chosen part and form.
template <int P, bool S>  // a template, so only the chosen branch is instantiated
std::span<void const* const> emitted() {
    using presets::gemma3_270m;
    using presets::smollm2_135m;
    if constexpr (P == 0) {
        return {};
    } else if constexpr (P == 1 && S) {
        static void const* const f[] = {
            reinterpret_cast<void const*>(&attention_static<64, 3, 0, 64>),
            reinterpret_cast<void const*>(&attention_static<256, 4, 512, 256>),
            reinterpret_cast<void const*>(&attention_static<256, 4, 0, 256>)};
        return f;
    } else if constexpr (P == 1) {
        static void const* const f[] = {reinterpret_cast<void const*>(&attention_dynamic<>)};
        return f;
    } else if constexpr (P == 2 && S) {
        // The hidden widths and the QK-norm head_dim (SmolLM2 has no QK-norm).
        static void const* const f[] = {reinterpret_cast<void const*>(&rmsnorm_static<576>),
                                        reinterpret_cast<void const*>(&rmsnorm_static<640>),
                                        reinterpret_cast<void const*>(&rmsnorm_static<256>)};
        return f;
    } else if constexpr (P == 2) {
        static void const* const f[] = {reinterpret_cast<void const*>(&rmsnorm_dynamic<>)};
        return f;
    } else if constexpr (P == 3 && S) {
        static void const* const f[] = {
            reinterpret_cast<void const*>(&rope_static<64, RopePairing::adjacent>),
            reinterpret_cast<void const*>(&rope_static<256, RopePairing::neox>)};
        return f;
    } else if constexpr (P == 3) {
        static void const* const f[] = {
            reinterpret_cast<void const*>(&rope_dynamic<RopePairing::adjacent>),
            reinterpret_cast<void const*>(&rope_dynamic<RopePairing::neox>)};
        return f;
    } else {
        static_assert(P == 4, "TINFER_PART: 1 attention, 2 rmsnorm, 3 rope, 4 model");
        static void const* const f[] = {reinterpret_cast<void const*>(&forward<smollm2_135m>),
                                        reinterpret_cast<void const*>(&forward<gemma3_270m>)};
        return f;
    }
}

}  // namespace cost

int main() {
    // Every address reaches the exit status, so each instantiation is emitted.
    std::uintptr_t sum = 0;
    for (void const* f : cost::emitted<cost::part, cost::is_static>())
        sum ^= reinterpret_cast<std::uintptr_t>(f);
    return static_cast<int>(sum & 1);
}
