#pragma once
// The host half of the device model's batching: which physical KV blocks each sequence slot owns
// (DeviceBlockTables), and one forward step laid out as the flat integer arrays the device
// kernels read (DeviceStepPlan), packed into one buffer so a step costs one host-to-device copy.
// Plain C++ with no CUDA in sight, so the bookkeeping is tested on the CPU
// (tests/cuda/step_plan_test.cpp) where no GPU exists.
//
// A step is a list of chunks, each a run of consecutive positions of one sequence slot (a
// prefill chunk or a single decode token). The device kernels address a step's sequences by
// their index in the step (0 .. chunks-1), not by slot: the plan copies each chunk's block table
// into a [chunks][table_stride] array in chunk order, so kv_append, prefill and decode attention
// all see the same "sequence i = chunk i".
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kv/block_pool.hpp>

namespace tinfer::cuda {

// One sequence's part of a device forward step: `tokens` at positions first_position,
// first_position + 1, ... (their RoPE rotations) of sequence slot `slot`, stored at cache slots
// first_cache_slot, first_cache_slot + 1, ..., whose cache holds slots 0 .. first_cache_slot - 1
// already (a first_cache_slot below the cached length rewinds: the later slots are overwritten,
// as a re-run of the same tokens does). Without token eviction the two coincide, the default.
struct DeviceChunk {
    int slot = 0;
    int first_position = 0;
    std::span<std::int32_t const> tokens;
    bool all_logits = false;  // logits for every token, else for the last one only
    int first_cache_slot = first_position;
};

// Block tables of `slots` sequences over a pool of `blocks` physical KV blocks of `block_size`
// tokens each; a slot holds at most `max_tokens` positions. Blocks are taken from a
// kv::BlockPool as positions are reserved and given back when the slot is released.
class DeviceBlockTables {
  public:
    DeviceBlockTables(int slots, int blocks, int block_size, int max_tokens)
        : block_size_(block_size),
          max_tokens_(max_tokens),
          pool_(blocks),
          tables_(static_cast<std::size_t>(slots)),
          lengths_(static_cast<std::size_t>(slots), 0) {
        if (slots <= 0 || blocks <= 0 || block_size <= 0 || max_tokens <= 0)
            throw Error("DeviceBlockTables: slots, blocks, block size and max tokens must be > 0");
    }

    int slots() const { return static_cast<int>(tables_.size()); }
    bool has_slot(int slot) const { return slot >= 0 && slot < slots(); }
    int block_size() const { return block_size_; }
    int max_tokens() const { return max_tokens_; }
    int free_blocks() const { return pool_.free_blocks(); }
    int total_blocks() const { return pool_.total_blocks(); }
    // Positions of `slot` whose K and V are in the cache.
    int length(int slot) const { return lengths_[index(slot)]; }
    // Physical blocks of `slot`, logical block order.
    std::span<kv::BlockId const> table(int slot) const { return tables_[index(slot)]; }

    static int blocks_for(int tokens, int block_size) {
        return (tokens + block_size - 1) / block_size;
    }

    // Blocks for positions 0 .. tokens - 1 of `slot`; a RequestError when the pool runs dry
    // (the blocks taken so far stay with the slot until it is released).
    void reserve(int slot, int tokens) {
        if (tokens > max_tokens_)
            throw RequestError("slot " + std::to_string(slot) + ": " + std::to_string(tokens) +
                               " positions, at most " + std::to_string(max_tokens_));
        auto& table = tables_[index(slot)];
        int const needed = blocks_for(tokens, block_size_);
        while (static_cast<int>(table.size()) < needed) {
            auto const block = pool_.allocate();
            if (!block)
                throw RequestError("device KV cache out of blocks (" +
                                   std::to_string(pool_.total_blocks()) + " in all)");
            table.push_back(*block);
        }
    }

    // Positions 0 .. length - 1 of `slot` are cached (after a step wrote them).
    void set_length(int slot, int length) { lengths_[index(slot)] = length; }

    // Every block of `slot` back to the pool; the slot is empty again.
    void release(int slot) {
        auto& table = tables_[index(slot)];
        for (kv::BlockId block : table) pool_.release(block);
        table.clear();
        lengths_[index(slot)] = 0;
    }

