#pragma once
// Cache lines: asking the memory system for bytes a little before they are read, and placing
// per-thread data on lines of its own.
#include <cstddef>
#include <cstdint>

namespace tinfer {

inline constexpr std::size_t cache_line_bytes = 64;

// The first address at or after p that starts a cache line.
template <class T>
T* cache_line_aligned(T* p) {
    auto const address = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<T*>(address +
                                (cache_line_bytes - address % cache_line_bytes) % cache_line_bytes);
}

// Whether the compiler may move the prefetches among the loads around them. `pinned` keeps them
// where the code asks for them, ahead of the loads that follow (an asm statement on x86).
enum class PrefetchOrder { free, pinned };

// Asks for the cache lines of [p, p + bytes) in every cache level. A hint: it never faults and
// changes no value. For data a core will read soon after, in short runs that the hardware
// prefetchers would only pick up after the first misses: a decode step's cached keys and values
// (kv/kv_view.hpp), issued while the core has other work (model/host_ops.hpp), and the strip
// blocks of the quantized decode kernels (kernels/int8_dot.hpp, which says which order each
// weight type streams fastest with). `__builtin_prefetch`, not `_mm_prefetch`: GCC 12 emitted
// none of the kernels' `_mm_prefetch` calls inside their target regions.
template <PrefetchOrder order = PrefetchOrder::free>
inline void prefetch_bytes(void const* p, std::size_t bytes) {
#if defined(__GNUC__)
    auto const* first = static_cast<char const*>(p);
    for (std::size_t offset = 0; offset < bytes; offset += cache_line_bytes) {
#if defined(__x86_64__) || defined(__i386__)
        if constexpr (order == PrefetchOrder::pinned) {
            __asm__ volatile("prefetcht0 %0" : : "m"(first[offset]));
            continue;
        }
#endif
        __builtin_prefetch(first + offset, 0, 3);
    }
#else
    (void)p;
    (void)bytes;
#endif
}

// Asks for the cache line holding p, to be written: its owner gives it up now rather than when
// the store reaches it. For outputs written a line at a time far apart (a strip's 16 outputs of
// each token, kernels/linear.hpp), where a store that misses holds up every store behind it.
// `prefetchw` on x86 (a no-op on cores without it).
inline void prefetch_for_write(void const* p) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__ volatile("prefetchw %0" : : "m"(*static_cast<char const*>(p)));
#elif defined(__GNUC__)
    __builtin_prefetch(p, 1, 3);
#else
    (void)p;
#endif
}

}  // namespace tinfer
