#pragma once
// PagedAttention's KV cache: memory is a pool of fixed-size blocks of BlockSize tokens, and a
// sequence is a block table mapping its logical blocks to physical ones, so no sequence
// reserves memory it does not use (only its last block is partly empty). Blocks are shared by
// reference count: `fork` gives n samples of one prompt the prompt's blocks, the prefix cache
// gives a new request the blocks of a prompt prefix seen before, and a sequence about to write
// into a shared block first copies it (copy-on-write).
//
// Storage of one block, for every layer: the K vectors of each KV head for the block's tokens,
// then the V vectors likewise: [layers][K, V][kv_heads][BlockSize][vector bytes]. A head's
// tokens are adjacent, so a view gathers a run of tokens block by block.
//
// Sequences are slots (ints) handed out by `admit`; the caller (scheduler) makes room with
// `reserve` before the model writes, so `write` (the KvStore contract) never allocates except
// to copy a shared block it was not warned about. As in ContiguousKvCache, each layer counts
// the positions written to it, in order, and a view covers exactly those: a position reserved
// but not yet written is never attended to.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/kv/block_pool.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/prefix_cache.hpp>

namespace tinfer::kv {

// A sequence admitted by PagedKvCache::admit with a prompt.
struct Admission {
    int seq = -1;           // the sequence's slot
    int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache: skip them
};

template <ModelConfig Cfg, int BlockSize, KvCodec<Cfg.head_dim> KCodec = Fp32Codec,
          KvCodec<Cfg.head_dim> VCodec = KCodec>
requires ModelShape<Cfg>
class PagedKvCache {
    static_assert(BlockSize > 0, "PagedKvCache: BlockSize must be positive");

  public:
    static constexpr ModelConfig config = Cfg;
    static constexpr int block_size = BlockSize;
    static constexpr std::size_t key_vector_bytes = KCodec::template vector_bytes<Cfg.head_dim>;
    static constexpr std::size_t value_vector_bytes = VCodec::template vector_bytes<Cfg.head_dim>;
    // One token of one layer: K and V of every KV head.
    static constexpr std::size_t layer_token_bytes =
        static_cast<std::size_t>(Cfg.kv_heads) * (key_vector_bytes + value_vector_bytes);
    static constexpr std::size_t bytes_per_token = Cfg.layers * layer_token_bytes;
    static constexpr std::size_t bytes_per_block = bytes_per_token * BlockSize;

    // Blocks to hold `tokens` tokens.
    static constexpr int blocks_for(std::int64_t tokens) {
        return static_cast<int>((tokens + BlockSize - 1) / BlockSize);
    }

    // One sequence's K and V for one layer, decoded to float (satisfies KvView). It reads the
    // block table in place: valid until that sequence is next reserved, truncated or released.
    class View {
      public:
        int tokens() const { return tokens_; }
        void load_keys(int kv_head, int first, int count, float* out) const {
            load<KCodec, key_vector_bytes>(key_offset(kv_head), first, count, out);
        }
        void load_values(int kv_head, int first, int count, float* out) const {
            load<VCodec, value_vector_bytes>(value_offset(kv_head), first, count, out);
        }

      private:
        friend class PagedKvCache;
        View(std::byte const* storage, std::span<BlockId const> table, int tokens, int layer)
            : storage_(storage), table_(table), tokens_(tokens), layer_(layer) {}

        std::size_t key_offset(int kv_head) const {
            return PagedKvCache::key_offset(layer_, kv_head, 0);
        }
        std::size_t value_offset(int kv_head) const {
            return PagedKvCache::value_offset(layer_, kv_head, 0);
        }

        // out: [count][head_dim], tokens first .. first+count-1 of this head.
        template <class Codec, std::size_t VectorBytes>
        void load(std::size_t head_offset, int first, int count, float* out) const {
            int position = first;
            int const end = first + count;
            while (position < end) {
                int const slot = position % BlockSize;
                int const run = std::min(end - position, BlockSize - slot);  // within one block
                std::byte const* vector =
                    storage_ +
                    static_cast<std::size_t>(table_[position / BlockSize]) * bytes_per_block +
                    head_offset + static_cast<std::size_t>(slot) * VectorBytes;
                for (int i = 0; i < run; ++i, vector += VectorBytes, out += Cfg.head_dim) {
                    Codec::template decode<Cfg.head_dim>(vector, out);
                }
                position += run;
            }
        }

