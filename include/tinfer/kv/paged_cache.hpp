#pragma once
// PagedAttention's KV cache: memory is a pool of fixed-size blocks of BlockSize tokens, and a
// sequence is a block table mapping its logical blocks to physical ones, so no sequence
// reserves memory it does not use (only its last block is partly empty). Blocks are shared by
// reference count: `fork` gives n samples of one prompt the prompt's blocks, the prefix cache
// gives a new request the blocks of a prompt prefix seen before, and a sequence about to write
// into a shared block first copies it (copy-on-write).
//
// Layer groups (layer_groups.hpp): a model whose layers all attend globally has one group, and
// a block holds every layer: [layers][K, V][kv_heads][BlockSize][vector bytes]. A model with
// sliding-window layers has several groups of `layers_per_group` layers of one kind each, all
// drawing same-sized blocks from the one pool; a block holds one group's layers, and a table
// holds one entry per logical block and group, [logical block][group]. A sliding group keeps
// only the blocks its window can still see: when the sequence reserves room to grow, the
// sliding groups' blocks wholly before (tokens - window + 1) go back to the pool and their
// entries read `dropped` (a view returns zeros there: attention masks those keys, but it loads
// whole tiles, which may reach below the window). Global groups keep every block. A head's
// tokens are adjacent inside a block, so a view gathers a run of tokens block by block.
//
// Sequences are slots (ints) handed out by `admit`; the caller (scheduler) makes room with
// `reserve` before the model writes, so `write` (the KvStore contract) never allocates except
// to copy a shared block it was not warned about. As in ContiguousKvCache, each layer counts
// the positions written to it, in order, and a view covers exactly those: a position reserved
// but not yet written is never attended to.
//
// The blocks' bytes live in a BlockStorage (block_storage.hpp): host memory by default, GPU
// memory with kv::DeviceBlocks (device_blocks.hpp), where the model's kernels append K/V in
// place between make_writable and mark_written. Every touch of the bytes goes through the
// storage, in batches, so the bookkeeping here is the same for both.
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/kv/block_pool.hpp>
#include <tinfer/kv/block_storage.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/layer_groups.hpp>
#include <tinfer/kv/prefix_cache.hpp>

namespace tinfer::kv {

// A sequence admitted by PagedKvCache::admit with a prompt.
struct Admission {
    int seq = -1;           // the sequence's slot
    int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache: skip them
};

template <ModelConfig Cfg, int BlockSize, KvCodec<Cfg.head_dim> KCodec = Fp32Codec,
          KvCodec<Cfg.head_dim> VCodec = KCodec, BlockStorage Storage = HostBlocks>
requires ModelShape<Cfg>
class PagedKvCache {
    static_assert(BlockSize > 0, "PagedKvCache: BlockSize must be positive");
    using Groups = LayerGroups<Cfg>;

  public:
    static constexpr ModelConfig config = Cfg;
    static constexpr int block_size = BlockSize;
    using KeyCodec = KCodec;
    using ValueCodec = VCodec;
    // Layer groups: 1 without sliding layers (every block holds every layer).
    static constexpr int group_count = Groups::count;
    static constexpr int layers_per_group = Groups::layers_per_group;
    static constexpr bool has_sliding = Groups::has_sliding;
    static constexpr int sliding_window = Groups::window;  // 0 without sliding layers
    // A sliding group's table entry for a block it released (outside the window).
    static constexpr BlockId dropped = PrefixCache<BlockSize, group_count>::no_block;

    static constexpr std::size_t key_vector_bytes = KCodec::template vector_bytes<Cfg.head_dim>;
    static constexpr std::size_t value_vector_bytes = VCodec::template vector_bytes<Cfg.head_dim>;
    // One token of one layer: K and V of every KV head.
    static constexpr std::size_t layer_token_bytes =
        static_cast<std::size_t>(Cfg.kv_heads) * (key_vector_bytes + value_vector_bytes);
    // One token of every layer (what a position costs while every group holds it).
    static constexpr std::size_t bytes_per_token = Cfg.layers * layer_token_bytes;
    // One block: BlockSize tokens of one group's layers (of every layer with one group).
    static constexpr std::size_t bytes_per_block = layers_per_group * layer_token_bytes * BlockSize;

    // Byte offsets inside a block of the K and V vectors of `layer`, `kv_head` and a token's
    // slot (position % BlockSize): the layer's place in its group, then as one layer's block.
    // A model that writes the storage itself addresses it with these.
    static constexpr std::size_t layer_bytes = layer_token_bytes * BlockSize;
    static constexpr std::size_t key_offset(int layer, int kv_head, std::size_t slot) {
        return static_cast<std::size_t>(Groups::slot_of(layer)) * layer_bytes +
               (static_cast<std::size_t>(kv_head) * BlockSize + slot) * key_vector_bytes;
    }
    static constexpr std::size_t value_offset(int layer, int kv_head, std::size_t slot) {
        return static_cast<std::size_t>(Groups::slot_of(layer)) * layer_bytes +
               static_cast<std::size_t>(Cfg.kv_heads) * BlockSize * key_vector_bytes +
               (static_cast<std::size_t>(kv_head) * BlockSize + slot) * value_vector_bytes;
    }

    static constexpr int group_of(int layer) { return Groups::group_of(layer); }
    static constexpr bool is_sliding_group(int group) { return Groups::is_sliding_group(group); }

    // Logical blocks of `tokens` positions (each has one block per group).
    static constexpr int logical_blocks_for(std::int64_t tokens) {
        return static_cast<int>((tokens + BlockSize - 1) / BlockSize);
    }
    // Leading logical blocks a sliding group need not hold once `tokens` positions are written:
    // those wholly before the window of the next query (at `tokens`). 0 without sliding layers.
    static constexpr int window_first_block(std::int64_t tokens) {
        if constexpr (!has_sliding) {
            return 0;
        } else {
            std::int64_t const first = tokens - sliding_window + 1;
            return first <= 0 ? 0 : static_cast<int>(first / BlockSize);
        }
    }