  private:
    std::size_t index(int slot) const {
        if (slot < 0 || slot >= slots())
            throw RequestError("sequence slot " + std::to_string(slot) + " outside 0.." +
                               std::to_string(slots() - 1));
        return static_cast<std::size_t>(slot);
    }

    int block_size_;
    int max_tokens_;
    kv::BlockPool pool_;
    std::vector<std::vector<kv::BlockId>> tables_;
    std::vector<int> lengths_;
};

// What one device step may hold; DeviceLlama sizes its buffers from these.
struct StepLimits {
    int max_chunks = 0;      // sequences per step
    int max_rows = 0;        // tokens per step, all chunks together
    int max_logit_rows = 0;  // rows of logits per step
    int vocab = 0;           // token ids must be below it
    // max_context (and with it the table stride) rounded up to a multiple of this, at most the
    // slots' size: decode steps of a batch then share their launch shapes for this many
    // positions, so one captured CUDA graph serves them all (1: exact).
    int context_granularity = 1;
};

// One step's integer arrays, packed back to back in `packed` (each array starts at a multiple of
// 4 ints, 16 bytes, so device pointers into it stay aligned for any load width).
struct DeviceStepPlan {
    int chunks = 0;
    int rows = 0;              // tokens, all chunks together
    int logit_rows = 0;        // rows of logits the step produces
    int max_queries = 0;       // the longest chunk
    int max_context = 0;       // the longest context after the step (chunk included)
    int table_stride = 0;      // block ids per chunk in block_tables
    bool decode_only = false;  // every chunk one token: the decode attention kernel applies

    // Each chunk's slot and the cache slots it writes, [first_position, end) (cache slots, which
    // are positions without token eviction): what commit_step
    // marks cached once the step's kernels have run, and abandon_step forgets if they failed.
    struct SlotWrite {
        int slot;
        int first_position;
        int end;
    };
    std::vector<SlotWrite> writes;

    // Offsets into `packed`, in ints.
    std::size_t tokens = 0;           // [rows] token ids
    std::size_t positions = 0;        // [rows] RoPE position
    std::size_t cache_slots = 0;      // [rows] where the row's K and V go (= position unevicted)
    std::size_t row_chunks = 0;       // [rows] the chunk (step sequence index) of each row
    std::size_t query_starts = 0;     // [chunks + 1] first row of each chunk
    std::size_t context_lengths = 0;  // [chunks] cached positions after the step
    std::size_t logit_row_ids = 0;    // [logit_rows] rows whose hidden state becomes logits
    std::size_t block_tables = 0;     // [chunks][table_stride] physical block ids
    std::vector<std::int32_t> packed;