        std::byte const* storage_;
        std::span<BlockId const> table_;
        int tokens_;
        int layer_;
    };

    // As many blocks as `budget_bytes` holds. A budget below one block is a configuration
    // error (tinfer::Error).
    explicit PagedKvCache(std::size_t budget_bytes) : pool_(checked_block_count(budget_bytes)) {
        storage_.resize(static_cast<std::size_t>(pool_.total_blocks()) * bytes_per_block);
    }

    // ---- sequences ----

    // A new, empty sequence that will hold at most `max_tokens` tokens (prompt and output).
    // A request the whole pool could never hold, or longer than the model's context, is
    // refused here with tinfer::RequestError: admitting it would only fail later, after work.
    int admit(int max_tokens) {
        check_admissible(max_tokens);
        return start_sequence({}, 0, max_tokens);
    }

    // As admit(max_tokens), and starts the sequence with the longest cached prefix of the
    // prompt. At least the prompt's last token is left to compute: the model needs its logits
    // to produce the first output token.
    Admission admit(std::span<int const> prompt, int max_tokens) {
        check_admissible(max_tokens);
        if (static_cast<std::int64_t>(prompt.size()) > max_tokens) {
            throw RequestError("prompt of " + std::to_string(prompt.size()) +
                               " tokens exceeds the request's " + std::to_string(max_tokens) +
                               "-token limit");
        }
        std::size_t const matchable = prompt.empty() ? 0 : prompt.size() - 1;
        auto match = prefix_.match(prompt.first(matchable), pool_);
        int const seq = start_sequence(std::move(match.blocks), match.tokens, max_tokens);
        return {.seq = seq, .cached_tokens = match.tokens};
    }

    // Makes positions [reserved, new_length) writable: allocates the blocks they fall in, and
    // copies the partly filled last block if it is shared. Returns false, changing nothing,
    // when the pool cannot supply the blocks even after evicting the prefix cache: the caller
    // preempts someone and retries. A shorter new_length is a no-op.
    bool reserve(int seq, int new_length) {
        Sequence& s = live(seq);
        if (new_length > s.max_tokens) {
            throw std::logic_error("PagedKvCache::reserve: " + std::to_string(new_length) +
                                   " tokens exceed the " + std::to_string(s.max_tokens) +
                                   " the sequence was admitted with");
        }
        if (new_length <= s.reserved) return true;
        bool const copy_last = needs_copy_of_last_block(s);
        int const needed = blocks_needed(seq, new_length);
        // Refuse before evicting anything from the prefix cache for a growth that cannot fit.
        if (needed > pool_.free_blocks() && needed > available_blocks()) return false;

        std::vector<BlockId> fresh;
        fresh.reserve(static_cast<std::size_t>(needed));
        for (int i = 0; i < needed; ++i) {
            auto const block = allocate_block();
            if (!block) {
                throw std::logic_error("PagedKvCache::reserve: the pool ran dry after " +
                                       std::to_string(fresh.size()) + " of " +
                                       std::to_string(needed) + " blocks that were available");
            }
            fresh.push_back(*block);
        }
        auto next = fresh.begin();
        if (copy_last) replace_with_copy(s.table.back(), *next++);
        s.table.insert(s.table.end(), next, fresh.end());
        s.reserved = new_length;
        return true;
    }

    // A new sequence sharing every block of `parent` (n samples of one prompt). Allocates
    // nothing: the first write into a shared block copies it.
    int fork(int parent) {
        Sequence const& source = live(parent);
        Sequence child = source;
        for (BlockId const b : child.table) pool_.retain(b);
        int const seq = new_slot();
        sequences_[index(seq)] = std::move(child);
        return seq;
    }

