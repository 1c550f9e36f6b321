// Property test of the paged KV cache: long runs of random operations (admit with prefix
// matching, reserve and write, fork, rewriting a token in a shared block, release, caching a
// prefix, prefix-cache eviction, truncation, preemption by recompute, swap out and back in,
// token eviction with retain_slots), with every invariant checked after each one:
//   - each block's reference count equals the number of block-table entries holding it plus
//     the prefix cache's holding;
//   - the free list holds exactly the blocks with no owner, each once;
//   - every table has exactly the entries its reserved length needs; with sliding layers (the
//     hybrid cache), only sliding groups' entries are released, only before the window of the
//     next query, and the window itself is always held;
//   - every live sequence reads back, bitwise, the KV a shadow model says it wrote (for a
//     sliding layer: every position of the next query's window), and zeros where a sliding
//     group released the block, even through loads that start below the window;
//   - when everything finishes and the cache is evicted, every block is free.
// The KV of a position is a pure function of the tokens up to it (as in a real model), so a
// prefix-cache hit must return the very floats the sequence would have computed itself.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include <tinfer/kv/paged_cache.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::kv;

namespace {

constexpr ModelConfig tiny{.layers = 2,
                           .hidden = 8,
                           .heads = 2,
                           .kv_heads = 1,
                           .head_dim = 4,
                           .ffn = 8,
                           .vocab = 8,
                           .max_context = 96,
                           .weights = DType::f32};

// Two kinds of layers: 0, 1, 3, 4 slide over 8 tokens, 2 and 5 attend globally; groups of two
// layers: {0, 1} sliding, {2, 5} global, {3, 4} sliding.
constexpr ModelConfig hybrid{.layers = 6,
                             .hidden = 32,
                             .heads = 2,
                             .kv_heads = 1,
                             .head_dim = 16,
                             .ffn = 32,
                             .vocab = 8,
                             .max_context = 96,
                             .weights = DType::f32,
                             .sliding_window = 8,
                             .arch = {.global_every = 3}};
static_assert(PagedKvCache<hybrid, 4>::group_count == 3);
static_assert(PagedKvCache<hybrid, 4>::layers_per_group == 2);
static_assert(PagedKvCache<tiny, 4>::group_count == 1 && !PagedKvCache<tiny, 4>::has_sliding);

constexpr int max_live = 8;
constexpr int max_swapped = 3;

std::uint64_t splitmix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// What a sequence holds according to the operations applied to it.
template <ModelConfig Cfg>
struct Shadow {
    static constexpr int kv_width = Cfg.kv_width();
    static constexpr int floats_per_position = Cfg.layers * 2 * kv_width;  // [layers][K, V][kv]
    std::vector<int> tokens;                 // tokens[p]: the token at written position p
    std::vector<std::uint64_t> prefix_hash;  // of tokens[0..p]
    std::vector<std::array<float, floats_per_position>> kv;
    int reserved = 0;
    int max_tokens = 0;
    // retain_slots compacted it: its KV is no longer a function of its tokens, so it is never
    // offered to the prefix cache (as the engine does).
    bool evicted = false;

    int written() const { return static_cast<int>(tokens.size()); }

