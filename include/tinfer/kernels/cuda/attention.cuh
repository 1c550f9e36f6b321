#pragma once
// The device attention kernels at a model's shape: head_dim and the GQA group come from the
// config, the KV codec from the cache.
#include <tinfer/config/model_config.hpp>
#include <tinfer/kernels/cuda/decode_attention.cuh>
#include <tinfer/kernels/cuda/instantiations.cuh>
#include <tinfer/kernels/cuda/prefill_attention.cuh>

namespace tinfer::kernels::cuda {

// Codec decodes K and ValueCodec V, as the cache behind `layer` stores them.
template <ModelConfig C, class Codec, class ValueCodec = Codec>
requires DeviceKvCodec<Codec, C.head_dim> && DeviceKvCodec<ValueCodec, C.head_dim>
void decode_attention(PagedKvLayer const& layer, DecodeAttentionArguments const& arguments,
                      cudaStream_t stream = nullptr) {
    decode_attention<Codec, C.head_dim, C.group_size(), ValueCodec>(layer, arguments, stream);
}

template <ModelConfig C, class Codec, class ValueCodec = Codec>
requires DeviceKvCodec<Codec, C.head_dim> && DeviceKvCodec<ValueCodec, C.head_dim>
void prefill_attention(PagedKvLayer const& layer, PrefillAttentionArguments const& arguments,
                       cudaStream_t stream = nullptr) {
    prefill_attention<Codec, C.head_dim, C.group_size(), ValueCodec>(layer, arguments, stream);
}

// Runtime shape -> compiled instantiation (instantiations.cuh), for callers that learn the
// shape from a file.
template <class Codec>
void decode_attention(AttentionShape shape, PagedKvLayer const& layer,
                      DecodeAttentionArguments const& arguments, cudaStream_t stream = nullptr) {
    dispatch_attention_shape(shape, [&]<int HeadDim, int Group>() {
        decode_attention<Codec, HeadDim, Group>(layer, arguments, stream);
    });
}

template <class Codec>
void prefill_attention(AttentionShape shape, PagedKvLayer const& layer,
                       PrefillAttentionArguments const& arguments, cudaStream_t stream = nullptr) {
    dispatch_attention_shape(shape, [&]<int HeadDim, int Group>() {
        prefill_attention<Codec, HeadDim, Group>(layer, arguments, stream);
    });
}

}  // namespace tinfer::kernels::cuda
