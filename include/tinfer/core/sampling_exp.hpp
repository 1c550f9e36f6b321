#pragma once
// The exponential the sampler weighs tokens with, one function for the host sampler
// (kernels/sampling.hpp) and the device one (kernels/cuda/sampling.cuh); in core/ because both
// backends build on it and neither owns it. The host's std::exp
// (the C library's expf) and CUDA's expf differ in the last bit for some inputs, and a weight
// one bit apart can move a token across a top-p or min-p cut-off or the drawn CDF interval, so
// the two backends would draw different tokens for the same seed. This one uses only operations
// IEEE 754 rounds exactly (fused multiply-add, multiply, add, exponent bits), spelled out so no
// compiler may contract or reassociate them: bitwise the same result on every backend.
//
// Method (Cephes' expf): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (Cody-Waite:
// ln2 in two parts), e^r by a degree-7 polynomial, then times 2^n in two exact power-of-two
// steps (so results in the subnormal range round once per step, the same way everywhere).
// Within 2 ulp of e^x over the float range (tests/cuda/sampling_exp_test.cpp sweeps it).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

namespace sampling_exp_detail {

// 2^k as a float, for k in [-126, 127] (normal numbers: exact).
TINFER_HOST_DEVICE inline float power_of_two(int k) {
    auto const bits = static_cast<std::uint32_t>(k + 127) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
#endif
}

}  // namespace sampling_exp_detail

// e^x, bitwise identical on host and device. NaN stays NaN, -inf gives 0, overflow +inf.
TINFER_HOST_DEVICE inline float sampling_exp(float x) {
    using sampling_exp_detail::power_of_two;
    constexpr float log2e = 1.44269504088896341f;
    constexpr float ln2_high = 0.693359375f;  // ln 2 = ln2_high + ln2_low (Cephes' split)
    constexpr float ln2_low = -2.12194440e-4f;
    constexpr float overflow = 88.72283935546875f;        // above: e^x > largest float
    constexpr float underflow = -103.97208404541015625f;  // below: e^x < half the least subnormal
    constexpr float round_shift = 12582912.0f;            // 1.5 * 2^23: adding it rounds to int
    if (x != x) return x;
    if (x > overflow) return std::numeric_limits<float>::infinity();
    if (x < underflow) return 0.0f;
    // n = round-to-nearest(x log2 e): |x log2 e| < 2^22, so the shifted sum holds it exactly.
    float const shifted = fused_multiply_add(x, log2e, round_shift);
    float const n = shifted - round_shift;
    float r = fused_multiply_add(n, -ln2_high, x);
    r = fused_multiply_add(n, -ln2_low, r);
    float p = 1.9875691500e-4f;
    p = fused_multiply_add(p, r, 1.3981999507e-3f);
    p = fused_multiply_add(p, r, 8.3334519073e-3f);
    p = fused_multiply_add(p, r, 4.1665795894e-2f);
    p = fused_multiply_add(p, r, 1.6666665459e-1f);
    p = fused_multiply_add(p, r, 5.0000001201e-1f);
    float const r2 = r * r;
    float const e_r = fused_multiply_add(p, r2, r) + 1.0f;
    // 2^n in two halves, each a normal power of two: n is in [-150, 128].
    int const k = static_cast<int>(n);
    int const half = k / 2;
    return e_r * power_of_two(half) * power_of_two(k - half);
}

// A token's sampling weight: exp((logit - max_logit) / temperature), the expression both
// samplers use (max_logit the largest processed logit, so the best token weighs exactly 1).
TINFER_HOST_DEVICE inline float sampling_weight(float logit, float max_logit, float temperature) {
    return sampling_exp((logit - max_logit) / temperature);
}

}  // namespace tinfer