    // Sets position p (== written() to append, == written()-1 to rewrite the last) to `token`.
    void set(int p, int token) {
        std::uint64_t const before = p == 0 ? 0x1234 : prefix_hash[static_cast<std::size_t>(p - 1)];
        std::uint64_t const hash =
            splitmix(before ^ static_cast<std::uint64_t>(token) * 0x100000001b3ull);
        std::array<float, floats_per_position> values;
        for (int i = 0; i < floats_per_position; ++i) {
            std::uint64_t const bits = splitmix(hash + static_cast<std::uint64_t>(i));
            values[static_cast<std::size_t>(i)] =
                static_cast<float>(bits >> 40) / float(1 << 23) - 1.0f;
        }
        tokens.resize(static_cast<std::size_t>(p));
        prefix_hash.resize(static_cast<std::size_t>(p));
        kv.resize(static_cast<std::size_t>(p));
        tokens.push_back(token);
        prefix_hash.push_back(hash);
        kv.push_back(values);
    }
    void truncate(int length) {
        auto const n = static_cast<std::size_t>(std::min(length, written()));
        tokens.resize(n);
        prefix_hash.resize(n);
        kv.resize(n);
        reserved = std::min(reserved, length);
    }
    void retain(std::span<int const> kept) {
        Shadow next = *this;
        next.tokens.clear();
        next.prefix_hash.clear();
        next.kv.clear();
        for (int const p : kept) {
            next.tokens.push_back(tokens[static_cast<std::size_t>(p)]);
            next.prefix_hash.push_back(prefix_hash[static_cast<std::size_t>(p)]);
            next.kv.push_back(kv[static_cast<std::size_t>(p)]);
        }
        next.reserved = static_cast<int>(kept.size());
        next.evicted = true;
        *this = std::move(next);
    }
    float const* keys(int p, int layer) const {
        return kv[static_cast<std::size_t>(p)].data() + layer * 2 * kv_width;
    }
    float const* values(int p, int layer) const { return keys(p, layer) + kv_width; }
};

// How often the interesting paths ran; each must have run for the test to mean anything.
struct Coverage {
    int failed_reserves = 0;
    int prefix_hits = 0;
    int window_hits = 0;  // hits that start without the sliding blocks before their window
    int copies_on_write = 0;
    int refused_writes = 0;
    int evictions = 0;
    int forks = 0;
    int truncations = 0;
    int refused_truncations = 0;  // below the sliding window's released blocks
    int recomputes = 0;
    int recompute_hits = 0;
    int swap_outs = 0;
    int swap_ins = 0;
    int refused_swap_ins = 0;
    int token_evictions = 0;
    int refused_token_evictions = 0;  // a kept slot in the window whose KV was released
    int released_blocks = 0;          // sliding blocks a growing sequence gave back
};

template <ModelConfig Cfg, int BlockSize>
class PropertyRun {
  public:
    using Cache = PagedKvCache<Cfg, BlockSize>;
    using Groups = LayerGroups<Cfg>;
    using Seq = Shadow<Cfg>;
    static constexpr int G = Cache::group_count;
    static constexpr int window = Cache::sliding_window;

    PropertyRun(std::uint64_t seed, int pool_blocks)
        : rng_(testing::seeded_rng(seed)), cache_(Cache::bytes_per_block * pool_blocks) {
        // A few shared beginnings (system prompts) so prefixes repeat across requests.
        for (auto& base : bases_) {
            for (int i = 0; i < 48; ++i) base.push_back(uniform(0, Cfg.vocab - 1));
        }
    }

    Coverage run(int operations) {
        for (int op = 0; op < operations; ++op) {
            step();
            check_invariants(op);
            if (op % 20000 == 19999) drain();
        }
        drain();
        return coverage_;
    }

  private:
    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    int pick_live() {
        auto it = shadows_.begin();
        std::advance(it, uniform(0, static_cast<int>(shadows_.size()) - 1));
        return it->first;
    }

    void step() {
        int const choice = uniform(0, 99);
        last_choice_ = choice;
        if (shadows_.empty() || (choice < 13 && shadows_.size() < max_live)) return admit();
        if (choice < 16) return swap_in();
        int const seq = pick_live();
        if (choice < 44) return append(seq);
        if (choice < 51) return shadows_.size() < max_live ? fork(seq) : release(seq);
        if (choice < 58) return rewrite_last(seq);
        if (choice < 66) return release(seq);
        if (choice < 72) return cache_prefix(seq);
        if (choice < 76) return evict();
        if (choice < 81) return truncate(seq);
        if (choice < 85) return recompute(seq);
        if (choice < 89) return swap_out(seq);
        return evict_tokens(seq);
    }

    void admit() {
        auto const& base = bases_[static_cast<std::size_t>(uniform(0, 3))];
        std::vector<int> prompt(base.begin(), base.begin() + uniform(1, 40));
        for (int i = uniform(0, 10); i > 0; --i) prompt.push_back(uniform(0, Cfg.vocab - 1));
        int const max_tokens =
            std::min<int>(Cfg.max_context, static_cast<int>(prompt.size()) + uniform(0, 40));
        admit_prompt(prompt, max_tokens);
    }

