#pragma once
// How one element of a plain dtype is stored in device memory and converted to and from float.
// The conversions are CUDA's hardware ones; they round exactly as tinfer's host conversions
// (core/half.hpp, core/fp8.hpp: nearest-even, FP8 saturating to the largest finite value), so
// a value written on the device reads back as the host would have written it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include <tinfer/core/dtype.hpp>

namespace tinfer::kernels::cuda {

template <DType T>
struct DeviceElement;

template <>
struct DeviceElement<DType::f32> {
    using Storage = float;
    __device__ static float to_float(Storage s) { return s; }
    __device__ static Storage from_float(float v) { return v; }
};

template <>
struct DeviceElement<DType::f16> {
    using Storage = std::uint16_t;  // IEEE binary16 bits, as core/half.hpp holds them
    __device__ static float to_float(Storage s) { return __half2float(__ushort_as_half(s)); }
    __device__ static Storage from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

template <>
struct DeviceElement<DType::bf16> {
    using Storage = std::uint16_t;  // bfloat16 bits
    __device__ static float to_float(Storage s) {
        return __bfloat162float(__ushort_as_bfloat16(s));
    }
    __device__ static Storage from_float(float v) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
};

template <__nv_fp8_interpretation_t Interpretation>
struct Fp8Element {
    using Storage = std::uint8_t;
    __device__ static float to_float(Storage s) {
        return __half2float(__half(__nv_cvt_fp8_to_halfraw(s, Interpretation)));
    }
    __device__ static Storage from_float(float v) {
        return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, Interpretation);
    }
};
template <>
struct DeviceElement<DType::fp8_e4m3> : Fp8Element<__NV_E4M3> {};
template <>
struct DeviceElement<DType::fp8_e5m2> : Fp8Element<__NV_E5M2> {};

template <DType T>
using StorageOf = typename DeviceElement<T>::Storage;

// The dtypes a paged KV cache on the device holds (int8 and int4 need scales: a codec of their
// own, not a plain element).
template <DType T>
concept DeviceKvType = T == DType::f32 || T == DType::f16 || T == DType::bf16 ||
                       T == DType::fp8_e4m3 || T == DType::fp8_e5m2;

// Widest single load: 16 bytes per thread is what one LDG.128 moves.
inline constexpr int vector_bytes = 16;

// Elements a thread moves per vector access, capped so a thread's float accumulators stay in
// registers (an FP8 vector would otherwise be 16 floats per query head).
template <DType T>
inline constexpr int elements_per_vector = [] {
    constexpr int by_width = vector_bytes / static_cast<int>(sizeof(StorageOf<T>));
    constexpr int register_cap = 8;
    return by_width < register_cap ? by_width : register_cap;
}();

// Raw bytes of N elements, loaded or stored in one access.
template <int Bytes>
struct RawVector;
template <>
struct RawVector<16> {
    using type = uint4;
};
template <>
struct RawVector<8> {
    using type = uint2;
};
template <>
struct RawVector<4> {
    using type = unsigned int;
};
template <>
struct RawVector<2> {
    using type = unsigned short;
};

// Loads N consecutive elements at `source` (aligned to N elements) as floats.
template <DType T, int N>
__device__ inline void load_floats(StorageOf<T> const* source, float (&out)[N]) {
    using Storage = StorageOf<T>;
    using Raw = typename RawVector<N* static_cast<int>(sizeof(Storage))>::type;
    union {
        Raw raw;
        Storage elements[N];
    } packed;
    packed.raw = *reinterpret_cast<Raw const*>(source);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = DeviceElement<T>::to_float(packed.elements[i]);
}

// Stores N floats converted to T at `target` (aligned to N elements).
template <DType T, int N>
__device__ inline void store_floats(float const (&in)[N], StorageOf<T>* target) {
    using Storage = StorageOf<T>;
    using Raw = typename RawVector<N* static_cast<int>(sizeof(Storage))>::type;
    union {
        Raw raw;
        Storage elements[N];
    } packed;
#pragma unroll
    for (int i = 0; i < N; ++i) packed.elements[i] = DeviceElement<T>::from_float(in[i]);
    *reinterpret_cast<Raw*>(target) = packed.raw;
}

}  // namespace tinfer::kernels::cuda