    // Blocks to reserve `tokens` positions in an empty sequence: every group's, since the
    // first query sees position 0. The scheduler's price of a fresh prefill.
    static constexpr int blocks_for(std::int64_t tokens) {
        return group_count * logical_blocks_for(tokens);
    }
    // Blocks a sequence with `tokens` written positions holds at least: every global block and
    // the sliding blocks of the next query's window; what export_blocks writes.
    static constexpr int held_blocks_for(std::int64_t tokens) {
        int const blocks = logical_blocks_for(tokens);
        return Groups::global_groups * blocks +
               Groups::sliding_groups * (blocks - window_first_block(tokens));
    }
    // Blocks a swapped-out sequence of `held_tokens` written positions takes to come back
    // (import_blocks) and then hold `length` positions: held_blocks_for(held_tokens) plus
    // every group's blocks past them (its window is already held, so nothing is released).
    static constexpr int blocks_to_resume(std::int64_t held_tokens, std::int64_t length) {
        return held_blocks_for(held_tokens) +
               group_count *
                   std::max(0, logical_blocks_for(length) - logical_blocks_for(held_tokens));
    }
    // The fewest blocks a sequence that grows to `tokens` positions must hold at once: its peak
    // when it reserves one position at a time (a longer prefill chunk needs more).
    static constexpr int min_blocks_for(std::int64_t tokens) {
        if constexpr (!has_sliding) {
            return blocks_for(tokens);
        } else {
            int most = 0;
            // Past the first window the count repeats every block: the last W + B steps
            // include its maximum.
            std::int64_t const from =
                std::max<std::int64_t>(0, tokens - 1 - sliding_window - BlockSize);
            for (std::int64_t t = from; t < tokens; ++t) {  // reserve(t + 1) with t written
                int const blocks = logical_blocks_for(t + 1);
                most =
                    std::max(most, Groups::global_groups * blocks +
                                       Groups::sliding_groups * (blocks - window_first_block(t)));
            }
            return most;
        }
    }

    // One sequence's K and V for one layer, decoded to float (satisfies KvView). It reads the
    // block table in place: valid until that sequence is next reserved, truncated or released.
    // Positions in a block the layer's group released read as zeros.
    class View {
      public:
        int tokens() const { return tokens_; }
        void load_keys(int kv_head, int first, int count, float* out) const {
            load<KCodec, key_vector_bytes>(key_offset(layer_, kv_head, 0), first, count, out);
        }
        void load_values(int kv_head, int first, int count, float* out) const {
            load<VCodec, value_vector_bytes>(value_offset(layer_, kv_head, 0), first, count, out);
        }
        // The same rows in place (kv::KvRowsView) where the codec stores floats and the run
        // lies in one held block; nullptr otherwise.
        float const* key_rows(int kv_head, int first, int count) const {
            return rows_in_place<KCodec, key_vector_bytes>(key_offset(layer_, kv_head, 0), first,
                                                           count);
        }
        float const* value_rows(int kv_head, int first, int count) const {
            return rows_in_place<VCodec, value_vector_bytes>(value_offset(layer_, kv_head, 0),
                                                             first, count);
        }

        // kv::KvPrefetchView: the held blocks' stored bytes, as the codecs keep them.
        void prefetch(int kv_head, int first, int count) const {
            prefetch_runs<key_vector_bytes>(key_offset(layer_, kv_head, 0), first, count);
            prefetch_runs<value_vector_bytes>(value_offset(layer_, kv_head, 0), first, count);
        }

      private:
        friend class PagedKvCache;
        View(std::byte const* storage, std::span<BlockId const> table, int tokens, int layer)
            : storage_(storage), table_(table), tokens_(tokens), layer_(layer) {}

        template <class Codec, std::size_t VectorBytes>
        float const* rows_in_place(std::size_t head_offset, int first, int count) const {
            if constexpr (!std::same_as<Codec, Fp32Codec>) {
                return nullptr;
            } else {
                if (count <= 0 || first % BlockSize + count > BlockSize) return nullptr;
                BlockId const block = block_at(first);
                if constexpr (has_sliding) {
                    if (block == dropped) return nullptr;
                }
                return reinterpret_cast<float const*>(
                    vector_at<VectorBytes>(block, head_offset, first));
            }
        }

        // The physical block holding `position` in this layer's group (`dropped` where a
        // sliding group released it), and position's vector of one head in that block.
        BlockId block_at(int position) const {
            return table_[static_cast<std::size_t>(position / BlockSize) * group_count +
                          static_cast<std::size_t>(group_of(layer_))];
        }
        template <std::size_t VectorBytes>
        std::byte const* vector_at(BlockId block, std::size_t head_offset, int position) const {
            return storage_ + static_cast<std::size_t>(block) * bytes_per_block + head_offset +
                   static_cast<std::size_t>(position % BlockSize) * VectorBytes;
        }

        // Calls visit(vector, position, run) for each run of tokens first .. first+count-1 of
        // this head within one block, `vector` the run's first stored vector, or nullptr where
        // a sliding group released the block. load and prefetch read the same bytes through it.
        template <std::size_t VectorBytes, class Visit>
        void for_each_run(std::size_t head_offset, int first, int count, Visit&& visit) const {
            int position = first;
            int const end = first + count;
            while (position < end) {
                int const run = std::min(end - position, BlockSize - position % BlockSize);
                BlockId const block = block_at(position);
                bool held = true;
                if constexpr (has_sliding) held = block != dropped;
                visit(held ? vector_at<VectorBytes>(block, head_offset, position) : nullptr,
                      position, run);
                position += run;
            }
        }

        // out: [count][head_dim], tokens first .. first+count-1 of this head.
        template <class Codec, std::size_t VectorBytes>
        void load(std::size_t head_offset, int first, int count, float* out) const {
            for_each_run<VectorBytes>(
                head_offset, first, count, [&](std::byte const* vector, int position, int run) {
                    float* const rows =
                        out + static_cast<std::size_t>(position - first) * Cfg.head_dim;
                    if (!vector) {
                        std::fill_n(rows, static_cast<std::size_t>(run) * Cfg.head_dim, 0.0f);
                        return;
                    }
                    // head_dim at run time: the static form measured 0.87-0.99x this one on
                    // decode through every codec at head_dim 64/128/256 (bench/specialization,
                    // docs/specialization.md), so one decode per codec serves every shape.
                    for (int i = 0; i < run; ++i, vector += VectorBytes) {
                        Codec::decode(DynamicExtent{Cfg.head_dim}, vector,
                                      rows + static_cast<std::size_t>(i) * Cfg.head_dim);
                    }
                });
        }

        template <std::size_t VectorBytes>
        void prefetch_runs(std::size_t head_offset, int first, int count) const {
            for_each_run<VectorBytes>(
                head_offset, first, count, [](std::byte const* vector, int /*position*/, int run) {
                    if (vector) prefetch_bytes(vector, static_cast<std::size_t>(run) * VectorBytes);
                });
        }

        std::byte const* storage_;
        std::span<BlockId const> table_;
        int tokens_;
        int layer_;
    };