    // Admits `prompt` with the prefix cache and prefills the rest; returns the cached tokens,
    // or -1 when the sequence did not survive (preempted before it ran, or a write refused).
    int admit_prompt(std::vector<int> const& prompt, int max_tokens) {
        int const free_before = cache_.free_blocks();
        auto const admission = cache_.admit(prompt, max_tokens);
        BOOST_REQUIRE(admission.cached_tokens % BlockSize == 0);
        BOOST_REQUIRE(admission.cached_tokens < static_cast<int>(prompt.size()));
        BOOST_REQUIRE(cache_.free_blocks() == free_before);  // a hit only retains
        BOOST_REQUIRE(cache_.dropped_blocks(admission.seq) ==
                      Cache::window_first_block(admission.cached_tokens));
        coverage_.prefix_hits += admission.cached_tokens > 0;
        coverage_.window_hits +=
            admission.cached_tokens > 0 && cache_.dropped_blocks(admission.seq) > 0;
        Seq& s = shadows_[admission.seq];
        s = Seq{};
        s.max_tokens = max_tokens;
        for (int p = 0; p < admission.cached_tokens; ++p)
            s.set(p, prompt[static_cast<std::size_t>(p)]);
        s.reserved = admission.cached_tokens;
        check_data(-1, admission.seq, s);  // the hit's window holds the prompt's own KV
        if (!reserve(admission.seq, static_cast<int>(prompt.size()))) {
            release(admission.seq);  // preempted before it ran
            return -1;
        }
        if (!write_tokens(admission.seq, std::span<int const>(prompt).subspan(
                                             static_cast<std::size_t>(admission.cached_tokens))))
            return -1;
        if (uniform(0, 1) == 0) cache_prefix(admission.seq);
        return admission.cached_tokens;
    }

    // Reserves, and checks that a refusal changed nothing of the sequence.
    bool reserve(int seq, int length) {
        std::vector<BlockId> const table_before(cache_.block_table(seq).begin(),
                                                cache_.block_table(seq).end());
        // Growth succeeds exactly when the blocks it needs are available, evictions included.
        int const needed = cache_.blocks_needed(seq, length);
        int const available = cache_.available_blocks();
        int const used = cache_.used_blocks();
        int const dropped_before = cache_.dropped_blocks(seq);
        if (cache_.reserve(seq, length)) {
            BOOST_REQUIRE(needed <= available);
            BOOST_REQUIRE(cache_.used_blocks() <= used + needed);  // an eviction frees and reuses
            coverage_.released_blocks +=
                (cache_.dropped_blocks(seq) - dropped_before) * Groups::sliding_groups;
            shadows_[seq].reserved = std::max(shadows_[seq].reserved, length);
            return true;
        }
        ++coverage_.failed_reserves;
        BOOST_REQUIRE(needed > available);
        BOOST_REQUIRE(std::ranges::equal(cache_.block_table(seq), table_before));
        BOOST_REQUIRE(cache_.reserved(seq) == shadows_[seq].reserved);
        return false;
    }

    // Writes tokens at the next positions, every layer; stops at a write the cache refuses
    // (a shared block to copy and no block to copy it to). Returns whether the sequence lives.
    bool write_tokens(int seq, std::span<int const> tokens) {
        for (int const token : tokens) {
            if (!write_position(seq, shadows_.at(seq).written(), token))
                return shadows_.contains(seq);
        }
        return true;
    }

    // One position in every layer, in layer order as the model writes. A refused write (the
    // first layer of a group whose block is shared, and no block to copy it to) must change
    // nothing of that group; a sequence refused after its first layer was written is
    // preempted (released), as the engine would, since its layers disagree.
    bool write_position(int seq, int p, int token) {
        Seq& s = shadows_[seq];
        Seq next = s;
        next.set(p, token);
        auto const block = static_cast<std::size_t>(p / BlockSize);
        std::array<BlockId, G> before;
        std::array<bool, G> shared;
        for (int g = 0; g < G; ++g) {
            auto const gi = static_cast<std::size_t>(g);
            before[gi] = cache_.block_table(seq)[block * G + gi];
            BOOST_REQUIRE(before[gi] != Cache::dropped);  // the window's last block is held
            shared[gi] = cache_.pool().is_shared(before[gi]);
        }
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            try {
                cache_.write(seq, layer, p, next.keys(p, layer), next.values(p, layer));
            } catch (Error const&) {
                int const g = Cache::group_of(layer);
                auto const gi = static_cast<std::size_t>(g);
                BOOST_REQUIRE(Groups::layout.first_layer[gi] == layer);
                BOOST_REQUIRE(shared[gi]);
                BOOST_REQUIRE(cache_.free_blocks() == 0);
                BOOST_REQUIRE(cache_.block_table(seq)[block * G + gi] == before[gi]);
                ++coverage_.refused_writes;
                if (layer > 0) release(seq);
                return false;
            }
        }
        for (int g = 0; g < G; ++g) {
            auto const gi = static_cast<std::size_t>(g);
            if (!shared[gi]) continue;
            BOOST_REQUIRE(cache_.block_table(seq)[block * G + gi] != before[gi]);
            ++coverage_.copies_on_write;
        }
        s = std::move(next);
        return true;
    }

