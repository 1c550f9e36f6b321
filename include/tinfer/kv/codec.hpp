#pragma once
// How one KV vector (one token, one KV head: head_dim floats) is stored in the cache. A codec
// is a compile-time policy, chosen independently for K and V; the paged cache stores each
// vector as `vector_bytes<HeadDim>` bytes, metadata first, and decodes to float on load.
//
// Scales are per (token, head): every vector carries its own. A scale per (block, head) would
// save a few bytes, but a later token whose magnitude exceeds the block's scale would force
// re-quantizing the tokens already stored (lossy twice) or clipping it; a per-vector scale
// keeps encoding one pass and append-only, and costs 4 bytes per head_dim codes (6% at 64).
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/fp8.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/core/host_device.hpp>
#include <tinfer/core/int_quant.hpp>
#include <tinfer/core/simd_intrinsics.hpp>

namespace tinfer::kv {

// A codec stores a vector of HeadDim floats in a fixed number of bytes (a constant, so block
// sizes are known at compile time) and decodes it back to float.
template <class Codec, int HeadDim>
concept KvCodec = HeadDim >
0 && requires(float const* vector, std::byte* encoded, std::byte const* stored, float* decoded) {
    { Codec::name } -> std::convertible_to<std::string_view>;
    { Codec::dtype } -> std::convertible_to<DType>;
    typename std::integral_constant<std::size_t, Codec::template vector_bytes<HeadDim>>;
    Codec::template encode<HeadDim>(vector, encoded);  // vector: [HeadDim]
    Codec::template decode<HeadDim>(stored, decoded);  // decoded: [HeadDim]
}
&&(Codec::template vector_bytes<HeadDim> > 0);

namespace codec_detail {

// Metadata is stored unaligned inside the byte stream; memcpy is the defined way to read it.
TINFER_HOST_DEVICE inline void store_float(float value, std::byte* out) {
    std::memcpy(out, &value, sizeof value);
}
TINFER_HOST_DEVICE inline float load_float(std::byte const* in) {
    float value;
    std::memcpy(&value, in, sizeof value);
    return value;
}

TINFER_HOST_DEVICE inline float max_abs(float const* x, int n) {
    float largest = 0;
    for (int i = 0; i < n; ++i) {
        float const magnitude = x[i] < 0 ? -x[i] : x[i];
        largest = magnitude > largest ? magnitude : largest;
    }
    return largest;
}

}  // namespace codec_detail

// Exact: the stored bytes are the floats, so a paged fp32 cache returns bitwise what a
// contiguous float cache returns.
struct Fp32Codec {
    static constexpr std::string_view name = "fp32";
    static constexpr DType dtype = DType::f32;
    template <int HeadDim>
    static constexpr std::size_t vector_bytes = HeadDim * sizeof(float);

    TINFER_HOST_DEVICE static void encode(Extent auto head_dim, float const* vector,
                                          std::byte* out) {
        std::memcpy(out, vector,
                    static_cast<std::size_t>(static_cast<int>(head_dim)) * sizeof(float));
    }
    TINFER_HOST_DEVICE static void decode(Extent auto head_dim, std::byte const* in, float* out) {
        std::memcpy(out, in, static_cast<std::size_t>(static_cast<int>(head_dim)) * sizeof(float));
    }
    // The forms the cache and the kernels call: HeadDim a template argument, the extent forms
    // above with a static extent (bench/specialization measures them against a dynamic one).
    template <int HeadDim>
    TINFER_HOST_DEVICE static void encode(float const* vector, std::byte* out) {
        encode(StaticExtent<HeadDim>{}, vector, out);
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void decode(std::byte const* in, float* out) {
        decode(StaticExtent<HeadDim>{}, in, out);
    }
};

// The 16-bit float formats, as bits converted by half.hpp (round to nearest even).
struct Fp16Format {
    static constexpr std::string_view name = "fp16";
    static constexpr DType dtype = DType::f16;
    TINFER_HOST_DEVICE static constexpr std::uint16_t to_bits(float x) {
        return float_to_f16_bits(x);
    }
    TINFER_HOST_DEVICE static constexpr float from_bits(std::uint16_t b) {
        return f16_bits_to_float(b);
    }
};
struct Bf16Format {
    static constexpr std::string_view name = "bf16";
    static constexpr DType dtype = DType::bf16;
    TINFER_HOST_DEVICE static constexpr std::uint16_t to_bits(float x) {
        return float_to_bf16_bits(x);
    }
    TINFER_HOST_DEVICE static constexpr float from_bits(std::uint16_t b) {
        return bf16_bits_to_float(b);
    }
};

// 16-bit floats without a scale: both formats' range covers attention's K and V.
template <class Format>
struct HalfCodec {
    static constexpr std::string_view name = Format::name;
    static constexpr DType dtype = Format::dtype;
    template <int HeadDim>
    static constexpr std::size_t vector_bytes = HeadDim * sizeof(std::uint16_t);

