#pragma once
// A device step over a host kv::PagedKvCache's tables (the Engine's CUDA backend): the chunks
// checked, copy-on-write done for the shared blocks the step writes, and the step laid out as
// the kernels' arrays with each sequence's block table as the cache holds it (RoPE positions and
// cache slots apart where token eviction has compacted a sequence). Plain C++ over any
// cache storage, so the planning is tested on the CPU over host blocks
// (tests/cuda/cache_step_test.cpp); cuda::DeviceModel runs it over device blocks.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/sequence_chunk.hpp>
#include <tinfer/model/cuda/step_plan.hpp>

namespace tinfer::cuda {

// The host cache's tables as the step planner reads them (step_plan.hpp's SlotTables).
template <class Cache>
struct CacheTables {
    Cache const& cache;
    bool has_slot(int slot) const { return cache.is_live(slot); }
    int length(int slot) const { return cache.tokens(slot); }
    int max_tokens() const { return Cache::config.max_context; }
    int block_size() const { return Cache::block_size; }
    std::span<kv::BlockId const> table(int slot) const { return cache.block_table(slot); }
};

// Checks the chunks (RequestError naming the chunk: cache slots the cache has not reserved,
// attention scores, which the device does not compute; nothing changes then), copies
// every shared block the step writes (the cache's copy-on-write, done before the kernels since
// they write in place), and lays the step out. `device_chunks` is scratch the caller keeps.
template <class Cache>
DeviceStepPlan plan_cache_step(std::span<SequenceChunk const> chunks, Cache& cache,
                               StepLimits const& limits, std::vector<DeviceChunk>& device_chunks) {
    static_assert(Cache::group_count == 1,
                  "plan_cache_step: one layer group (no sliding-window layers) on the device");
    device_chunks.clear();
    for (std::size_t c = 0; c < chunks.size(); ++c) {
        SequenceChunk const& chunk = chunks[c];
        auto const where = [&] {
            return "chunk " + std::to_string(c) + " (slot " + std::to_string(chunk.slot) + ")";
        };
        if (!chunk.attention_scores.empty())
            throw RequestError(where() +
                               ": attention scores (H2O eviction) are not implemented on the "
                               "CUDA backend");
        device_chunks.push_back({.slot = chunk.slot,
                                 .first_position = chunk.first_position,
                                 .tokens = chunk.tokens,
                                 .all_logits = chunk.all_logits,
                                 .first_cache_slot = chunk.first_cache_slot});
    }
    std::span<DeviceChunk const> const planned(device_chunks);
    CacheTables<Cache> const tables{cache};
    DeviceStepPlan plan = step_detail::measure_step(planned, tables, limits);
    for (DeviceStepPlan::SlotWrite const& write : plan.writes) {
        if (write.end > cache.reserved(write.slot))
            throw RequestError("slot " + std::to_string(write.slot) + ": the step writes up to " +
                               "position " + std::to_string(write.end) + ", the cache reserved " +
                               std::to_string(cache.reserved(write.slot)) +
                               "; reserve() the positions a step writes");
    }
    for (DeviceStepPlan::SlotWrite const& write : plan.writes)
        cache.make_writable(write.slot, write.first_position, write.end - write.first_position);
    step_detail::pack_step(planned, tables, plan);
    return plan;
}

// The step's kernels completed: its positions are written in every layer.
template <class Cache>
void commit_cache_step(DeviceStepPlan const& plan, Cache& cache) {
    for (DeviceStepPlan::SlotWrite const& write : plan.writes)
        cache.mark_written(write.slot, write.end);
}

}  // namespace tinfer::cuda