    void append(int seq) {
        Seq& s = shadows_[seq];
        int const room = s.max_tokens - s.written();
        if (room <= 0) return release(seq);  // finished
        int const count = uniform(1, std::min(room, 5));
        // Sometimes reserve past what this step writes (a scheduler's lookahead).
        int const ahead =
            std::min(s.max_tokens, s.written() + count + uniform(0, 1) * uniform(0, 3));
        if (!reserve(seq, ahead)) return;
        std::vector<int> tokens;
        for (int i = 0; i < count; ++i) tokens.push_back(uniform(0, Cfg.vocab - 1));
        write_tokens(seq, tokens);
    }

    void fork(int parent) {
        int const child = cache_.fork(parent);
        BOOST_REQUIRE(!shadows_.contains(child));
        shadows_[child] = shadows_[parent];
        ++coverage_.forks;
    }

    // A different last token: in a block shared with a fork or the prefix cache, the write
    // must copy it first (the others keep reading the old token's KV).
    void rewrite_last(int seq) {
        Seq const& s = shadows_[seq];
        if (s.written() == 0) return;
        write_position(seq, s.written() - 1,
                       (s.tokens.back() + uniform(1, Cfg.vocab - 1)) % Cfg.vocab);
    }

    void release(int seq) {
        cache_.release(seq);
        shadows_.erase(seq);
    }

    void cache_prefix(int seq) {
        Seq const& s = shadows_[seq];
        if (!s.evicted) cache_.cache_prefix(seq, s.tokens);
    }

    void evict() {
        int const wanted = uniform(1, 4);
        int const evictable = cache_.available_blocks() - cache_.free_blocks();
        int const freed = cache_.evict_cached(wanted);
        if constexpr (G == 1) {
            BOOST_REQUIRE(freed == std::min(wanted, evictable));
        } else {
            // A node's blocks go together: up to G - 1 past what was asked.
            BOOST_REQUIRE(freed >= std::min(wanted, evictable));
            BOOST_REQUIRE(freed <= evictable);
            BOOST_REQUIRE(freed < wanted + G);
        }
        coverage_.evictions += freed;
    }

    void truncate(int seq) {
        Seq& s = shadows_[seq];
        // Half the time a length whose window the sliding layers still hold (as a rejected
        // draft's rollback), else any.
        int const lowest =
            Cache::has_sliding ? std::min(s.written(), cache_.sliding_from(seq) + window - 1) : 0;
        int const length =
            uniform(0, 1) == 0 ? uniform(lowest, s.written()) : uniform(0, s.written());
        bool const window_released =
            length > 0 && length < s.reserved &&
            std::max(0, length - window + 1) < cache_.sliding_from(seq);  // window starts at 0
        if (Cache::has_sliding && window_released) {
            std::vector<BlockId> const before(cache_.block_table(seq).begin(),
                                              cache_.block_table(seq).end());
            BOOST_REQUIRE_THROW(cache_.truncate(seq, length), std::logic_error);
            BOOST_REQUIRE(std::ranges::equal(cache_.block_table(seq), before));
            ++coverage_.refused_truncations;
            return;
        }
        cache_.truncate(seq, length);
        s.truncate(length);
        ++coverage_.truncations;
    }

    // Preemption by recompute: the sequence offers its blocks to the prefix cache and goes;
    // it comes back as a prompt of everything it had, mostly served by the prefix cache.
    void recompute(int seq) {
        Seq const s = shadows_[seq];
        if (s.written() < 2) return;
        cache_prefix(seq);
        release(seq);
        ++coverage_.recomputes;
        int const cached = admit_prompt(s.tokens, s.max_tokens);
        coverage_.recompute_hits += cached > 0;
    }