    TINFER_HOST_DEVICE static void encode(Extent auto head_dim, float const* vector,
                                          std::byte* out) {
        for (int i = 0; i < static_cast<int>(head_dim); ++i) {
            std::uint16_t const bits = Format::to_bits(vector[i]);
            std::memcpy(out + i * sizeof bits, &bits, sizeof bits);
        }
    }
    TINFER_HOST_DEVICE static void decode(Extent auto head_dim, std::byte const* in, float* out) {
        int i = 0;
#if TINFER_X86_TARGETS && defined(__F16C__)
        // Eight at a time in hardware, the same floats (exact widening; NaNs come out quiet,
        // and the encoder stores no other). A row of keys is decoded each time attention reads
        // it: the portable loop, vectorized, still made an fp16 cache's decode 2.2x slower
        // than fp32's at 3300 positions (SmolLM2, two threads), where it reads half the bytes.
        if constexpr (std::same_as<Format, Fp16Format>) {
            for (; i + 8 <= static_cast<int>(head_dim); i += 8) {
                __m128i const halves = _mm_loadu_si128(
                    reinterpret_cast<__m128i const*>(in + i * sizeof(std::uint16_t)));
                _mm256_storeu_ps(out + i, _mm256_cvtph_ps(halves));
            }
        }
#endif
        for (; i < static_cast<int>(head_dim); ++i) {
            std::uint16_t bits;
            std::memcpy(&bits, in + i * sizeof bits, sizeof bits);
            out[i] = Format::from_bits(bits);
        }
    }
    // The forms the cache and the kernels call: HeadDim a template argument, the extent forms
    // above with a static extent (bench/specialization measures them against a dynamic one).
    template <int HeadDim>
    TINFER_HOST_DEVICE static void encode(float const* vector, std::byte* out) {
        encode(StaticExtent<HeadDim>{}, vector, out);
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void decode(std::byte const* in, float* out) {
        decode(StaticExtent<HeadDim>{}, in, out);
    }
};

using Fp16Codec = HalfCodec<Fp16Format>;
using Bf16Codec = HalfCodec<Bf16Format>;

// FP8 codes of x / scale with scale = max|x| / (largest finite FP8), so the vector's largest
// element uses the top of the format's range. Layout: [float scale][HeadDim codes].
template <class Fp8Type, DType Type>
struct Fp8Codec {
    static constexpr std::string_view name = name_of(Type);
    static constexpr DType dtype = Type;
    template <int HeadDim>
    static constexpr std::size_t vector_bytes = sizeof(float) + HeadDim * sizeof(Fp8Type);

    TINFER_HOST_DEVICE static void encode(Extent auto head_dim, float const* vector,
                                          std::byte* out) {
        float const scale = scale_for(codec_detail::max_abs(vector, head_dim));
        codec_detail::store_float(scale, out);
        for (int i = 0; i < static_cast<int>(head_dim); ++i) {
            out[sizeof(float) + i] =
                static_cast<std::byte>(Fp8Type::from_float(vector[i] / scale).bits());
        }
    }
    TINFER_HOST_DEVICE static void decode(Extent auto head_dim, std::byte const* in, float* out) {
        float const scale = codec_detail::load_float(in);
        for (int i = 0; i < static_cast<int>(head_dim); ++i) {
            auto const bits = static_cast<std::uint8_t>(in[sizeof(float) + i]);
            out[i] = Fp8Type::from_bits(bits).to_float() * scale;
        }
    }
    // The forms the cache and the kernels call: HeadDim a template argument, the extent forms
    // above with a static extent (bench/specialization measures them against a dynamic one).
    template <int HeadDim>
    TINFER_HOST_DEVICE static void encode(float const* vector, std::byte* out) {
        encode(StaticExtent<HeadDim>{}, vector, out);
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void decode(std::byte const* in, float* out) {
        decode(StaticExtent<HeadDim>{}, in, out);
    }

    // Never below the smallest normal float: an all-zero vector still divides by something.
    TINFER_HOST_DEVICE static constexpr float scale_for(float max_abs) {
        float const scale = max_abs / Fp8Type::max_finite().to_float();
        constexpr float smallest_scale = std::numeric_limits<float>::min();
        return scale > smallest_scale ? scale : smallest_scale;
    }
};

using Fp8E4M3Codec = Fp8Codec<Fp8E4M3, DType::fp8_e4m3>;
using Fp8E5M2Codec = Fp8Codec<Fp8E5M2, DType::fp8_e5m2>;

// Symmetric int8, one scale per vector (max|x| maps to 127). Layout: [float scale][HeadDim q].
struct Int8Codec {
    static constexpr std::string_view name = "int8";
    static constexpr DType dtype = DType::int8;
    template <int HeadDim>
    static constexpr std::size_t vector_bytes = sizeof(float) + HeadDim * sizeof(std::int8_t);