    // As many blocks as `budget_bytes` holds. A budget below one block is a configuration
    // error (tinfer::Error).
    explicit PagedKvCache(std::size_t budget_bytes)
        : pool_(checked_block_count(budget_bytes)),
          prefix_(sliding_groups_mask()),
          storage_(storage_bytes()) {}
    // As above, the storage made from its size and `storage_args` (a device storage's stream).
    template <class FirstArg, class... MoreArgs>
    requires std::constructible_from<Storage, std::size_t, FirstArg, MoreArgs...> PagedKvCache(
        std::size_t budget_bytes, FirstArg&& first_arg, MoreArgs&&... more_args)
        : pool_(checked_block_count(budget_bytes)),
          prefix_(sliding_groups_mask()),
          storage_(storage_bytes(), std::forward<FirstArg>(first_arg),
                   std::forward<MoreArgs>(more_args)...) {}

    // ---- sequences ----

    // A new, empty sequence that will hold at most `max_tokens` tokens (prompt and output).
    // A request the whole pool could never hold, or longer than the model's context, is
    // refused here with tinfer::RequestError: admitting it would only fail later, after work.
    int admit(int max_tokens) {
        check_admissible(max_tokens);
        return start_sequence({}, 0, max_tokens, 0);
    }

    // As admit(max_tokens), and starts the sequence with the longest cached prefix of the
    // prompt. At least the prompt's last token is left to compute: the model needs its logits
    // to produce the first output token. With sliding layers a cached prefix of L tokens is
    // usable only while the tree still holds the sliding blocks of the window of position L
    // (the first one computed); the deepest such L is taken, and the sequence starts without
    // the sliding blocks before that window.
    Admission admit(std::span<int const> prompt, int max_tokens) {
        check_admissible(max_tokens);
        if (static_cast<std::int64_t>(prompt.size()) > max_tokens) {
            throw RequestError("prompt of " + std::to_string(prompt.size()) +
                               " tokens exceeds the request's " + std::to_string(max_tokens) +
                               "-token limit");
        }
        std::size_t const matchable = prompt.empty() ? 0 : prompt.size() - 1;
        auto match = prefix_.match(prompt.first(matchable), pool_, usable_prefix);
        int const seq = start_sequence(std::move(match.blocks), match.tokens, max_tokens,
                                       window_first_block(match.tokens));
        return {.seq = seq, .cached_tokens = match.tokens};
    }

    // What admit(prompt, ...) and then reserve(seq, length) take from available_blocks():
    // the new blocks past the cached prefix, plus the cached blocks it would pin that only the
    // prefix cache holds now (they stop being evictable). A scheduler that priced a
    // prefix-hit admission at blocks_for(length) alone would overcommit whenever the hit
    // reaches past `length` (a chunked prefill's first chunk).
    int admission_blocks(std::span<int const> prompt, int length) const {
        std::size_t const matchable = prompt.empty() ? 0 : prompt.size() - 1;
        std::vector<BlockId> path = prefix_.peek(prompt.first(matchable));
        int const walked = static_cast<int>(path.size()) / group_count;
        int const taken = usable_prefix(path, walked);
        int pinned = 0;
        for (std::size_t i = 0; i < static_cast<std::size_t>(taken) * group_count; ++i)
            pinned += path[i] != dropped && pool_.ref_count(path[i]) == 1;
        return group_count * std::max(0, logical_blocks_for(length) - taken) + pinned;
    }

    // Makes positions [reserved, new_length) writable: allocates the blocks they fall in, and
    // copies the partly filled last block if it is shared. The sliding groups first release
    // their blocks before the window of the next query (at tokens(seq)). Returns false,
    // changing nothing, when the pool cannot supply the blocks even after evicting the prefix
    // cache: the caller preempts someone and retries. A shorter new_length is a no-op.
    bool reserve(int seq, int new_length) {
        Sequence& s = live(seq);
        if (new_length > s.max_tokens) {
            throw std::logic_error("PagedKvCache::reserve: " + std::to_string(new_length) +
                                   " tokens exceed the " + std::to_string(s.max_tokens) +
                                   " the sequence was admitted with");
        }
        if (new_length <= s.reserved) return true;
        int const needed = blocks_needed(seq, new_length);
        // Refuse before evicting anything from the prefix cache for a growth that cannot fit.
        if (needed > pool_.free_blocks() && needed > available_blocks()) return false;
        if constexpr (has_sliding) drop_before(s, drop_target(s));

        int const copies = copies_of_last_block(s);
        int const fresh_count = blocks_for(new_length) - static_cast<int>(s.table.size()) + copies;
        std::vector<BlockId> fresh;
        fresh.reserve(static_cast<std::size_t>(fresh_count));
        for (int i = 0; i < fresh_count; ++i) {
            auto const block = allocate_block();
            if (!block) {
                throw std::logic_error("PagedKvCache::reserve: the pool ran dry after " +
                                       std::to_string(fresh.size()) + " of " +
                                       std::to_string(fresh_count) + " blocks that were available");
            }
            fresh.push_back(*block);
        }
        auto next = fresh.begin();
        if (copies > 0) {
            std::vector<ByteCopy> block_copies;
            std::size_t const last = s.table.size() - group_count;
            for (std::size_t g = 0; g < group_count; ++g) {
                BlockId& entry = s.table[last + g];
                if (entry != dropped && pool_.is_shared(entry))
                    block_copies.push_back(copy_on_write(entry, *next++));
            }
            storage_.copy(block_copies);
        }
        s.table.insert(s.table.end(), next, fresh.end());
        s.reserved = new_length;
        return true;
    }

    // A new sequence sharing every block of `parent` (n samples of one prompt). Allocates
    // nothing: the first write into a shared block copies it.
    int fork(int parent) {
        Sequence const& source = live(parent);
        Sequence child = source;
        for (BlockId const b : child.table) {
            if (b != dropped) pool_.retain(b);
        }
        int const seq = new_slot();
        sequences_[index(seq)] = std::move(child);
        return seq;
    }

    // Keeps the first `length` positions (rejected speculative tokens are dropped); blocks
    // past them go back to the pool (or stay with their other owners). A length at or past
    // the reservation changes nothing. With sliding layers the window of the next query (at
    // `length`) must still be held: truncating to before a released block is a logic_error.
    void truncate(int seq, int length) {
        Sequence& s = live(seq);
        if (length < 0) {
            throw std::logic_error("PagedKvCache::truncate to " + std::to_string(length) +
                                   " tokens");
        }
        if (length >= s.reserved) return;
        if constexpr (has_sliding) {
            // The window of a position before the first window - 1 starts at 0, held always.
            if (length > 0 && std::max(0, length - sliding_window + 1) < s.sliding_from) {
                throw std::logic_error(
                    "PagedKvCache::truncate to " + std::to_string(length) +
                    " tokens: the sliding layers' window of that position starts at " +
                    std::to_string(std::max(0, length - sliding_window + 1)) +
                    ", but the sliding layers hold only positions from " +
                    std::to_string(s.sliding_from));
            }
        }
        int const kept_blocks = logical_blocks_for(length);
        auto const kept = static_cast<std::size_t>(kept_blocks) * group_count;
        for (std::size_t i = kept; i < s.table.size(); ++i) {
            if (s.table[i] != dropped) pool_.release(s.table[i]);
        }
        s.table.resize(kept);
        s.dropped_blocks = std::min(s.dropped_blocks, kept_blocks);
        if (length == 0) s.sliding_from = 0;
        s.reserved = length;
        for (int& w : s.written) w = std::min(w, length);
    }

