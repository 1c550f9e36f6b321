#pragma once
// The x86 vector intrinsics, and the target regions in which a kernel's AVX2 or AVX-512 version
// is compiled whatever the build's -march (kernels/isa.hpp chooses the one that runs). GCC and
// Clang declare every intrinsic in <immintrin.h>; a function may use those its target allows.
// Not under nvcc: the host code of CUDA files takes the portable kernels.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__)
#define TINFER_X86_TARGETS 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() values that -W(maybe-)uninitialized
// reports once inlined (GCC bug 105593, fixed in 13); the warning is about the compiler's
// header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#else
#define TINFER_X86_TARGETS 0
#endif

// TINFER_BEGIN_TARGET_AVX2 ... TINFER_END_TARGET_AVX2: every function defined between them
// (lambdas and template instantiations included) is compiled for AVX2 + FMA + F16C; likewise
// TINFER_BEGIN_TARGET_AVX512 for AVX-512 F/BW/VL/VNNI on top. GCC's target pragma, Clang's
// attribute push (as simdjson does). Under TINFER_EMULATED_AVX512 (a test that supplies the
// 512-bit intrinsics through SIMDe) the AVX-512 region is ordinary code.
#if TINFER_X86_TARGETS && defined(__clang__)
// _Pragma takes one string literal: no line breaks inside.
// clang-format off
#define TINFER_BEGIN_TARGET_AVX2 _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define TINFER_END_TARGET_AVX2 _Pragma("clang attribute pop")
#define TINFER_BEGIN_TARGET_AVX512 _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni\"))), apply_to = function)")
#define TINFER_END_TARGET_AVX512 _Pragma("clang attribute pop")
#define TINFER_BEGIN_TARGET_AMX _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8\"))), apply_to = function)")
#define TINFER_END_TARGET_AMX _Pragma("clang attribute pop")
// clang-format on
#elif TINFER_X86_TARGETS
// -Wpsabi: GCC notes that the regions' lambdas return vectors "without AVX enabled" (it checks
// their signatures before the pragma's target applies); every function here is inline in its
// translation unit, so no call crosses an ABI boundary.
#define TINFER_BEGIN_TARGET_AVX2                                         \
    _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")") \
        _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpsabi\"")
#define TINFER_END_TARGET_AVX2 _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#define TINFER_BEGIN_TARGET_AVX512                                                    \
    _Pragma("GCC push_options")                                                       \
        _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni\")") \
            _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpsabi\"")
#define TINFER_END_TARGET_AVX512 _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#define TINFER_BEGIN_TARGET_AMX                                                                 \
    _Pragma("GCC push_options") _Pragma(                                                        \
        "GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8\")") \
        _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpsabi\"")
#define TINFER_END_TARGET_AMX _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif
// TINFER_BEGIN_TARGET_AMX ... TINFER_END_TARGET_AMX: the AVX-512 set plus AMX-TILE and AMX-INT8
// (the prefill panels' tile products, kernels/int8_panels.hpp), on Linux only, where a process
// asks for the tile state (kernels/isa.hpp, amx_int8_ready), and never under SIMDe.
#if TINFER_X86_TARGETS && defined(__linux__) && !defined(TINFER_EMULATED_AVX512)
#define TINFER_AMX_TARGETS 1
#else
#define TINFER_AMX_TARGETS 0
#endif
#if defined(TINFER_EMULATED_AVX512)
#undef TINFER_BEGIN_TARGET_AVX512
#undef TINFER_END_TARGET_AVX512
#define TINFER_BEGIN_TARGET_AVX512
#define TINFER_END_TARGET_AVX512
#endif