    // Preemption by swap: its KV goes to host memory (the window of each sliding group only),
    // its blocks back to the pool.
    void swap_out(int seq) {
        if (swapped_.size() >= max_swapped) return;
        Seq s = shadows_[seq];
        std::vector<std::byte> bytes;
        int const tokens = cache_.export_blocks(seq, bytes);
        BOOST_REQUIRE(tokens == s.written());
        BOOST_REQUIRE(bytes.size() == static_cast<std::size_t>(Cache::held_blocks_for(tokens)) *
                                          Cache::bytes_per_block);
        release(seq);
        s.reserved = tokens;
        swapped_.push_back({std::move(bytes), std::move(s)});
        ++coverage_.swap_outs;
    }

    void swap_in() {
        if (swapped_.empty() || shadows_.size() >= max_live) return;
        auto& [bytes, s] = swapped_.front();
        int const available = cache_.available_blocks();
        auto const seq = cache_.import_blocks(bytes, s.written(), s.max_tokens);
        if (!seq) {
            BOOST_REQUIRE(Cache::held_blocks_for(s.written()) > available);
            ++coverage_.refused_swap_ins;
            return;
        }
        BOOST_REQUIRE(!shadows_.contains(*seq));
        BOOST_REQUIRE(cache_.dropped_blocks(*seq) == Cache::window_first_block(s.written()));
        shadows_[*seq] = std::move(s);
        swapped_.pop_front();
        ++coverage_.swap_ins;
    }

    // Token eviction: half the time a policy's choice (some old tokens, always the last
    // window - 1, as AttentionSinks and HeavyHitters with a long enough recent part), half
    // the time any subset, which with sliding layers the cache must refuse when a slot of the
    // next query's window would come from a released block.
    void evict_tokens(int seq) {
        Seq& s = shadows_[seq];
        int const n = s.written();
        if (n < 2) return;
        std::vector<int> kept;
        bool const policy = uniform(0, 1) == 0;
        int const recent = Cache::has_sliding ? std::min(n, window - 1 + uniform(0, 2)) : 0;
        for (int p = 0; p < n; ++p) {
            bool const in_recent = policy && p >= n - recent;
            if (in_recent || uniform(0, 2) > 0) kept.push_back(p);
        }
        if (kept.empty()) kept.push_back(n - 1);
        int const k = static_cast<int>(kept.size());
        bool valid = true;
        for (int i = std::max(0, k - window + 1); Cache::has_sliding && i < k; ++i) {
            valid = valid && kept[static_cast<std::size_t>(i)] >= cache_.sliding_from(seq);
        }
        std::vector<BlockId> const before(cache_.block_table(seq).begin(),
                                          cache_.block_table(seq).end());
        int const available = cache_.available_blocks();
        try {
            cache_.retain_slots(seq, kept);
        } catch (Error const&) {
            // Refused: a window slot without KV, or no blocks for the copies it needs.
            BOOST_REQUIRE(!valid || available < G * Cache::logical_blocks_for(k));
            BOOST_REQUIRE(std::ranges::equal(cache_.block_table(seq), before));
            ++coverage_.refused_token_evictions;
            return;
        }
        BOOST_REQUIRE(valid);
        s.retain(kept);
        ++coverage_.token_evictions;
    }

    void drain() {
        while (!shadows_.empty()) release(shadows_.begin()->first);
        swapped_.clear();
        cache_.evict_cached(cache_.total_blocks());
        BOOST_REQUIRE(cache_.prefix_cache().cached_blocks() == 0);
        BOOST_REQUIRE_MESSAGE(cache_.free_blocks() == cache_.total_blocks(),
                              "blocks leaked: " << cache_.used_blocks() << " still used");
        BOOST_REQUIRE(cache_.live_sequences() == 0);
    }