    // Token eviction: keeps only the written positions at `kept` (ascending, distinct, each
    // below tokens(seq)), compacted so position i holds the i-th kept token in every layer, and
    // returns the blocks past kept.size() to the pool; the reservation shrinks to kept.size()
    // (reserve again before the next step). Keys keep the RoPE rotation of their original
    // positions (see ContiguousKvCache::retain_slots). A shared block about to receive a moved
    // token is copied first, so forks and the prefix cache keep their tokens; when the pool
    // cannot supply those copies nothing changes and tinfer::Error is thrown.
    // With sliding layers, the slots the next query's window sees (the last window - 1 kept)
    // must come from positions the sliding groups still hold (a policy that keeps at least the
    // last window - 1 tokens always does); otherwise tinfer::Error, and nothing changes. The
    // sliding groups then release the blocks before the new window.
    void retain_slots(int seq, std::span<int const> kept) {
        Sequence& s = live(seq);
        int const length = written_in_all_layers(s);
        for (std::size_t i = 0; i < kept.size(); ++i) {
            if (kept[i] < 0 || kept[i] >= length || (i > 0 && kept[i] <= kept[i - 1])) {
                throw std::logic_error(
                    "PagedKvCache::retain_slots needs ascending distinct positions below " +
                    std::to_string(length) + "; entry " + std::to_string(i) + " is " +
                    std::to_string(kept[i]));
            }
        }
        int const n = static_cast<int>(kept.size());
        int const new_blocks = logical_blocks_for(n);
        int const held_from = s.sliding_from;  // sliding groups hold these positions' KV
        int const new_dropped = window_first_block(n);
        if constexpr (has_sliding) {
            for (int i = std::max(0, n - sliding_window + 1); i < n; ++i) {
                if (kept[static_cast<std::size_t>(i)] < held_from) {
                    throw Error("PagedKvCache::retain_slots: slot " + std::to_string(i) +
                                " is inside the sliding window (" + std::to_string(sliding_window) +
                                " tokens) of the next query but would hold position " +
                                std::to_string(kept[static_cast<std::size_t>(i)]) +
                                ", whose sliding-layer KV was released; an eviction policy must "
                                "keep the last " +
                                std::to_string(sliding_window - 1) + " tokens");
                }
            }
        }
        // Entries that need a block of their own first: shared blocks that receive a moved
        // token (copied), and sliding blocks back inside the window that were released (fresh).
        std::vector<std::size_t> to_copy, to_allocate;  // table indices
        for (int j = 0; j < new_blocks; ++j) {
            bool receives = false;
            for (int i = j * BlockSize; i < std::min(n, (j + 1) * BlockSize); ++i) {
                receives = receives || kept[static_cast<std::size_t>(i)] != i;
            }
            for (int g = 0; g < group_count; ++g) {
                if (is_sliding_group(g) && j < new_dropped) continue;  // released below
                std::size_t const at = entry_index(j, g);
                if (s.table[at] == dropped) {
                    to_allocate.push_back(at);
                } else if (receives && pool_.is_shared(s.table[at])) {
                    to_copy.push_back(at);
                }
            }
        }
        int const wanted = static_cast<int>(to_copy.size() + to_allocate.size());
        if (wanted > available_blocks()) {
            throw Error("PagedKvCache::retain_slots: " + std::to_string(wanted) +
                        " blocks need copies or fresh room, the pool has " +
                        std::to_string(available_blocks()));
        }
        std::vector<ByteCopy> block_copies;
        for (std::size_t const at : to_copy)
            block_copies.push_back(copy_on_write(s.table[at], take_block()));
        // Before the moves: they read the copies.
        storage_.copy(block_copies);
        std::vector<ByteRange> zeros;
        for (std::size_t const at : to_allocate) {
            s.table[at] = take_block();
            zeros.push_back({.at = block_offset(s.table[at]), .bytes = bytes_per_block});
        }
        // One batch of moves and one of zeros, each submitted once (a launch each on a GPU).
        // They equal doing the moves and clears one at a time, in this order, because:
        //  - a table holds a block at most once, so (position, group) -> bytes is one-to-one;
        //  - kept[i] >= i: move i writes position i, and every later move j reads kept[j] >= j
        //    > i, so no move reads what an earlier one wrote (the batch's contract,
        //    block_storage.hpp: then in order equals all at once), and targets are distinct;
        //  - a cleared slot i (kept[i] < held_from) is no move's source: a sliding move reads
        //    kept[j] >= held_from > kept[i] >= i; nor is a fresh block (its positions lie below
        //    the old dropped_blocks * BlockSize <= held_from); so zeroing them all first, which
        //    the moves into fresh blocks need, changes nothing the moves read.
        std::vector<ByteCopy> moves;
        for (int i = 0; i < n; ++i) {
            int const from = kept[static_cast<std::size_t>(i)];
            if (from == i) continue;
            for (int g = 0; g < group_count; ++g) {
                if (is_sliding_group(g) && i / BlockSize < new_dropped) continue;
                if (is_sliding_group(g) && from < held_from) {
                    clear_token(s, g, i, zeros);  // outside the new window (checked above)
                } else {
                    move_token(s, g, from, i, moves);
                }
            }
        }
        storage_.zero(zeros);
        storage_.copy(moves);
        for (std::size_t at = static_cast<std::size_t>(new_blocks) * group_count;
             at < s.table.size(); ++at) {
            if (s.table[at] != dropped) pool_.release(s.table[at]);
        }
        s.table.resize(static_cast<std::size_t>(new_blocks) * group_count);
        if constexpr (has_sliding) {
            s.dropped_blocks = std::min(s.dropped_blocks, new_blocks);
            drop_before(s, new_dropped);
            s.dropped_blocks = new_dropped;
            // Slots whose source the sliding groups did not hold now hold zeros: the kept
            // positions below held_from (all outside the window, checked above).
            s.sliding_from =
                std::max(new_dropped * BlockSize,
                         static_cast<int>(std::lower_bound(kept.begin(), kept.end(), held_from) -
                                          kept.begin()));
        }
        s.reserved = n;
        s.written.fill(n);
    }

    // The sequence ended (or was preempted): its blocks return to the pool, except those the
    // prefix cache or other sequences still hold.
    void release(int seq) {
        Sequence& s = live(seq);
        for (BlockId const b : s.table) {
            if (b != dropped) pool_.release(b);
        }
        s = Sequence{};
        free_slots_.push_back(seq);
    }

