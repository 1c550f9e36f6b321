// The AVX-512 VNNI int8 kernels run where the CPU has no AVX-512: int8_linear_test.cpp compiled
// with the 512-bit intrinsics supplied by SIMDe's portable implementations (built on this
// machine's AVX2), and TINFER_EMULATED_AVX512 defined so that the library compiles its AVX-512
// region as ordinary code and reports the CPU as AVX-512 (kernels/isa.hpp): Isa::native then
// runs it. The tests check those paths against the float64 reference and bitwise against the
// AVX2 and portable ones, on machines that cannot execute them natively.
// Built only where SIMDe's headers exist (tests/kernels/CMakeLists.txt) and the compiler does
// not already target AVX-512 (there kernels_test runs them for real).
#if defined(__AVX512F__)
#error "int8_avx512_emulated_test is for builds without AVX-512; kernels_test covers AVX-512 builds"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

// Intrinsics the kernels use that SIMDe 0.7.4 lacks, lane by lane with the instructions'
// rounding (round to nearest even, as the default MXCSR mode).
namespace avx512_shim {
template <class To, class From>
To as(From const& from) {
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof to);
    return to;
}
struct I32 {
    std::int32_t v[16];
};
struct F32 {
    float v[16];
};
inline simde__m512 cvtepi32_ps(simde__m512i a) {
    I32 const in = as<I32>(a);
    F32 out;
    for (int i = 0; i < 16; ++i) out.v[i] = static_cast<float>(in.v[i]);
    return as<simde__m512>(out);
}
inline simde__m512i cvtps_epi32(simde__m512 a) {
    F32 const in = as<F32>(a);
    I32 out;
    for (int i = 0; i < 16; ++i) out.v[i] = static_cast<std::int32_t>(std::nearbyint(in.v[i]));
    return as<simde__m512i>(out);
}
inline simde__m128i cvtepi32_epi8(simde__m512i a) {
    I32 const in = as<I32>(a);
    std::int8_t out[16];
    for (int i = 0; i < 16; ++i) out[i] = static_cast<std::int8_t>(in.v[i]);
    return as<simde__m128i>(out);
}
inline simde__m512i srai_epi32(simde__m512i a, int n) {
    I32 in = as<I32>(a);
    for (int i = 0; i < 16; ++i) in.v[i] >>= n;
    return as<simde__m512i>(in);
}
inline float reduce_max_ps(simde__m512 a) {
    F32 const in = as<F32>(a);
    float m = in.v[0];
    for (int i = 1; i < 16; ++i) m = m > in.v[i] ? m : in.v[i];
    return m;
}
inline int reduce_add_epi32(simde__m512i a) {
    I32 const in = as<I32>(a);
    int s = 0;
    for (int i = 0; i < 16; ++i) s += in.v[i];
    return s;
}
inline simde__m512 cvtph_ps(__m256i a) {
    __m256 const low = _mm256_cvtph_ps(_mm256_castsi256_si128(a));
    __m256 const high = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
    float out[16];
    _mm256_storeu_ps(out, low);
    _mm256_storeu_ps(out + 8, high);
    return as<simde__m512>(out);
}
}  // namespace avx512_shim

#define _mm512_cvtepi32_ps(a) avx512_shim::cvtepi32_ps(a)
#define _mm512_cvtps_epi32(a) avx512_shim::cvtps_epi32(a)
#define _mm512_cvtepi32_epi8(a) avx512_shim::cvtepi32_epi8(a)
#define _mm512_srai_epi32(a, n) avx512_shim::srai_epi32(a, n)
#define _mm512_reduce_max_ps(a) avx512_shim::reduce_max_ps(a)
#define _mm512_reduce_add_epi32(a) avx512_shim::reduce_add_epi32(a)
#define _mm512_cvtph_ps(a) avx512_shim::cvtph_ps(a)

#define TINFER_EMULATED_AVX512 1

#include "int8_linear_test.cpp"

BOOST_AUTO_TEST_CASE(the_emulated_build_runs_the_avx512_kernels) {
    BOOST_TEST(tinfer::kernels::name_of(tinfer::kernels::running_isa()) == std::string("avx512"));
}
