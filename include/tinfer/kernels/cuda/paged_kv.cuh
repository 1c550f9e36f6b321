#pragma once
// One layer of a paged KV cache as the device kernels read it. The bytes are laid out exactly as
// kv::PagedKvCache lays out its host storage, so blocks move between host and device (swap) as
// plain byte copies:
//   block:  [layers][K, V][kv_heads][block_size][vector bytes]
//   vector: one token of one KV head, encoded by the cache's kv::KvCodec.
// A sequence's block table maps its logical blocks to physical ones; the kernels take the
// tables of a batch as one [seqs][table_stride] array of block ids.
//
// KvReader<Codec, HeadDim> decodes a run of a vector's elements with wide loads; it computes
// what Codec::decode computes (the same conversion, then the same multiply by the stored scale).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <tinfer/core/int_quant.hpp>
#include <tinfer/kernels/cuda/element.cuh>
#include <tinfer/kernels/cuda/paged_kv_layer.hpp>
#include <tinfer/kv/codec.hpp>

namespace tinfer::kernels::cuda {

template <class Codec, int HeadDim>
struct KvReader;

// Codecs that store elements without a scale: f32, f16, bf16.
template <DType T, int HeadDim>
struct PlainKvReader {
    using Storage = StorageOf<T>;
    static constexpr int elements = elements_per_vector<T>;
    static constexpr std::size_t vector_bytes = HeadDim * sizeof(Storage);
    static_assert(HeadDim % elements == 0,
                  "KvReader: head_dim must be a multiple of the load width");

    // out = elements first .. first+elements-1 of the vector at `vector`.
    __device__ static void load(std::byte const* vector, int first, float (&out)[elements]) {
        load_floats<T, elements>(reinterpret_cast<Storage const*>(vector) + first, out);
    }
};

template <int HeadDim>
struct KvReader<kv::Fp32Codec, HeadDim> : PlainKvReader<DType::f32, HeadDim> {};
template <int HeadDim>
struct KvReader<kv::Fp16Codec, HeadDim> : PlainKvReader<DType::f16, HeadDim> {};
template <int HeadDim>
struct KvReader<kv::Bf16Codec, HeadDim> : PlainKvReader<DType::bf16, HeadDim> {};

// Codecs that store [float scale][HeadDim one-byte codes]: FP8 and int8. Vectors are 4 + HeadDim
// bytes, so codes are only 4-byte aligned: they are loaded 4 at a time.
template <int HeadDim, class DecodeCode>
struct ScaledByteKvReader {
    static constexpr int elements = 8;
    static constexpr int word_bytes = 4;
    static constexpr std::size_t vector_bytes = sizeof(float) + HeadDim;
    static_assert(HeadDim % elements == 0, "KvReader: head_dim must be a multiple of 8");

    __device__ static void load(std::byte const* vector, int first, float (&out)[elements]) {
        float const scale = *reinterpret_cast<float const*>(vector);
        auto const* words = reinterpret_cast<std::uint32_t const*>(vector + sizeof(float) + first);
#pragma unroll
        for (int w = 0; w < elements / word_bytes; ++w) {
            std::uint32_t const word = words[w];
#pragma unroll
            for (int b = 0; b < word_bytes; ++b) {
                auto const code = static_cast<std::uint8_t>(word >> (8 * b));
                out[w * word_bytes + b] = DecodeCode::decode(code, scale);
            }
        }
    }
};

template <DType T>
struct Fp8CodeDecoder {
    __device__ static float decode(std::uint8_t code, float scale) {
        return DeviceElement<T>::to_float(code) * scale;
    }
};
struct Int8CodeDecoder {
    __device__ static float decode(std::uint8_t code, float scale) {
        return dequantize_int8(static_cast<std::int8_t>(code), scale);
    }
};

template <int HeadDim>
struct KvReader<kv::Fp8E4M3Codec, HeadDim>
    : ScaledByteKvReader<HeadDim, Fp8CodeDecoder<DType::fp8_e4m3>> {};
template <int HeadDim>
struct KvReader<kv::Fp8E5M2Codec, HeadDim>
    : ScaledByteKvReader<HeadDim, Fp8CodeDecoder<DType::fp8_e5m2>> {};
template <int HeadDim>
struct KvReader<kv::Int8Codec, HeadDim> : ScaledByteKvReader<HeadDim, Int8CodeDecoder> {};

// Codecs the device attention kernels read; the reader's layout must be the codec's.
template <class Codec, int HeadDim>
concept DeviceKvCodec = kv::KvCodec<Codec, HeadDim> && requires {
    KvReader<Codec, HeadDim>::elements;
} && KvReader<Codec, HeadDim>::vector_bytes == Codec::template vector_bytes<HeadDim>;

// Elements a kernel moves per access when it reads K with one reader and V with another: the
// wider of the two, which the narrower loads as consecutive runs (widths are 4 or 8, so one
// divides the other).
template <class KeyReader, class ValueReader>
inline constexpr int kv_load_elements =
    KeyReader::elements > ValueReader::elements ? KeyReader::elements : ValueReader::elements;

// out = elements first .. first+Count-1 of the vector at `vector`, in runs of Reader's width.
template <class Reader, int Count>
__device__ inline void load_run(std::byte const* vector, int first, float (&out)[Count]) {
    static_assert(Count % Reader::elements == 0, "load_run: Count must be a multiple of the width");
#pragma unroll
    for (int run = 0; run < Count / Reader::elements; ++run) {
        float part[Reader::elements];
        Reader::load(vector, first + run * Reader::elements, part);
#pragma unroll
        for (int e = 0; e < Reader::elements; ++e) out[run * Reader::elements + e] = part[e];
    }
}

}  // namespace tinfer::kernels::cuda