    // Offers the sequence's full blocks to the prefix cache; tokens[i] is the token at position
    // i, and only positions written in every layer may be offered. Sliding blocks the sequence
    // has released are not offered, so offering a prompt's prefix right after its prefill keeps
    // the window at its end reusable.
    int cache_prefix(int seq, std::span<int const> tokens) {
        Sequence const& s = live(seq);
        if (static_cast<std::int64_t>(tokens.size()) > written_in_all_layers(s)) {
            throw std::logic_error("PagedKvCache::cache_prefix: " + std::to_string(tokens.size()) +
                                   " tokens offered, sequence has written " +
                                   std::to_string(written_in_all_layers(s)));
        }
        if constexpr (has_sliding) {
            // Blocks with positions before sliding_from (cleared by token eviction) would
            // offer KV the sliding layers no longer hold: those entries stay out.
            if (s.sliding_from > s.dropped_blocks * BlockSize) {
                std::vector<BlockId> offered = s.table;
                for (int j = 0;
                     j * BlockSize < s.sliding_from && j < logical_blocks_for(s.reserved); ++j) {
                    for (int g = 0; g < group_count; ++g) {
                        if (is_sliding_group(g)) offered[entry_index(j, g)] = dropped;
                    }
                }
                return prefix_.insert(tokens, offered, pool_);
            }
        }
        return prefix_.insert(tokens, s.table, pool_);
    }

    // More blocks `seq` needs to reserve `new_length` positions: new blocks, plus a copy of its
    // partly filled last block when that is shared, less the sliding blocks that reserve would
    // release first and that no one else holds (0 when it already has them; never negative, so
    // one sequence's release is never promised to another).
    int blocks_needed(int seq, int new_length) const {
        Sequence const& s = live(seq);
        if (new_length <= s.reserved) return 0;
        int needed =
            blocks_for(new_length) - static_cast<int>(s.table.size()) + copies_of_last_block(s);
        if constexpr (has_sliding) needed -= released_by_drop(s, drop_target(s));
        return std::max(0, needed);
    }

    // Blocks that would return to the pool if `seq` were released now (those it shares with
    // other sequences or the prefix cache would not).
    int reclaimable_blocks(int seq) const {
        auto const& table = live(seq).table;
        return static_cast<int>(std::count_if(table.begin(), table.end(), [&](BlockId b) {
            return b != dropped && pool_.ref_count(b) == 1;
        }));
    }

    // Blocks a reservation can take now: free ones and those the prefix cache would evict.
    int available_blocks() const { return pool_.free_blocks() + prefix_.evictable_blocks(pool_); }

    // Evicts up to `blocks` unreferenced prefix-cache blocks (with several layer groups, a
    // node's blocks go together, so up to group_count - 1 more); returns how many were freed.
    int evict_cached(int blocks) { return prefix_.evict(blocks, pool_); }

    // ---- the KvStore contract ----

    // k, v: [kv_heads][head_dim] for the token at `position`, which must be reserved and
    // leave no gap after the positions this layer holds (rewriting one is allowed), and, in a
    // sliding layer, lie in a block its group still holds.
    void write(int seq, int layer, int position, float const* k, float const* v) {
        Sequence& s = live(seq);
        if (layer < 0 || layer >= Cfg.layers || position < 0 || position >= s.reserved ||
            position > s.written[static_cast<std::size_t>(layer)]) {
            throw std::logic_error(
                "PagedKvCache::write at layer " + std::to_string(layer) + ", position " +
                std::to_string(position) + " of a sequence with " + std::to_string(s.reserved) +
                " reserved positions" +
                (layer >= 0 && layer < Cfg.layers
                     ? " and " + std::to_string(s.written[static_cast<std::size_t>(layer)]) +
                           " written in that layer"
                     : std::string(" (the model has ") + std::to_string(Cfg.layers) + " layers)"));
        }
        BlockId& block = s.table[entry_index(position / BlockSize, group_of(layer))];
        if constexpr (has_sliding) {
            if (block == dropped) {
                throw std::logic_error("PagedKvCache::write at layer " + std::to_string(layer) +
                                       ", position " + std::to_string(position) +
                                       ": the sliding layer released that block (its window "
                                       "had passed)");
            }
        }
        if (pool_.is_shared(block)) {
            auto const copy = allocate_block();
            if (!copy) throw no_block_to_copy(position);
            ByteCopy const block_copy = copy_on_write(block, *copy);
            storage_.copy(std::span(&block_copy, 1));
        }
        std::size_t const base = block_offset(block);
        auto const slot = static_cast<std::size_t>(position % BlockSize);
        // head_dim static: the static form measured 1.08-1.09x on int4 append at head_dim 64 and
        // 128 (AMD), 1.00-1.53x on fp32 and 1.06-1.24x on bf16 (Intel; bench/specialization,
        // docs/specialization.md).
        for (int h = 0; h < Cfg.kv_heads; ++h) {
            std::size_t const key_at = base + key_offset(layer, h, slot);
            std::size_t const value_at = base + value_offset(layer, h, slot);
            if constexpr (Storage::host_addressable) {
                // Encoded in place: the host path pays no staging copy.
                KCodec::template encode<Cfg.head_dim>(k + h * Cfg.head_dim,
                                                      storage_.data() + key_at);
                VCodec::template encode<Cfg.head_dim>(v + h * Cfg.head_dim,
                                                      storage_.data() + value_at);
            } else {
                std::array<std::byte, key_vector_bytes> key{};
                std::array<std::byte, value_vector_bytes> value{};
                KCodec::template encode<Cfg.head_dim>(k + h * Cfg.head_dim, key.data());
                VCodec::template encode<Cfg.head_dim>(v + h * Cfg.head_dim, value.data());
                storage_.write(key_at, key.data(), key.size());
                storage_.write(value_at, value.data(), value.size());
            }
        }
        int& written = s.written[static_cast<std::size_t>(layer)];
        written = std::max(written, position + 1);
    }

