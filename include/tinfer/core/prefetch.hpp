#pragma once
// Asking the memory system for bytes a little before they are read.
#include <cstddef>

namespace tinfer {

inline constexpr std::size_t cache_line_bytes = 64;

// Asks for the cache lines of [p, p + bytes) in every cache level. A hint: it never faults and
// changes no value. For data a core will read soon after, in short runs that the hardware
// prefetchers would only pick up after the first misses (a decode step's cached keys and
// values, kv/kv_view.hpp), issued while the core has other work (model/host_ops.hpp).
inline void prefetch_bytes(void const* p, std::size_t bytes) {
#if defined(__GNUC__)
    auto const* first = static_cast<char const*>(p);
    for (std::size_t offset = 0; offset < bytes; offset += cache_line_bytes)
        __builtin_prefetch(first + offset, 0, 3);
#else
    (void)p;
    (void)bytes;
#endif
}

}  // namespace tinfer
