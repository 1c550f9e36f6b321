#pragma once
// The x86 vector intrinsics, for kernels that have an AVX2 or AVX-512 path.
#if defined(__AVX2__) || defined(__AVX512F__)
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
#endif