    TINFER_HOST_DEVICE static void encode(Extent auto head_dim, float const* vector,
                                          std::byte* out) {
        float const scale = int8_scale_for(codec_detail::max_abs(vector, head_dim));
        float const inv_scale = 1.0f / scale;
        codec_detail::store_float(scale, out);
        for (int i = 0; i < static_cast<int>(head_dim); ++i) {
            out[sizeof(float) + i] = static_cast<std::byte>(quantize_int8(vector[i], inv_scale));
        }
    }
    TINFER_HOST_DEVICE static void decode(Extent auto head_dim, std::byte const* in, float* out) {
        float const scale = codec_detail::load_float(in);
        for (int i = 0; i < static_cast<int>(head_dim); ++i) {
            out[i] = dequantize_int8(static_cast<std::int8_t>(in[sizeof(float) + i]), scale);
        }
    }
    // The forms the cache and the kernels call: HeadDim a template argument, the extent forms
    // above with a static extent (bench/specialization measures them against a dynamic one).
    template <int HeadDim>
    TINFER_HOST_DEVICE static void encode(float const* vector, std::byte* out) {
        encode(StaticExtent<HeadDim>{}, vector, out);
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void decode(std::byte const* in, float* out) {
        decode(StaticExtent<HeadDim>{}, in, out);
    }
};

// The group structure of an int4 vector; a head_dim the groups do not divide is refused here,
// with the value in the instantiation trail.
template <int HeadDim>
struct Int4Layout {
    static_assert(HeadDim % int4_group_size == 0,
                  "Int4Codec: ModelConfig.head_dim must be a multiple of int4_group_size (32)");
    static constexpr int groups = HeadDim / int4_group_size;
    static constexpr std::size_t metadata_bytes = groups * sizeof(Int4Group);
    static constexpr std::size_t code_bytes = HeadDim / 2;  // two 4-bit codes per byte
    static constexpr std::size_t bytes = metadata_bytes + code_bytes;
};

// Asymmetric int4 in groups of 32 (each with a float scale and zero point, the group's min
// and max mapped to codes 0 and 15). Layout: [groups x {scale, zero}][HeadDim/2 packed bytes].
struct Int4Codec {
    static constexpr std::string_view name = "int4";
    static constexpr DType dtype = DType::int4;
    template <int HeadDim>
    static constexpr std::size_t vector_bytes = Int4Layout<HeadDim>::bytes;

    // A dynamic head_dim must be a multiple of int4_group_size (check_head_dim); a static one
    // is checked by Int4Layout at compile time.
    static void check_head_dim(int head_dim) {
        if (head_dim <= 0 || head_dim % int4_group_size != 0)
            throw Error("Int4Codec: head_dim " + std::to_string(head_dim) +
                        " is not a positive multiple of int4_group_size (32)");
    }
    TINFER_HOST_DEVICE static void encode(Extent auto head_dim, float const* vector,
                                          std::byte* out) {
        int const groups = static_cast<int>(head_dim) / int4_group_size;
        std::byte* codes = out + groups * sizeof(Int4Group);
        for (int g = 0; g < groups; ++g) {
            float const* group_values = vector + g * int4_group_size;
            Int4Group const group = int4_group_params(group_values, int4_group_size);
            std::memcpy(out + g * sizeof(Int4Group), &group, sizeof group);
            float const inv_scale = 1.0f / group.scale;
            for (int i = 0; i < int4_group_size; i += 2) {
                std::uint8_t const even = quantize_int4(group_values[i], group.zero, inv_scale);
                std::uint8_t const odd = quantize_int4(group_values[i + 1], group.zero, inv_scale);
                codes[(g * int4_group_size + i) / 2] =
                    static_cast<std::byte>(pack_nibbles(even, odd));
            }
        }
    }
    TINFER_HOST_DEVICE static void decode(Extent auto head_dim, std::byte const* in, float* out) {
        int const groups = static_cast<int>(head_dim) / int4_group_size;
        std::byte const* codes = in + groups * sizeof(Int4Group);
        for (int g = 0; g < groups; ++g) {
            Int4Group group;
            std::memcpy(&group, in + g * sizeof(Int4Group), sizeof group);
            // Byte by byte, both nibbles: the same values as element by element, in a loop
            // GCC vectorizes (indexing a byte by element / 2 and element % 2 kept it scalar).
            for (int j = 0; j < int4_group_size / 2; ++j) {
                int const element = g * int4_group_size + 2 * j;
                auto const packed = static_cast<std::uint8_t>(codes[element / 2]);
                out[element] = dequantize_int4(unpack_nibble(packed, 0), group);
                out[element + 1] = dequantize_int4(unpack_nibble(packed, 1), group);
            }
        }
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void encode(float const* vector, std::byte* out) {
        (void)Int4Layout<HeadDim>::bytes;  // refuses a head_dim the groups do not divide
        encode(StaticExtent<HeadDim>{}, vector, out);
    }
    template <int HeadDim>
    TINFER_HOST_DEVICE static void decode(std::byte const* in, float* out) {
        (void)Int4Layout<HeadDim>::bytes;
        decode(StaticExtent<HeadDim>{}, in, out);
    }
};

}  // namespace tinfer::kv