    void check_invariants(int op) {
        BlockPool const& pool = cache_.pool();
        int const total = pool.total_blocks();
        std::vector<int> owners(static_cast<std::size_t>(total), 0);
        BOOST_REQUIRE(cache_.live_sequences() == static_cast<int>(shadows_.size()));
        for (auto const& [seq, s] : shadows_) {
            BOOST_REQUIRE(cache_.is_live(seq));
            BOOST_REQUIRE(cache_.reserved(seq) == s.reserved);
            BOOST_REQUIRE(cache_.tokens(seq) == s.written());
            auto const table = cache_.block_table(seq);
            BOOST_REQUIRE(static_cast<int>(table.size()) == Cache::blocks_for(s.reserved));
            // Released entries: sliding groups only, exactly those before dropped_blocks, and
            // never inside the next query's window.
            int const dropped = cache_.dropped_blocks(seq);
            BOOST_REQUIRE(dropped <= Cache::window_first_block(s.written()));
            BOOST_REQUIRE(cache_.sliding_from(seq) >= dropped * BlockSize);
            if (Cache::has_sliding)
                BOOST_REQUIRE(cache_.sliding_from(seq) <= std::max(0, s.written() - window + 1));
            for (std::size_t i = 0; i < table.size(); ++i) {
                int const block = static_cast<int>(i) / G;
                bool const released =
                    Cache::is_sliding_group(static_cast<int>(i) % G) && block < dropped;
                BOOST_REQUIRE_MESSAGE((table[i] == Cache::dropped) == released,
                                      "op " << op << ": seq " << seq << " entry " << i);
                if (!released) ++owners[static_cast<std::size_t>(table[i])];
            }
        }
        std::set<BlockId> cached;
        cache_.prefix_cache().for_each_block([&](BlockId b) {
            BOOST_REQUIRE_MESSAGE(cached.insert(b).second, "block " << b << " cached twice");
            ++owners[static_cast<std::size_t>(b)];
        });
        BOOST_REQUIRE(static_cast<int>(cached.size()) == cache_.prefix_cache().cached_blocks());
        int unowned = 0;
        for (BlockId b = 0; b < total; ++b) {
            BOOST_REQUIRE_MESSAGE(pool.ref_count(b) == owners[static_cast<std::size_t>(b)],
                                  "op " << op << ": block " << b << " has ref count "
                                        << pool.ref_count(b) << " but "
                                        << owners[static_cast<std::size_t>(b)] << " owners");
            unowned += owners[static_cast<std::size_t>(b)] == 0;
        }
        std::set<BlockId> free(pool.free_list().begin(), pool.free_list().end());
        BOOST_REQUIRE_MESSAGE(free.size() == pool.free_list().size(),
                              "op " << op << ": a block is free twice");
        BOOST_REQUIRE(static_cast<int>(free.size()) == unowned);
        for (BlockId const b : free) BOOST_REQUIRE(owners[static_cast<std::size_t>(b)] == 0);
        for (auto const& [seq, s] : shadows_) check_data(op, seq, s);
    }

    void check_data(int op, int seq, Seq const& s) {
        int const n = s.written();
        if (n == 0) return;
        std::vector<float> keys(static_cast<std::size_t>(n) * Cfg.head_dim);
        std::vector<float> values(keys.size());
        int const released_below = cache_.dropped_blocks(seq) * BlockSize;
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            auto const view = cache_.view(seq, layer);
            BOOST_REQUIRE(view.tokens() == n);
            bool const sliding = Cache::is_sliding_group(Cache::group_of(layer));
            // A sliding layer: only the positions from sliding_from, which include the next
            // query's window (checked above), must hold what was written.
            int const first_checked = sliding ? cache_.sliding_from(seq) : 0;
            for (int head = 0; head < Cfg.kv_heads; ++head) {
                // Two loads split at a random position, so runs start mid-block (and below the
                // window) too.
                int const split = uniform(0, n);
                testing::poison(std::span<float>(keys));
                testing::poison(std::span<float>(values));
                view.load_keys(head, 0, split, keys.data());
                view.load_keys(head, split, n - split, keys.data() + split * Cfg.head_dim);
                view.load_values(head, 0, split, values.data());
                view.load_values(head, split, n - split, values.data() + split * Cfg.head_dim);
                for (int p = 0; p < n; ++p) {
                    float const* got_k = keys.data() + p * Cfg.head_dim;
                    float const* got_v = values.data() + p * Cfg.head_dim;
                    if (sliding && p < released_below) {
                        bool const zeros = std::all_of(got_k, got_k + Cfg.head_dim,
                                                       [](float x) { return x == 0; }) &&
                                           std::all_of(got_v, got_v + Cfg.head_dim,
                                                       [](float x) { return x == 0; });
                        BOOST_REQUIRE_MESSAGE(zeros, "op " << op << ": seq " << seq << " layer "
                                                           << layer << " released position " << p
                                                           << " does not read as zeros");
                        continue;
                    }
                    if (p < first_checked) continue;
                    float const* k = s.keys(p, layer) + head * Cfg.head_dim;
                    float const* v = s.values(p, layer) + head * Cfg.head_dim;
                    BOOST_REQUIRE_MESSAGE(
                        std::memcmp(got_k, k, Cfg.head_dim * sizeof(float)) == 0 &&
                            std::memcmp(got_v, v, Cfg.head_dim * sizeof(float)) == 0,
                        "op " << op << " (choice " << last_choice_ << "): seq " << seq << " layer "
                              << layer << " position " << p << " does not hold what was written; n "
                              << n << " dropped " << cache_.dropped_blocks(seq) << " got "
                              << got_k[0] << " want " << k[0]);
                }
            }
        }
    }

    struct Swapped {
        std::vector<std::byte> bytes;
        Seq shadow;
    };

    std::mt19937_64 rng_;
    Cache cache_;
    std::array<std::vector<int>, 4> bases_;
    std::map<int, Seq> shadows_;  // live sequences by slot
    std::deque<Swapped> swapped_;
    Coverage coverage_;
    int last_choice_ = 0;
};

