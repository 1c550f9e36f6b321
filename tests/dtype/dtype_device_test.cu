// The conversions of core/half.hpp, core/fp8.hpp and core/int_quant.hpp run on the device
// must give the host's bits: every 16-bit and 8-bit pattern decoded, and a batch of floats
// (every midpoint and boundary of each format plus random floats) encoded. CUDA's own device
// conversions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h: hardware cvt on sm_89+) are compared
// too. Without a GPU it reports the skip and exits 77.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

#include <tinfer/core/fp8.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/core/int_quant.hpp>

#include "float_reference.hpp"

namespace {

constexpr int skipped_exit_code = 77;
constexpr int threads_per_block = 256;
constexpr std::uint32_t patterns_16 = std::uint32_t{1} << 16;
constexpr std::uint32_t patterns_8 = std::uint32_t{1} << 8;
constexpr std::size_t random_floats_per_format = std::size_t{1} << 18;
constexpr std::uint64_t seed = 20240607;
// Inverse scales for int8, cycled over the inputs: some powers of two, some not.
__host__ __device__ constexpr float int8_inverse_scale(std::size_t i) {
    constexpr float choices[] = {1.0f, 3.0f, 0.01f, 1.0f / 448, 1e6f};
    return choices[i % (sizeof(choices) / sizeof(float))];
}
constexpr float int4_inverse_scale = 7.5f;
constexpr float int4_zero = -1.0f;
__host__ __device__ constexpr tinfer::Int4Group int4_group() {
    return {.scale = 1.0f / int4_inverse_scale, .zero = int4_zero};
}

// Everything the kernels produce, one array per conversion.
enum Result : int {
    f16_decode,
    bf16_decode,
    e4m3_decode,
    e5m2_decode,
    e4m3_to_f16,
    e5m2_to_f16,
    cuda_f16_decode,
    cuda_bf16_decode,
    cuda_e4m3_to_f16,
    cuda_e5m2_to_f16,
    f16_encode,
    bf16_encode,
    e4m3_encode,
    e5m2_encode,
    int8_encode,
    int4_encode,
    int4_decode,
    cuda_f16_encode,
    cuda_bf16_encode,
    cuda_e4m3_encode,
    cuda_e5m2_encode,
    result_count,
};

struct Outputs {
    std::uint32_t* result[result_count];
};

__global__ void decode_patterns(Outputs out) {
    auto const i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= patterns_16) return;
    auto const bits = static_cast<std::uint16_t>(i);
    out.result[f16_decode][i] = std::bit_cast<std::uint32_t>(tinfer::f16_bits_to_float(bits));
    out.result[bf16_decode][i] = std::bit_cast<std::uint32_t>(tinfer::bf16_bits_to_float(bits));
    out.result[cuda_f16_decode][i] =
        std::bit_cast<std::uint32_t>(__half2float(__ushort_as_half(bits)));
    out.result[cuda_bf16_decode][i] =
        std::bit_cast<std::uint32_t>(__bfloat162float(__ushort_as_bfloat16(bits)));
    if (i >= patterns_8) return;
    auto const byte = static_cast<std::uint8_t>(i);
    auto const e4m3 = tinfer::Fp8E4M3::from_bits(byte);
    auto const e5m2 = tinfer::Fp8E5M2::from_bits(byte);
    out.result[e4m3_decode][i] = std::bit_cast<std::uint32_t>(e4m3.to_float());
    out.result[e5m2_decode][i] = std::bit_cast<std::uint32_t>(e5m2.to_float());
    out.result[e4m3_to_f16][i] = e4m3.to_f16_bits();
    out.result[e5m2_to_f16][i] = e5m2.to_f16_bits();
    out.result[cuda_e4m3_to_f16][i] = __nv_cvt_fp8_to_halfraw(byte, __NV_E4M3).x;
    out.result[cuda_e5m2_to_f16][i] = __nv_cvt_fp8_to_halfraw(byte, __NV_E5M2).x;
}

