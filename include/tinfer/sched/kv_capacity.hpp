#pragma once
// The scheduler's only view of the KV cache. The engine adapts its paged cache to these
// concepts; the scheduler never allocates, it asks whether growth fits and plans accordingly.
#include <concepts>

#include <tinfer/sched/request.hpp>

namespace tinfer::sched {

// Device-side capacity, in blocks. Every answer describes the cache as it is when schedule()
// runs; the scheduler accounts for its own plan's effects on top of it.
//   free_blocks(): blocks a reservation can take now (a prefix cache's evictable blocks count).
//   blocks_needed(seq, length): more blocks seq needs to hold `length` cached tokens on the
//     device (0 when it already has them; all of them for a swapped-out or unknown seq).
//   reclaimable_blocks(seq): blocks that return to the free pool when seq's KV is dropped or
//     swapped out (blocks shared with other sequences do not).
template <class Kv>
concept KvCapacity = requires(Kv const& kv, RequestId seq, int length) {
    { kv.free_blocks() } -> std::convertible_to<int>;
    { kv.blocks_needed(seq, length) } -> std::convertible_to<int>;
    { kv.reclaimable_blocks(seq) } -> std::convertible_to<int>;
};

// A cache with a host pool to swap into, which PreemptBySwap needs.
//   free_host_blocks(): host blocks free now.
//   host_blocks_needed(seq): host blocks a swap-out of seq would take.
template <class Kv>
concept SwapCapacity = KvCapacity<Kv> && requires(Kv const& kv, RequestId seq) {
    { kv.free_host_blocks() } -> std::convertible_to<int>;
    { kv.host_blocks_needed(seq) } -> std::convertible_to<int>;
};

template <KvCapacity Kv>
bool can_grow(Kv const& kv, RequestId seq, int new_length) {
    return kv.blocks_needed(seq, new_length) <= kv.free_blocks();
}

}  // namespace tinfer::sched