    std::span<std::int32_t const> array(std::size_t offset, std::size_t count) const {
        return {packed.data() + offset, count};
    }
};

namespace step_detail {
// Appends room for `count` ints at a 4-int boundary; returns where it starts.
inline std::size_t allocate(std::vector<std::int32_t>& packed, std::size_t count) {
    constexpr std::size_t alignment = 4;
    std::size_t const start = (packed.size() + alignment - 1) / alignment * alignment;
    packed.resize(start + count, 0);
    return start;
}
}  // namespace step_detail

namespace step_detail {
// What a planner reads of whoever owns the block tables (DeviceBlockTables, or a host
// kv::PagedKvCache through model/cuda/device_model.hpp's adapter).
template <class T>
concept SlotTables = requires(T const& t, int slot) {
    { t.has_slot(slot) } -> std::convertible_to<bool>;
    { t.length(slot) } -> std::convertible_to<int>;  // positions cached
    { t.max_tokens() } -> std::convertible_to<int>;  // positions a slot may hold
    { t.block_size() } -> std::convertible_to<int>;
    { t.table(slot) } -> std::convertible_to<std::span<kv::BlockId const>>;
};

// Checks the chunks against the tables and the limits (RequestError naming the chunk; nothing
// changes) and sizes the plan: counts, the longest chunk and context, the table stride.
template <SlotTables Tables>
DeviceStepPlan measure_step(std::span<DeviceChunk const> chunks, Tables const& tables,
                            StepLimits const& limits) {
    if (chunks.empty()) throw RequestError("a device step needs at least one chunk");
    if (static_cast<int>(chunks.size()) > limits.max_chunks)
        throw RequestError("the step has " + std::to_string(chunks.size()) +
                           " chunks, the device model holds " + std::to_string(limits.max_chunks));
    DeviceStepPlan plan;
    plan.chunks = static_cast<int>(chunks.size());
    plan.decode_only = true;
    std::int64_t rows = 0, logit_rows = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
        DeviceChunk const& chunk = chunks[c];
        auto const where = [&] {
            return "chunk " + std::to_string(c) + " (slot " + std::to_string(chunk.slot) + ")";
        };
        if (!tables.has_slot(chunk.slot)) throw RequestError(where() + ": no such slot");
        if (chunk.tokens.empty()) throw RequestError(where() + " has no tokens");
        if (chunk.first_position < 0)
            throw RequestError(where() + " starts at position " +
                               std::to_string(chunk.first_position));
        if (chunk.first_cache_slot < 0 || chunk.first_cache_slot > tables.length(chunk.slot))
            throw RequestError(where() + " starts at cache slot " +
                               std::to_string(chunk.first_cache_slot) + ", the slot caches " +
                               std::to_string(tables.length(chunk.slot)));
        // Cache slots from here on: they bound the tables and the attention.
        std::int64_t const end =
            chunk.first_cache_slot + static_cast<std::int64_t>(chunk.tokens.size());
        if (end > tables.max_tokens())
            throw RequestError(where() + " ends at position " + std::to_string(end) +
                               ", beyond the " + std::to_string(tables.max_tokens()) +
                               " a slot holds");
        for (std::int32_t const token : chunk.tokens)
            if (token < 0 || token >= limits.vocab)
                throw RequestError(where() + ": token id " + std::to_string(token) +
                                   " outside the vocabulary of " + std::to_string(limits.vocab));
        for (std::size_t other = 0; other < c; ++other)
            if (chunks[other].slot == chunk.slot)
                throw RequestError(where() + " shares its slot with chunk " +
                                   std::to_string(other));
        rows += static_cast<std::int64_t>(chunk.tokens.size());
        logit_rows += chunk.all_logits ? static_cast<std::int64_t>(chunk.tokens.size()) : 1;
        plan.max_queries = std::max(plan.max_queries, static_cast<int>(chunk.tokens.size()));
        plan.max_context = std::max(plan.max_context, static_cast<int>(end));
        plan.decode_only = plan.decode_only && chunk.tokens.size() == 1;
    }
    if (rows > limits.max_rows)
        throw RequestError("the step has " + std::to_string(rows) + " tokens, the device model " +
                           "holds " + std::to_string(limits.max_rows));
    if (logit_rows > limits.max_logit_rows)
        throw RequestError("the step asks for " + std::to_string(logit_rows) +
                           " rows of logits, the device model holds " +
                           std::to_string(limits.max_logit_rows));
    plan.rows = static_cast<int>(rows);
    plan.logit_rows = static_cast<int>(logit_rows);
    if (limits.context_granularity > 1) {
        int const g = limits.context_granularity;
        plan.max_context = std::min((plan.max_context + g - 1) / g * g, tables.max_tokens());
    }
    plan.table_stride = (plan.max_context + tables.block_size() - 1) / tables.block_size();
    for (DeviceChunk const& chunk : chunks)
        plan.writes.push_back({chunk.slot, chunk.first_cache_slot,
                               chunk.first_cache_slot + static_cast<int>(chunk.tokens.size())});
    return plan;
}

// Lays the measured step out as the kernels' integer arrays; every chunk's table must already
// cover its positions.
template <SlotTables Tables>
void pack_step(std::span<DeviceChunk const> chunks, Tables const& tables, DeviceStepPlan& plan) {
    auto& packed = plan.packed;
    std::size_t const n_rows = static_cast<std::size_t>(plan.rows);
    std::size_t const n_chunks = static_cast<std::size_t>(plan.chunks);
    plan.tokens = allocate(packed, n_rows);
    plan.positions = allocate(packed, n_rows);
    plan.cache_slots = allocate(packed, n_rows);
    plan.row_chunks = allocate(packed, n_rows);
    plan.query_starts = allocate(packed, n_chunks + 1);
    plan.context_lengths = allocate(packed, n_chunks);
    plan.logit_row_ids = allocate(packed, static_cast<std::size_t>(plan.logit_rows));
    plan.block_tables = allocate(packed, n_chunks * static_cast<std::size_t>(plan.table_stride));
    std::size_t row = 0, out = 0;
    for (std::size_t c = 0; c < n_chunks; ++c) {
        DeviceChunk const& chunk = chunks[c];
        int const n = static_cast<int>(chunk.tokens.size());
        packed[plan.query_starts + c] = static_cast<std::int32_t>(row);
        packed[plan.context_lengths + c] = chunk.first_cache_slot + n;
        for (int i = 0; i < n; ++i, ++row) {
            packed[plan.tokens + row] = chunk.tokens[static_cast<std::size_t>(i)];
            packed[plan.positions + row] = chunk.first_position + i;
            packed[plan.cache_slots + row] = chunk.first_cache_slot + i;
            packed[plan.row_chunks + row] = static_cast<std::int32_t>(c);
            if (chunk.all_logits || i == n - 1)
                packed[plan.logit_row_ids + out++] = static_cast<std::int32_t>(row);
        }
        auto const table = tables.table(chunk.slot);
        // Blocks past the chunk's context (another chunk's stride) are never read: -1 poisons them.
        for (int b = 0; b < plan.table_stride; ++b)
            packed[plan.block_tables + c * static_cast<std::size_t>(plan.table_stride) +
                   static_cast<std::size_t>(b)] =
                b < static_cast<int>(table.size()) ? table[static_cast<std::size_t>(b)] : -1;
    }
    packed[plan.query_starts + n_chunks] = static_cast<std::int32_t>(row);
}
}  // namespace step_detail