template <ModelConfig Cfg, int BlockSize>
void run_property(std::uint64_t seed, int pool_blocks, int operations) {
    PropertyRun<Cfg, BlockSize> run(seed, pool_blocks);
    Coverage const c = run.run(operations);
    BOOST_TEST_MESSAGE((PagedKvCache<Cfg, BlockSize>::has_sliding ? "hybrid" : "global")
                       << ", block size " << BlockSize << ", " << operations
                       << " operations: " << c.failed_reserves << " refused reserves, "
                       << c.prefix_hits << " prefix hits (" << c.window_hits << " past a window), "
                       << c.copies_on_write << " copies on write, " << c.refused_writes
                       << " refused writes, " << c.evictions << " evictions, " << c.forks
                       << " forks, " << c.truncations << " truncations (" << c.refused_truncations
                       << " refused), " << c.recomputes << " recomputes (" << c.recompute_hits
                       << " hit the prefix cache), " << c.swap_outs << " swap-outs, " << c.swap_ins
                       << " swap-ins (" << c.refused_swap_ins << " refused), " << c.token_evictions
                       << " token evictions (" << c.refused_token_evictions << " refused), "
                       << c.released_blocks << " sliding blocks released");
    BOOST_TEST(c.failed_reserves > 0);
    BOOST_TEST(c.prefix_hits > 0);
    BOOST_TEST(c.copies_on_write > 0);
    BOOST_TEST(c.evictions > 0);
    BOOST_TEST(c.forks > 0);
    BOOST_TEST(c.truncations > 0);
    BOOST_TEST(c.refused_writes > 0);
    BOOST_TEST(c.recompute_hits > 0);
    BOOST_TEST(c.swap_ins > 0);
    BOOST_TEST(c.token_evictions > 0);
    if constexpr (PagedKvCache<Cfg, BlockSize>::has_sliding) {
        BOOST_TEST(c.released_blocks > 0);
        BOOST_TEST(c.window_hits > 0);
        BOOST_TEST(c.refused_truncations > 0);
        BOOST_TEST(c.refused_token_evictions > 0);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_property)

BOOST_AUTO_TEST_CASE(hundred_thousand_random_operations_block_size_8) {
    run_property<tiny, 8>(701, 24, 100000);
}
BOOST_AUTO_TEST_CASE(random_operations_block_size_16) {
    run_property<tiny, 16>(702, 12, 30000);
}
BOOST_AUTO_TEST_CASE(random_operations_block_size_32) {
    run_property<tiny, 32>(703, 10, 30000);
}

// The hybrid cache: three layer groups (two sliding over 8 tokens), so a table has three
// entries per logical block and the sliding ones are released as sequences grow.
BOOST_AUTO_TEST_CASE(hybrid_sliding_and_global_layers_block_size_4) {
    run_property<hybrid, 4>(711, 60, 40000);
}
BOOST_AUTO_TEST_CASE(hybrid_sliding_and_global_layers_block_size_2) {
    run_property<hybrid, 2>(712, 110, 20000);
}
BOOST_AUTO_TEST_CASE(hybrid_sliding_and_global_layers_block_size_8) {
    run_property<hybrid, 8>(713, 30, 20000);
}

BOOST_AUTO_TEST_SUITE_END()