    // For a model that writes K/V into the storage itself (a GPU model's append kernel) rather
    // than through write(): before the writes, make_writable gives the sequence a block of its
    // own wherever positions [first_position, first_position + count) fall in a shared block,
    // in every group (the copy-on-write write() does lazily, for every layer at once); after
    // they succeeded, mark_written records them in every layer.
    //
    // The positions must be reserved, leave no gap after the positions every layer holds
    // (first_position <= tokens(seq)), and lie in blocks every group still holds (a sliding
    // group's released block is a logic_error, as in write()). When the pool cannot supply
    // the copies, tinfer::Error as from write(), and nothing changes.
    void make_writable(int seq, int first_position, int count) {
        Sequence& s = live(seq);
        int const end = first_position + count;
        if (first_position < 0 || count < 0 || end > s.reserved ||
            first_position > written_in_all_layers(s)) {
            throw std::logic_error(
                "PagedKvCache::make_writable of " + std::to_string(count) + " positions from " +
                std::to_string(first_position) + " in a sequence with " +
                std::to_string(s.reserved) + " reserved positions and " +
                std::to_string(written_in_all_layers(s)) + " written in every layer");
        }
        if (count == 0) return;
        std::vector<std::size_t> shared;  // table indices
        for (int j = first_position / BlockSize; j <= (end - 1) / BlockSize; ++j) {
            for (int g = 0; g < group_count; ++g) {
                BlockId const block = s.table[entry_index(j, g)];
                if constexpr (has_sliding) {
                    if (block == dropped) {
                        throw std::logic_error(
                            "PagedKvCache::make_writable from position " +
                            std::to_string(first_position) +
                            ": the sliding layers released the "
                            "block of position " +
                            std::to_string(std::max(first_position, j * BlockSize)) +
                            " (its window had passed)");
                    }
                }
                if (pool_.is_shared(block)) shared.push_back(entry_index(j, g));
            }
        }
        if (static_cast<int>(shared.size()) > available_blocks())
            throw no_block_to_copy(std::max(
                first_position, static_cast<int>(shared.front() / group_count) * BlockSize));
        std::vector<ByteCopy> block_copies;
        for (std::size_t const at : shared)
            block_copies.push_back(copy_on_write(s.table[at], take_block()));
        storage_.copy(block_copies);
    }

    // Every layer holds positions [0, end_position) (what write() records, for every layer at
    // once). A newly recorded position in a block the sequence does not own alone is a
    // logic_error: make_writable was not called for it, and the write went into shared bytes.
    void mark_written(int seq, int end_position) {
        Sequence& s = live(seq);
        if (end_position < 0 || end_position > s.reserved) {
            throw std::logic_error("PagedKvCache::mark_written up to position " +
                                   std::to_string(end_position) + " of a sequence with " +
                                   std::to_string(s.reserved) + " reserved positions");
        }
        int const from = written_in_all_layers(s);
        if (end_position <= from) return;  // every layer holds them already
        for (int j = from / BlockSize; j * BlockSize < end_position; ++j) {
            for (int g = 0; g < group_count; ++g) {
                BlockId const block = s.table[entry_index(j, g)];
                if (block == dropped || pool_.is_shared(block)) {
                    throw std::logic_error("PagedKvCache::mark_written up to position " +
                                           std::to_string(end_position) + ": logical block " +
                                           std::to_string(j) + " of group " + std::to_string(g) +
                                           (block == dropped ? " was released" : " is shared") +
                                           "; call make_writable before writing the positions");
                }
            }
        }
        for (int& written : s.written) written = std::max(written, end_position);
    }

    // Reads the bytes in place: only a storage in host memory.
    View view(int seq, int layer) const requires Storage::host_addressable {
        Sequence const& s = live(seq);
        return View(storage_.data(), s.table, s.written.at(static_cast<std::size_t>(layer)), layer);
    }

    // The blocks' bytes, [blocks][bytes_per_block], for a model that reads and writes them in
    // place (block b starts at b * bytes_per_block).
    Storage& storage() { return storage_; }
    Storage const& storage() const { return storage_; }

    // ---- moving a sequence's KV out and back (swap to host, prefill/decode hand-off) ----

    // Appends the bytes of the blocks holding the sequence's written positions to `out`, in
    // table order ([logical block][group]; a sliding group's blocks before the window of the
    // next query are left out: held_blocks_for(tokens) blocks in all), and returns how many
    // positions they hold. The sequence is left as it is.
    int export_blocks(int seq, std::vector<std::byte>& out) const {
        Sequence const& s = live(seq);
        int const tokens = written_in_all_layers(s);
        int const blocks = logical_blocks_for(tokens);
        int const first = window_first_block(tokens);
        for (int j = 0; j < blocks; ++j) {
            for (int g = 0; g < group_count; ++g) {
                if (is_sliding_group(g) && j < first) continue;
                std::size_t const at = out.size();
                out.resize(at + bytes_per_block);
                storage_.read(block_offset(s.table[entry_index(j, g)]), bytes_per_block,
                              out.data() + at);
            }
        }
        return tokens;
    }

    // A new sequence holding `tokens` positions whose blocks are `bytes` (as export_blocks wrote
    // them, from a cache of the same type). Returns nullopt, changing nothing, when the pool
    // cannot supply the blocks; a malformed payload is a tinfer::Error.
    std::optional<int> import_blocks(std::span<std::byte const> bytes, int tokens, int max_tokens) {
        check_admissible(max_tokens);
        if (tokens < 0 || tokens > max_tokens ||
            bytes.size() != static_cast<std::size_t>(held_blocks_for(tokens)) * bytes_per_block) {
            throw Error("PagedKvCache::import_blocks: " + std::to_string(bytes.size()) +
                        " bytes for " + std::to_string(tokens) + " tokens; expected " +
                        std::to_string(static_cast<std::size_t>(held_blocks_for(tokens)) *
                                       bytes_per_block) +
                        " (" + std::to_string(held_blocks_for(tokens)) + " blocks of " +
                        std::to_string(bytes_per_block) + ")");
        }
        if (held_blocks_for(tokens) > available_blocks()) return std::nullopt;
        int const blocks = logical_blocks_for(tokens);
        int const first = window_first_block(tokens);
        std::vector<BlockId> table(static_cast<std::size_t>(blocks) * group_count, dropped);
        std::size_t offset = 0;
        for (int j = 0; j < blocks; ++j) {
            for (int g = 0; g < group_count; ++g) {
                if (is_sliding_group(g) && j < first) continue;
                BlockId const block = take_block();
                storage_.write(block_offset(block), bytes.data() + offset, bytes_per_block);
                offset += bytes_per_block;
                table[entry_index(j, g)] = block;
            }
        }
        int const seq = start_sequence(std::move(table), tokens, max_tokens, first);
        // The payload does not say whether its sliding positions before the window were valid
        // (token eviction may have cleared them): only the window is vouched for.
        if constexpr (has_sliding) {
            Sequence& s = live(seq);
            s.sliding_from = std::max(s.sliding_from, std::max(0, tokens - sliding_window + 1));
        }
        return seq;
    }

    // ---- accounting ----