    // Keeps the first `length` positions (rejected speculative tokens are dropped); blocks
    // past them go back to the pool (or stay with their other owners). A length at or past
    // the reservation changes nothing.
    void truncate(int seq, int length) {
        Sequence& s = live(seq);
        if (length < 0) {
            throw std::logic_error("PagedKvCache::truncate to " + std::to_string(length) +
                                   " tokens");
        }
        if (length >= s.reserved) return;
        auto const kept = static_cast<std::size_t>(blocks_for(length));
        for (std::size_t i = kept; i < s.table.size(); ++i) pool_.release(s.table[i]);
        s.table.resize(kept);
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
        // Blocks that receive a moved token and are shared: each needs a private copy first.
        std::vector<std::size_t> to_copy;
        for (std::size_t i = 0; i < kept.size(); ++i) {
            std::size_t const block = i / BlockSize;
            if (kept[i] != static_cast<int>(i) && pool_.is_shared(s.table[block]) &&
                (to_copy.empty() || to_copy.back() != block)) {
                to_copy.push_back(block);
            }
        }
        if (static_cast<int>(to_copy.size()) > available_blocks()) {
            throw Error("PagedKvCache::retain_slots: " + std::to_string(to_copy.size()) +
                        " shared blocks need copies, the pool has " +
                        std::to_string(available_blocks()));
        }
        for (std::size_t const block : to_copy) {
            auto const copy = allocate_block();
            if (!copy) {
                throw std::logic_error("PagedKvCache::retain_slots: the pool ran dry");
            }
            replace_with_copy(s.table[block], *copy);
        }
        // kept[i] >= i: moving forward never overwrites a token still to be moved.
        for (std::size_t i = 0; i < kept.size(); ++i) {
            if (kept[i] != static_cast<int>(i)) move_token(s, kept[i], static_cast<int>(i));
        }
        int const new_length = static_cast<int>(kept.size());
        auto const blocks = static_cast<std::size_t>(blocks_for(new_length));
        for (std::size_t i = blocks; i < s.table.size(); ++i) pool_.release(s.table[i]);
        s.table.resize(blocks);
        s.reserved = new_length;
        s.written.fill(new_length);
    }

    // The sequence ended (or was preempted): its blocks return to the pool, except those the
    // prefix cache or other sequences still hold.
    void release(int seq) {
        Sequence& s = live(seq);
        for (BlockId const b : s.table) pool_.release(b);
        s = Sequence{};
        free_slots_.push_back(seq);
    }

    // Offers the sequence's full blocks to the prefix cache; tokens[i] is the token at position
    // i, and only positions written in every layer may be offered.
    int cache_prefix(int seq, std::span<int const> tokens) {
        Sequence const& s = live(seq);
        if (static_cast<std::int64_t>(tokens.size()) > written_in_all_layers(s)) {
            throw std::logic_error("PagedKvCache::cache_prefix: " + std::to_string(tokens.size()) +
                                   " tokens offered, sequence has written " +
                                   std::to_string(written_in_all_layers(s)));
        }
        return prefix_.insert(tokens, s.table, pool_);
    }

    // More blocks `seq` needs to reserve `new_length` positions: new blocks, plus a copy of its
    // partly filled last block when that is shared (0 when it already has them).
    int blocks_needed(int seq, int new_length) const {
        Sequence const& s = live(seq);
        if (new_length <= s.reserved) return 0;
        return blocks_for(new_length) - static_cast<int>(s.table.size()) +
               (needs_copy_of_last_block(s) ? 1 : 0);
    }

    // Blocks that would return to the pool if `seq` were released now (those it shares with
    // other sequences or the prefix cache would not).
    int reclaimable_blocks(int seq) const {
        auto const& table = live(seq).table;
        return static_cast<int>(std::count_if(table.begin(), table.end(),
                                              [&](BlockId b) { return pool_.ref_count(b) == 1; }));
    }

    // Blocks a reservation can take now: free ones and those the prefix cache would evict.
    int available_blocks() const { return pool_.free_blocks() + prefix_.evictable_blocks(pool_); }

    // Evicts up to `blocks` unreferenced prefix-cache blocks; returns how many were freed.
    int evict_cached(int blocks) { return prefix_.evict(blocks, pool_); }

    // ---- the KvStore contract ----