// Checks the chunks (RequestError naming the chunk, or the pool running dry; either leaves
// `tables` as it was), reserves their blocks in `tables`, and lays the step out. The slots'
// cached lengths do not change here: the step's K and V are not written until its kernels run,
// so the caller marks them cached with commit_step after the step succeeded (or calls
// abandon_step after it failed). A chunk may not leave a gap after its slot's cached positions,
// and a slot appears at most once per step.
inline DeviceStepPlan plan_step(std::span<DeviceChunk const> chunks, DeviceBlockTables& tables,
                                StepLimits const& limits) {
    DeviceStepPlan plan = step_detail::measure_step(chunks, tables, limits);

    // Blocks the step takes from the pool, checked before any is taken.
    std::int64_t new_blocks = 0;
    for (DeviceChunk const& chunk : chunks) {
        int const end = chunk.first_cache_slot + static_cast<int>(chunk.tokens.size());
        int const have = static_cast<int>(tables.table(chunk.slot).size());
        new_blocks += std::max(0, DeviceBlockTables::blocks_for(end, tables.block_size()) - have);
    }
    if (new_blocks > tables.free_blocks())
        throw RequestError("the step needs " + std::to_string(new_blocks) +
                           " new KV blocks, the device cache has " +
                           std::to_string(tables.free_blocks()) + " free");

    // Everything checked: now the slots' blocks change (their lengths wait for commit_step).
    for (DeviceStepPlan::SlotWrite const& write : plan.writes)
        tables.reserve(write.slot, write.end);
    step_detail::pack_step(chunks, tables, plan);
    return plan;
}

// The step's kernels completed: each chunk's positions are cached, up to its end.
inline void commit_step(DeviceStepPlan const& plan, DeviceBlockTables& tables) {
    for (DeviceStepPlan::SlotWrite const& write : plan.writes)
        tables.set_length(write.slot, write.end);
}

// The step failed somewhere between its first launch and the results: any of its positions may
// be unwritten or half written, so each slot keeps only what was cached before the chunk's
// first position (a rewinding chunk thus also forgets the positions it may have overwritten).
// Its reserved blocks stay with the slot until release.
inline void abandon_step(DeviceStepPlan const& plan, DeviceBlockTables& tables) {
    for (DeviceStepPlan::SlotWrite const& write : plan.writes)
        tables.set_length(write.slot, std::min(tables.length(write.slot), write.first_position));
}

}  // namespace tinfer::cuda