    // Positions with blocks behind them, written or about to be.
    int reserved(int seq) const { return live(seq).reserved; }
    // Positions every layer holds.
    int tokens(int seq) const { return written_in_all_layers(live(seq)); }
    // [logical block][group] -> physical block, `dropped` where a sliding group released it.
    std::span<BlockId const> block_table(int seq) const { return live(seq).table; }
    // Leading logical blocks whose sliding-group blocks were released (0 without sliding).
    int dropped_blocks(int seq) const { return live(seq).dropped_blocks; }
    // The first position whose KV the sliding layers hold (0 without sliding): at most the
    // start of the next query's window; earlier positions read zeros or stale values.
    int sliding_from(int seq) const { return live(seq).sliding_from; }
    bool is_live(int seq) const {
        return seq >= 0 && index(seq) < sequences_.size() && sequences_[index(seq)].live;
    }
    int live_sequences() const { return static_cast<int>(sequences_.size() - free_slots_.size()); }

    int total_blocks() const { return pool_.total_blocks(); }
    int free_blocks() const { return pool_.free_blocks(); }
    int used_blocks() const { return pool_.used_blocks(); }
    // Distinct blocks in live sequences' tables (a block shared by forks counts once): what
    // serving reports as KV usage. The rest of used_blocks() is held only by the prefix cache,
    // free to evict (vLLM counts those as free too).
    int sequence_blocks() const {
        std::vector<bool> seen(static_cast<std::size_t>(pool_.total_blocks()), false);
        int count = 0;
        for (Sequence const& s : sequences_) {
            if (!s.live) continue;
            for (BlockId const b : s.table) {
                if (b == dropped || seen[static_cast<std::size_t>(b)]) continue;
                seen[static_cast<std::size_t>(b)] = true;
                ++count;
            }
        }
        return count;
    }
    int prefix_only_blocks() const { return used_blocks() - sequence_blocks(); }
    // Positions the pool holds in every layer (with several groups: if every group kept them).
    std::int64_t capacity_tokens() const {
        return static_cast<std::int64_t>(pool_.total_blocks() / group_count) * BlockSize;
    }

    // Token slots of used blocks that a live sequence has reserved (written, or being written
    // this step), over all groups (a position counts once per group holding it); a block shared
    // by forks counts once, one held only by the prefix cache not.
    std::int64_t live_tokens() const {
        std::vector<int> filled(static_cast<std::size_t>(pool_.total_blocks()), 0);
        for (Sequence const& s : sequences_) {
            if (!s.live) continue;
            for (std::size_t i = 0; i < s.table.size(); ++i) {
                if (s.table[i] == dropped) continue;
                int const block = static_cast<int>(i / group_count);
                int const in_block = std::min<int>(BlockSize, s.reserved - block * BlockSize);
                int& f = filled[static_cast<std::size_t>(s.table[i])];
                f = std::max(f, in_block);
            }
        }
        std::int64_t total = 0;
        for (int const f : filled) total += f;
        return total;
    }

    // Share of the used blocks' token slots that hold live tokens (1 when nothing is used).
    double memory_utilization() const {
        std::int64_t const allocated = static_cast<std::int64_t>(used_blocks()) * BlockSize;
        return allocated == 0 ? 1.0
                              : static_cast<double>(live_tokens()) / static_cast<double>(allocated);
    }

    BlockPool const& pool() const { return pool_; }
    PrefixCache<BlockSize, group_count> const& prefix_cache() const { return prefix_; }

  private:
    struct Sequence {
        std::vector<BlockId> table;             // [logical block][group] -> physical block
        int reserved = 0;                       // positions 0 .. reserved-1 have blocks
        std::array<int, Cfg.layers> written{};  // [layers]: positions 0 .. written-1 hold KV
        int max_tokens = 0;
        int dropped_blocks = 0;  // sliding groups released logical blocks 0 .. this-1
        int sliding_from = 0;    // sliding groups hold the KV of positions from this one on
        bool live = false;
    };

    static constexpr std::size_t entry_index(int block, int group) {
        return static_cast<std::size_t>(block) * group_count + static_cast<std::size_t>(group);
    }

    static constexpr std::array<bool, group_count> sliding_groups_mask() {
        std::array<bool, group_count> mask{};
        for (int g = 0; g < group_count; ++g)
            mask[static_cast<std::size_t>(g)] = is_sliding_group(g);
        return mask;
    }

    // The prefix-cache path a sliding model can reuse: the deepest k blocks whose sliding
    // entries cover the window of position k*BlockSize; the sliding entries before that window
    // are left in the tree (not retained).
    static int usable_prefix(std::span<BlockId> path, int blocks) {
        if constexpr (!has_sliding) {
            return blocks;
        } else {
            for (int k = blocks; k > 0; --k) {
                int const first = window_first_block(static_cast<std::int64_t>(k) * BlockSize);
                bool usable = true;
                for (int j = 0; j < k && usable; ++j) {
                    for (int g = 0; g < group_count && usable; ++g) {
                        bool const needed = !is_sliding_group(g) || j >= first;
                        usable = !needed || path[entry_index(j, g)] != dropped;
                    }
                }
                if (!usable) continue;
                for (int j = 0; j < first; ++j) {
                    for (int g = 0; g < group_count; ++g) {
                        if (is_sliding_group(g)) path[entry_index(j, g)] = dropped;
                    }
                }
                return k;
            }
            return 0;
        }
    }

    // Copies of shared blocks the last, partly filled logical block needs before a write.
    int copies_of_last_block(Sequence const& s) const {
        if (s.reserved % BlockSize == 0) return 0;
        int copies = 0;
        std::size_t const last = s.table.size() - group_count;
        for (std::size_t g = 0; g < group_count; ++g) {
            BlockId const b = s.table[last + g];
            copies += b != dropped && pool_.is_shared(b) ? 1 : 0;
        }
        return copies;
    }

    // The dropped-block count a reservation moves to: before the window of the next query.
    static int drop_target(Sequence const& s) {
        return std::max(s.dropped_blocks, window_first_block(written_in_all_layers(s)));
    }

    // Sliding blocks that dropping up to logical block `target` would return to the pool.
    int released_by_drop(Sequence const& s, int target) const {
        int released = 0;
        for (int j = s.dropped_blocks; j < target; ++j) {
            for (int g = 0; g < group_count; ++g) {
                if (!is_sliding_group(g)) continue;
                BlockId const b = s.table[entry_index(j, g)];
                released += b != dropped && pool_.ref_count(b) == 1 ? 1 : 0;
            }
        }
        return released;
    }

    // Releases the sliding groups' blocks of logical blocks [dropped_blocks, target).
    void drop_before(Sequence& s, int target) {
        for (int j = s.dropped_blocks; j < target; ++j) {
            for (int g = 0; g < group_count; ++g) {
                if (!is_sliding_group(g)) continue;
                BlockId& b = s.table[entry_index(j, g)];
                if (b != dropped) pool_.release(b);
                b = dropped;
            }
        }
        s.dropped_blocks = std::max(s.dropped_blocks, target);
        s.sliding_from = std::max(s.sliding_from, s.dropped_blocks * BlockSize);
    }