    // k, v: [kv_heads][head_dim] for the token at `position`, which must be reserved and
    // leave no gap after the positions this layer holds (rewriting one is allowed).
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
        BlockId& block = s.table[static_cast<std::size_t>(position / BlockSize)];
        if (pool_.is_shared(block)) {
            auto const copy = allocate_block();
            if (!copy) {
                throw Error(
                    "PagedKvCache: no free block to copy a shared block before writing "
                    "position " +
                    std::to_string(position) +
                    "; reserve() the positions a step writes before writing them");
            }
            replace_with_copy(block, *copy);
        }
        std::byte* base = storage_.data() + static_cast<std::size_t>(block) * bytes_per_block;
        auto const slot = static_cast<std::size_t>(position % BlockSize);
        for (int h = 0; h < Cfg.kv_heads; ++h) {
            KCodec::template encode<Cfg.head_dim>(k + h * Cfg.head_dim,
                                                  base + key_offset(layer, h, slot));
            VCodec::template encode<Cfg.head_dim>(v + h * Cfg.head_dim,
                                                  base + value_offset(layer, h, slot));
        }
        int& written = s.written[static_cast<std::size_t>(layer)];
        written = std::max(written, position + 1);
    }

    View view(int seq, int layer) const {
        Sequence const& s = live(seq);
        return View(storage_.data(), s.table, s.written.at(static_cast<std::size_t>(layer)), layer);
    }

    // ---- moving a sequence's KV out and back (swap to host, prefill/decode hand-off) ----

    // Appends the bytes of the blocks holding the sequence's written positions to `out`, in
    // table order, and returns how many positions they hold. The sequence is left as it is.
    int export_blocks(int seq, std::vector<std::byte>& out) const {
        Sequence const& s = live(seq);
        int const tokens = written_in_all_layers(s);
        auto const blocks = static_cast<std::size_t>(blocks_for(tokens));
        for (std::size_t i = 0; i < blocks; ++i) {
            std::byte const* block = storage_.data() + static_cast<std::size_t>(s.table[i]) *
                                                           bytes_per_block;
            out.insert(out.end(), block, block + bytes_per_block);
        }
        return tokens;
    }

    // A new sequence holding `tokens` positions whose blocks are `bytes` (as export_blocks wrote
    // them, from a cache of the same type). Returns nullopt, changing nothing, when the pool
    // cannot supply the blocks; a malformed payload is a tinfer::Error.
    std::optional<int> import_blocks(std::span<std::byte const> bytes, int tokens, int max_tokens) {
        check_admissible(max_tokens);
        auto const blocks = static_cast<std::size_t>(blocks_for(tokens));
        if (tokens < 0 || tokens > max_tokens || bytes.size() != blocks * bytes_per_block) {
            throw Error("PagedKvCache::import_blocks: " + std::to_string(bytes.size()) +
                        " bytes for " + std::to_string(tokens) + " tokens; expected " +
                        std::to_string(blocks * bytes_per_block) + " (" +
                        std::to_string(blocks) + " blocks of " + std::to_string(bytes_per_block) +
                        ")");
        }
        if (static_cast<int>(blocks) > available_blocks()) return std::nullopt;
        int const seq = start_sequence({}, 0, max_tokens);
        if (!reserve(seq, tokens)) {
            release(seq);
            return std::nullopt;
        }
        Sequence& s = live(seq);
        for (std::size_t i = 0; i < blocks; ++i) {
            std::memcpy(storage_.data() + static_cast<std::size_t>(s.table[i]) * bytes_per_block,
                        bytes.data() + i * bytes_per_block, bytes_per_block);
        }
        s.written.fill(tokens);
        return seq;
    }

    // ---- accounting ----

    // Positions with blocks behind them, written or about to be.
    int reserved(int seq) const { return live(seq).reserved; }
    // Positions every layer holds.
    int tokens(int seq) const { return written_in_all_layers(live(seq)); }
    std::span<BlockId const> block_table(int seq) const { return live(seq).table; }
    bool is_live(int seq) const {
        return seq >= 0 && index(seq) < sequences_.size() && sequences_[index(seq)].live;
    }
    int live_sequences() const { return static_cast<int>(sequences_.size() - free_slots_.size()); }

    int total_blocks() const { return pool_.total_blocks(); }
    int free_blocks() const { return pool_.free_blocks(); }
    int used_blocks() const { return pool_.used_blocks(); }
    std::int64_t capacity_tokens() const {
        return static_cast<std::int64_t>(pool_.total_blocks()) * BlockSize;
    }