__global__ void encode_floats(float const* in, std::size_t n, Outputs out) {
    auto const i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float const x = in[i];
    out.result[f16_encode][i] = tinfer::float_to_f16_bits(x);
    out.result[bf16_encode][i] = tinfer::float_to_bf16_bits(x);
    out.result[e4m3_encode][i] = tinfer::Fp8E4M3::from_float(x).bits();
    out.result[e5m2_encode][i] = tinfer::Fp8E5M2::from_float(x).bits();
    auto const int8 = tinfer::quantize_int8(x, int8_inverse_scale(i));
    out.result[int8_encode][i] = static_cast<std::uint8_t>(int8);
    auto const int4 = tinfer::quantize_int4(x, int4_zero, int4_inverse_scale);
    out.result[int4_encode][i] = int4;
    out.result[int4_decode][i] =
        std::bit_cast<std::uint32_t>(tinfer::dequantize_int4(int4, int4_group()));
    out.result[cuda_f16_encode][i] = __half_as_ushort(__float2half_rn(x));
    out.result[cuda_bf16_encode][i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    out.result[cuda_e4m3_encode][i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    out.result[cuda_e5m2_encode][i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
}

bool check_cuda(cudaError_t status, char const* what) {
    if (status == cudaSuccess) return true;
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    return false;
}

// Compares a device array with what the host computes for each index; a NaN-aware mode lets
// two NaNs of any bits match (for comparisons against CUDA's own conversions, whose NaN
// encodings are theirs to choose).
struct Comparison {
    int failures = 0;

    template <class Expected, class IsNan>
    void bitwise(std::string_view what, std::vector<std::uint32_t> const& device, Expected expected,
                 IsNan is_nan) {
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < device.size(); ++i) {
            std::uint32_t const want = expected(i);
            if (device[i] == want || (is_nan(device[i]) && is_nan(want))) continue;
            if (++mismatches <= 8)
                std::printf("  %.*s: index %zu device 0x%x, expected 0x%x\n",
                            static_cast<int>(what.size()), what.data(), i, device[i], want);
        }
        std::printf("%-40.*s %zu values, %zu mismatches\n", static_cast<int>(what.size()),
                    what.data(), device.size(), mismatches);
        failures += mismatches != 0;
    }
    template <class Expected>
    void bitwise(std::string_view what, std::vector<std::uint32_t> const& device,
                 Expected expected) {
        bitwise(what, device, expected, [](std::uint32_t) { return false; });
    }
};

bool f32_nan(std::uint32_t bits) {
    return std::isnan(std::bit_cast<float>(bits));
}
bool f16_nan(std::uint32_t bits) {
    return (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0;
}
bool bf16_nan(std::uint32_t bits) {
    return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0;
}
bool fp8_nan(std::uint32_t bits, bool e4m3) {
    return e4m3 ? (bits & 0x7fu) == 0x7fu : (bits & 0x7fu) > 0x7cu;
}

}  // namespace

int main() {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        std::printf("no CUDA device: skipped\n");
        return skipped_exit_code;
    }

    namespace ref = tinfer::testing::reference;
    std::vector<float> inputs;
    std::uint64_t format_seed = seed;
    for (auto const& format : {ref::binary16, ref::bfloat16, ref::fp8_e4m3, ref::fp8_e5m2}) {
        auto const part =
            ref::encoder_inputs(ref::ValueTable(format), random_floats_per_format, format_seed++);
        inputs.insert(inputs.end(), part.begin(), part.end());
    }
    std::size_t const n = inputs.size();
    std::size_t const longest = n > patterns_16 ? n : patterns_16;

    Outputs device{};
    float* device_inputs = nullptr;
    bool ok = check_cuda(cudaMalloc(&device_inputs, n * sizeof(float)), "cudaMalloc");
    for (auto& array : device.result)
        ok = ok && check_cuda(cudaMalloc(&array, longest * sizeof(std::uint32_t)), "cudaMalloc");
    ok = ok && check_cuda(cudaMemcpy(device_inputs, inputs.data(), n * sizeof(float),
                                     cudaMemcpyHostToDevice),
                          "cudaMemcpy");
    if (!ok) return 1;
    decode_patterns<<<patterns_16 / threads_per_block, threads_per_block>>>(device);
    auto const blocks = static_cast<unsigned>((n + threads_per_block - 1) / threads_per_block);
    encode_floats<<<blocks, threads_per_block>>>(device_inputs, n, device);
    if (!check_cuda(cudaDeviceSynchronize(), "kernels")) return 1;

    std::vector<std::vector<std::uint32_t>> host(result_count);
    for (int r = 0; r < result_count; ++r) {
        std::size_t const count = r < f16_encode
                                      ? (r == f16_decode || r == bf16_decode ||
                                                 r == cuda_f16_decode || r == cuda_bf16_decode
                                             ? patterns_16
                                             : patterns_8)
                                      : n;
        host[r].resize(count);
        if (!check_cuda(cudaMemcpy(host[r].data(), device.result[r], count * sizeof(std::uint32_t),
                                   cudaMemcpyDeviceToHost),
                        "cudaMemcpy"))
            return 1;
    }

    auto const as_u16 = [](std::size_t i) { return static_cast<std::uint16_t>(i); };
    auto const as_u8 = [](std::size_t i) { return static_cast<std::uint8_t>(i); };
    auto const e4m3_nan = [](std::uint32_t b) { return fp8_nan(b, true); };
    auto const e5m2_nan = [](std::uint32_t b) { return fp8_nan(b, false); };
    Comparison check;
    // Our functions: device bits == host bits, NaNs included.
    check.bitwise("f16 decode, device vs host", host[f16_decode], [&](std::size_t i) {
        return std::bit_cast<std::uint32_t>(tinfer::f16_bits_to_float(as_u16(i)));
    });
    check.bitwise("bf16 decode, device vs host", host[bf16_decode], [&](std::size_t i) {
        return std::bit_cast<std::uint32_t>(tinfer::bf16_bits_to_float(as_u16(i)));
    });
    check.bitwise("e4m3 decode, device vs host", host[e4m3_decode], [&](std::size_t i) {
        return std::bit_cast<std::uint32_t>(tinfer::Fp8E4M3::from_bits(as_u8(i)).to_float());
    });
    check.bitwise("e5m2 decode, device vs host", host[e5m2_decode], [&](std::size_t i) {
        return std::bit_cast<std::uint32_t>(tinfer::Fp8E5M2::from_bits(as_u8(i)).to_float());
    });
    check.bitwise("e4m3 to f16, device vs host", host[e4m3_to_f16], [&](std::size_t i) {
        return std::uint32_t{tinfer::Fp8E4M3::from_bits(as_u8(i)).to_f16_bits()};
    });
    check.bitwise("e5m2 to f16, device vs host", host[e5m2_to_f16], [&](std::size_t i) {
        return std::uint32_t{tinfer::Fp8E5M2::from_bits(as_u8(i)).to_f16_bits()};
    });
    check.bitwise("f16 encode, device vs host", host[f16_encode], [&](std::size_t i) {
        return std::uint32_t{tinfer::float_to_f16_bits(inputs[i])};
    });
    check.bitwise("bf16 encode, device vs host", host[bf16_encode], [&](std::size_t i) {
        return std::uint32_t{tinfer::float_to_bf16_bits(inputs[i])};
    });
    check.bitwise("e4m3 encode, device vs host", host[e4m3_encode], [&](std::size_t i) {
        return std::uint32_t{tinfer::Fp8E4M3::from_float(inputs[i]).bits()};
    });
    check.bitwise("e5m2 encode, device vs host", host[e5m2_encode], [&](std::size_t i) {
        return std::uint32_t{tinfer::Fp8E5M2::from_float(inputs[i]).bits()};
    });
    check.bitwise("int8 quantize, device vs host", host[int8_encode], [&](std::size_t i) {
        return std::uint32_t{
            static_cast<std::uint8_t>(tinfer::quantize_int8(inputs[i], int8_inverse_scale(i)))};
    });
    check.bitwise("int4 quantize, device vs host", host[int4_encode], [&](std::size_t i) {
        return std::uint32_t{tinfer::quantize_int4(inputs[i], int4_zero, int4_inverse_scale)};
    });
    check.bitwise("int4 dequantize, device vs host", host[int4_decode], [&](std::size_t i) {
        auto const q = tinfer::quantize_int4(inputs[i], int4_zero, int4_inverse_scale);
        return std::bit_cast<std::uint32_t>(tinfer::dequantize_int4(q, int4_group()));
    });

    // CUDA's device conversions: same bits except that NaN encodings may differ.
    check.bitwise(
        "f16 decode vs __half2float", host[cuda_f16_decode],
        [&](std::size_t i) { return host[f16_decode][i]; }, f32_nan);
    check.bitwise(
        "bf16 decode vs __bfloat162float", host[cuda_bf16_decode],
        [&](std::size_t i) { return host[bf16_decode][i]; }, f32_nan);
    check.bitwise(
        "e4m3 to f16 vs __nv_cvt_fp8_to_halfraw", host[cuda_e4m3_to_f16],
        [&](std::size_t i) { return host[e4m3_to_f16][i]; }, f16_nan);
    check.bitwise(
        "e5m2 to f16 vs __nv_cvt_fp8_to_halfraw", host[cuda_e5m2_to_f16],
        [&](std::size_t i) { return host[e5m2_to_f16][i]; }, f16_nan);
    check.bitwise(
        "f16 encode vs __float2half_rn", host[cuda_f16_encode],
        [&](std::size_t i) { return host[f16_encode][i]; }, f16_nan);
    check.bitwise(
        "bf16 encode vs __float2bfloat16_rn", host[cuda_bf16_encode],
        [&](std::size_t i) { return host[bf16_encode][i]; }, bf16_nan);
    check.bitwise(
        "e4m3 encode vs __nv_cvt_float_to_fp8", host[cuda_e4m3_encode],
        [&](std::size_t i) { return host[e4m3_encode][i]; }, e4m3_nan);
    check.bitwise(
        "e5m2 encode vs __nv_cvt_float_to_fp8", host[cuda_e5m2_encode],
        [&](std::size_t i) { return host[e5m2_encode][i]; }, e5m2_nan);

    cudaFree(device_inputs);
    for (auto* array : device.result) cudaFree(array);
    std::printf("%s\n", check.failures == 0 ? "all conversions agree" : "MISMATCHES");
    return check.failures == 0 ? 0 : 1;
}