    static int written_in_all_layers(Sequence const& s) {
        return *std::min_element(s.written.begin(), s.written.end());
    }

    static std::size_t index(int i) { return static_cast<std::size_t>(i); }

    static constexpr std::size_t block_offset(BlockId block) {
        return static_cast<std::size_t>(block) * bytes_per_block;
    }
    std::size_t storage_bytes() const {
        return static_cast<std::size_t>(pool_.total_blocks()) * bytes_per_block;
    }

    static Error no_block_to_copy(int position) {
        return Error("PagedKvCache: no free block to copy a shared block before writing position " +
                     std::to_string(position) +
                     "; reserve() the positions a step writes before writing them");
    }

    static int checked_block_count(std::size_t budget_bytes) {
        std::size_t const blocks = budget_bytes / bytes_per_block;
        if (blocks == 0) {
            throw Error("PagedKvCache: a budget of " + std::to_string(budget_bytes) +
                        " bytes holds no block of " + std::to_string(bytes_per_block) + " bytes");
        }
        return static_cast<int>(std::min<std::size_t>(blocks, std::numeric_limits<BlockId>::max()));
    }

    void check_admissible(int max_tokens) const {
        if (max_tokens <= 0) {
            throw RequestError("a request must allow at least one token, got max_tokens=" +
                               std::to_string(max_tokens));
        }
        if (max_tokens > Cfg.max_context) {
            throw RequestError("request of " + std::to_string(max_tokens) +
                               " tokens exceeds the model's context of " +
                               std::to_string(Cfg.max_context) + " tokens");
        }
        if (min_blocks_for(max_tokens) > pool_.total_blocks()) {
            throw RequestError("request of " + std::to_string(max_tokens) + " tokens needs " +
                               std::to_string(min_blocks_for(max_tokens)) + " KV blocks of " +
                               std::to_string(BlockSize) + " tokens, but the whole cache has " +
                               std::to_string(pool_.total_blocks()) + " blocks (" +
                               std::to_string(capacity_tokens()) + " tokens)");
        }
    }

    Sequence& live(int seq) {
        if (!is_live(seq))
            throw std::logic_error("PagedKvCache: sequence " + std::to_string(seq) +
                                   " is not live");
        return sequences_[index(seq)];
    }
    Sequence const& live(int seq) const {
        if (!is_live(seq))
            throw std::logic_error("PagedKvCache: sequence " + std::to_string(seq) +
                                   " is not live");
        return sequences_[index(seq)];
    }

    // A live sequence whose first `tokens` positions (all layers) are in `table`, the sliding
    // groups' entries of its first `dropped_blocks` logical blocks released.
    int start_sequence(std::vector<BlockId> table, int tokens, int max_tokens, int dropped_blocks) {
        int const seq = new_slot();
        Sequence& s = sequences_[index(seq)];
        s.table = std::move(table);
        s.reserved = tokens;
        s.written.fill(tokens);
        s.max_tokens = max_tokens;
        s.dropped_blocks = dropped_blocks;
        s.sliding_from = dropped_blocks * BlockSize;
        s.live = true;
        return seq;
    }

    int new_slot() {
        if (!free_slots_.empty()) {
            int const seq = free_slots_.back();
            free_slots_.pop_back();
            return seq;
        }
        sequences_.emplace_back();
        return static_cast<int>(sequences_.size() - 1);
    }

    // The allocator asks the prefix cache to give up its least recently used unreferenced
    // block before it reports the pool empty.
    std::optional<BlockId> allocate_block() {
        if (auto const block = pool_.allocate()) return block;
        if (prefix_.evict(1, pool_) == 0) return std::nullopt;
        return pool_.allocate();
    }

    // A block the caller has checked is available.
    BlockId take_block() {
        auto const block = allocate_block();
        if (!block) throw std::logic_error("PagedKvCache: the pool ran dry");
        return *block;
    }

    // Adds to `copies` the copies of group `group`'s K and V vectors of position `from` to
    // position `to`, whose block is the sequence's own.
    void move_token(Sequence const& s, int group, int from, int to,
                    std::vector<ByteCopy>& copies) const {
        std::size_t const source = block_offset(s.table[entry_index(from / BlockSize, group)]);
        std::size_t const target = block_offset(s.table[entry_index(to / BlockSize, group)]);
        auto const from_slot = static_cast<std::size_t>(from % BlockSize);
        auto const to_slot = static_cast<std::size_t>(to % BlockSize);
        for_each_layer_of(group, [&](int layer) {
            for (int h = 0; h < Cfg.kv_heads; ++h) {
                copies.push_back({.to = target + key_offset(layer, h, to_slot),
                                  .from = source + key_offset(layer, h, from_slot),
                                  .bytes = key_vector_bytes});
                copies.push_back({.to = target + value_offset(layer, h, to_slot),
                                  .from = source + value_offset(layer, h, from_slot),
                                  .bytes = value_vector_bytes});
            }
        });
    }

    // Adds to `ranges` group `group`'s K and V vectors at position `at` (a slot with nothing
    // to hold, to be zeroed).
    void clear_token(Sequence const& s, int group, int at, std::vector<ByteRange>& ranges) const {
        std::size_t const target = block_offset(s.table[entry_index(at / BlockSize, group)]);
        auto const slot = static_cast<std::size_t>(at % BlockSize);
        for_each_layer_of(group, [&](int layer) {
            for (int h = 0; h < Cfg.kv_heads; ++h) {
                ranges.push_back(
                    {.at = target + key_offset(layer, h, slot), .bytes = key_vector_bytes});
                ranges.push_back(
                    {.at = target + value_offset(layer, h, slot), .bytes = value_vector_bytes});
            }
        });
    }

    template <class F>
    static void for_each_layer_of(int group, F&& f) {
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            if (group_of(layer) == group) f(layer);
        }
    }

    // Copy-on-write: `block` (shared) is replaced in the caller's table by `copy`, a fresh
    // block; returns the copy that gives it the same bytes, for the caller's batch. The other
    // owners keep the original; when the prefix cache was the only other one, a later
    // allocation may evict it and make it a later copy's target in the same batch: a later
    // copy writing what an earlier one read, which a batch allows (block_storage.hpp).
    ByteCopy copy_on_write(BlockId& block, BlockId copy) {
        ByteCopy const bytes{
            .to = block_offset(copy), .from = block_offset(block), .bytes = bytes_per_block};
        pool_.release(block);
        block = copy;
        return bytes;
    }

    BlockPool pool_;
    PrefixCache<BlockSize, group_count> prefix_;
    Storage storage_;  // [blocks][bytes_per_block]
    std::vector<Sequence> sequences_;
    std::vector<int> free_slots_;
};

}  // namespace tinfer::kv
