#pragma once
// The instantiation budget of the device attention kernels: the (head_dim, GQA group) shapes
// compiled in, named after the models that need them, and a dispatcher from a runtime shape to
// them. A shape outside the list is refused with tinfer::Error naming the compiled-in ones;
// adding a model with a new shape means adding it here (each shape costs a few seconds of nvcc
// and ~100 KB of fatbin per KV codec and architecture).
#include <ostream>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/presets/presets.hpp>

namespace tinfer::kernels::cuda {

struct AttentionShape {
    int head_dim = 0;
    int group = 0;  // query heads per KV head
    friend constexpr bool operator==(AttentionShape, AttentionShape) = default;
};

inline std::ostream& operator<<(std::ostream& out, AttentionShape shape) {
    return out << "(head_dim " << shape.head_dim << ", group " << shape.group << ")";
}

constexpr AttentionShape attention_shape(ModelConfig const& c) {
    return {c.head_dim, c.group_size()};
}

namespace compiled_attention_shapes {
inline constexpr AttentionShape smollm2_135m = attention_shape(presets::smollm2_135m);  // 64, 3
inline constexpr AttentionShape llama3_8b = attention_shape(presets::llama3_8b);        // 128, 4
// 70B-class GQA (Llama-2-70B, Llama-3-70B): the decode benchmark's target.
inline constexpr AttentionShape llama2_70b = attention_shape(presets::llama2_70b);  // 128, 8
}  // namespace compiled_attention_shapes

// Calls body.template operator()<head_dim, group>() for the compiled-in shape equal to `shape`.
template <class Body>
decltype(auto) dispatch_attention_shape(AttentionShape shape, Body&& body) {
    using namespace compiled_attention_shapes;
    return dispatch<smollm2_135m, llama3_8b, llama2_70b>(
        shape,
        [&]<AttentionShape S>() -> decltype(auto) {
            return body.template operator()<S.head_dim, S.group>();
        },
        [](AttentionShape a, AttentionShape b) { return a == b; }, "attention shape");
}

static_assert(compiled_attention_shapes::smollm2_135m == AttentionShape{64, 3});
static_assert(compiled_attention_shapes::llama3_8b == AttentionShape{128, 4});
static_assert(compiled_attention_shapes::llama2_70b == AttentionShape{128, 8});

}  // namespace tinfer::kernels::cuda