    // Token slots of used blocks that a live sequence has reserved (written, or being written
    // this step); a block shared by forks counts once, one held only by the prefix cache not.
    std::int64_t live_tokens() const {
        std::vector<int> filled(static_cast<std::size_t>(pool_.total_blocks()), 0);
        for (Sequence const& s : sequences_) {
            if (!s.live) continue;
            for (std::size_t i = 0; i < s.table.size(); ++i) {
                int const in_block =
                    std::min<int>(BlockSize, s.reserved - static_cast<int>(i) * BlockSize);
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
    PrefixCache<BlockSize> const& prefix_cache() const { return prefix_; }

  private:
    struct Sequence {
        std::vector<BlockId> table;             // logical block i -> physical block
        int reserved = 0;                       // positions 0 .. reserved-1 have blocks
        std::array<int, Cfg.layers> written{};  // [layers]: positions 0 .. written-1 hold KV
        int max_tokens = 0;
        bool live = false;
    };

    bool needs_copy_of_last_block(Sequence const& s) const {
        return s.reserved % BlockSize != 0 && pool_.is_shared(s.table.back());
    }

    static int written_in_all_layers(Sequence const& s) {
        return *std::min_element(s.written.begin(), s.written.end());
    }

    static std::size_t index(int i) { return static_cast<std::size_t>(i); }

    // Byte offsets inside a block.
    static constexpr std::size_t layer_bytes = layer_token_bytes * BlockSize;
    static constexpr std::size_t key_offset(int layer, int kv_head, std::size_t slot) {
        return static_cast<std::size_t>(layer) * layer_bytes +
               (static_cast<std::size_t>(kv_head) * BlockSize + slot) * key_vector_bytes;
    }
    static constexpr std::size_t value_offset(int layer, int kv_head, std::size_t slot) {
        return static_cast<std::size_t>(layer) * layer_bytes +
               static_cast<std::size_t>(Cfg.kv_heads) * BlockSize * key_vector_bytes +
               (static_cast<std::size_t>(kv_head) * BlockSize + slot) * value_vector_bytes;
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
        if (blocks_for(max_tokens) > pool_.total_blocks()) {
            throw RequestError("request of " + std::to_string(max_tokens) + " tokens needs " +
                               std::to_string(blocks_for(max_tokens)) + " KV blocks of " +
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

    // A live sequence whose first `tokens` positions (all layers) are in `table`.
    int start_sequence(std::vector<BlockId> table, int tokens, int max_tokens) {
        int const seq = new_slot();
        Sequence& s = sequences_[index(seq)];
        s.table = std::move(table);
        s.reserved = tokens;
        s.written.fill(tokens);
        s.max_tokens = max_tokens;
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

    // Copies every layer's K and V vectors of position `from` to position `to`, whose block is
    // the sequence's own.
    void move_token(Sequence const& s, int from, int to) {
        std::byte const* source =
            storage_.data() +
            static_cast<std::size_t>(s.table[static_cast<std::size_t>(from / BlockSize)]) *
                bytes_per_block;
        std::byte* target =
            storage_.data() +
            static_cast<std::size_t>(s.table[static_cast<std::size_t>(to / BlockSize)]) *
                bytes_per_block;
        auto const from_slot = static_cast<std::size_t>(from % BlockSize);
        auto const to_slot = static_cast<std::size_t>(to % BlockSize);
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            for (int h = 0; h < Cfg.kv_heads; ++h) {
                std::memcpy(target + key_offset(layer, h, to_slot),
                            source + key_offset(layer, h, from_slot), key_vector_bytes);
                std::memcpy(target + value_offset(layer, h, to_slot),
                            source + value_offset(layer, h, from_slot), value_vector_bytes);
            }
        }
    }

    // Copy-on-write: `block` (shared) is replaced in the caller's table by `copy`, a fresh
    // block holding the same bytes; the other owners keep the original.
    void replace_with_copy(BlockId& block, BlockId copy) {
        std::memcpy(storage_.data() + static_cast<std::size_t>(copy) * bytes_per_block,
                    storage_.data() + static_cast<std::size_t>(block) * bytes_per_block,
                    bytes_per_block);
        pool_.release(block);
        block = copy;
    }

    BlockPool pool_;
    PrefixCache<BlockSize> prefix_;
    std::vector<std::byte> storage_;  // [blocks][bytes_per_block]
    std::vector<Sequence> sequences_;
    std::vector<int> free_slots_;
};

}  // namespace tinfer::kv
