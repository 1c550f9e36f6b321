#pragma once
// Memory for data that decode streams once per token (the repacked weights): 2 MiB aligned and
// advised as transparent huge pages, so the stream crosses a page, and misses the TLB, every
// 2 MiB instead of every 4 KiB. Advice only: where THP is off or unknown (non-Linux), the pages
// stay 4 KiB and nothing else changes. bench/int8_linear_bench, one token streamed over 192
// MiB, Zen 4 guest with THP "madvise", one thread: the strips read 20-27 GB/s on 4 KiB pages
// and 25-31 on huge pages; the read-bandwidth roofline rose the same way (26-28 -> 30-32 GB/s),
// so bench/support/roofline.hpp measures on this memory too. A fresh process's first touch of
// them may wait while the kernel compacts memory into huge pages (253 MB here: 33 ms, or up to
// 650 ms when it had to compact), one more reason the engine repacks at construction
// (Llama::prepare), not in a request.
#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>

namespace tinfer {

inline constexpr std::size_t huge_page_bytes = std::size_t{1} << 21;

struct HugePageDelete {
    void operator()(std::byte* p) const {
        ::operator delete (p, std::align_val_t{huge_page_bytes});
    }
};
using HugePageBuffer = std::unique_ptr<std::byte[], HugePageDelete>;

// At least `bytes` bytes (rounded up to whole huge pages), uninitialized.
inline HugePageBuffer allocate_huge_pages(std::size_t bytes) {
    std::size_t const rounded = (bytes + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    auto* const p =
        static_cast<std::byte*>(::operator new (rounded, std::align_val_t{huge_page_bytes}));
#ifdef MADV_HUGEPAGE
    (void)::madvise(p, rounded, MADV_HUGEPAGE);  // advice: a refusal keeps 4 KiB pages
#endif
    return HugePageBuffer(p);
}

}  // namespace tinfer
