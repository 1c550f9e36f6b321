// Property test of the paged KV cache: long runs of random operations (admit with prefix
// matching, reserve and write, fork, rewriting a token in a shared block, release, caching a
// prefix, eviction, truncation), with every invariant checked after each one:
//   - each block's reference count equals the number of block tables holding it plus the
//     prefix cache's holding;
//   - the free list holds exactly the blocks with no owner, each once;
//   - every table has exactly the blocks its reserved length needs;
//   - every live sequence reads back, bitwise, the KV a shadow model says it wrote;
//   - when everything finishes and the cache is evicted, every block is free.
// The KV of a position is a pure function of the tokens up to it (as in a real model), so a
// prefix-cache hit must return the very floats the sequence would have computed itself.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
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
                           .weights = DType::f32,
                           .kv = DType::f32};
constexpr int kv_width = tiny.kv_width();
constexpr int floats_per_position = tiny.layers * 2 * kv_width;  // [layers][K, V][kv_width]
constexpr int max_live = 8;

std::uint64_t splitmix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// What a sequence holds according to the operations applied to it.
struct Shadow {
    std::vector<int> tokens;                 // tokens[p]: the token at written position p
    std::vector<std::uint64_t> prefix_hash;  // of tokens[0..p]
    std::vector<std::array<float, floats_per_position>> kv;
    int reserved = 0;
    int max_tokens = 0;

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
    float const* keys(int p, int layer) const {
        return kv[static_cast<std::size_t>(p)].data() + layer * 2 * kv_width;
    }
    float const* values(int p, int layer) const { return keys(p, layer) + kv_width; }
};

// How often the interesting paths ran; each must have run for the test to mean anything.
struct Coverage {
    int failed_reserves = 0;
    int prefix_hits = 0;
    int copies_on_write = 0;
    int refused_writes = 0;
    int evictions = 0;
    int forks = 0;
    int truncations = 0;
};

template <int BlockSize>
class PropertyRun {
  public:
    using Cache = PagedKvCache<tiny, BlockSize>;

    PropertyRun(std::uint64_t seed, int pool_blocks)
        : rng_(testing::seeded_rng(seed)), cache_(Cache::bytes_per_block * pool_blocks) {
        // A few shared beginnings (system prompts) so prefixes repeat across requests.
        for (auto& base : bases_) {
            for (int i = 0; i < 48; ++i) base.push_back(uniform(0, tiny.vocab - 1));
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
        if (shadows_.empty() || (choice < 15 && shadows_.size() < max_live)) return admit();
        int const seq = pick_live();
        if (choice < 45) return append(seq);
        if (choice < 53) return shadows_.size() < max_live ? fork(seq) : release(seq);
        if (choice < 61) return rewrite_last(seq);
        if (choice < 71) return release(seq);
        if (choice < 79) return cache_prefix(seq);
        if (choice < 83) return evict();
        return truncate(seq);
    }

    void admit() {
        auto const& base = bases_[static_cast<std::size_t>(uniform(0, 3))];
        std::vector<int> prompt(base.begin(), base.begin() + uniform(1, 40));
        for (int i = uniform(0, 10); i > 0; --i) prompt.push_back(uniform(0, tiny.vocab - 1));
        int const max_tokens =
            std::min<int>(tiny.max_context, static_cast<int>(prompt.size()) + uniform(0, 40));
        auto const admission = cache_.admit(prompt, max_tokens);
        BOOST_REQUIRE(admission.cached_tokens % BlockSize == 0);
        BOOST_REQUIRE(admission.cached_tokens < static_cast<int>(prompt.size()));
        coverage_.prefix_hits += admission.cached_tokens > 0;
        Shadow& s = shadows_[admission.seq];
        s = Shadow{};
        s.max_tokens = max_tokens;
        for (int p = 0; p < admission.cached_tokens; ++p)
            s.set(p, prompt[static_cast<std::size_t>(p)]);
        s.reserved = admission.cached_tokens;
        if (!reserve(admission.seq, static_cast<int>(prompt.size()))) {
            release(admission.seq);  // preempted before it ran
            return;
        }
        write_tokens(admission.seq, std::span<int const>(prompt).subspan(
                                        static_cast<std::size_t>(admission.cached_tokens)));
        if (uniform(0, 1) == 0) cache_prefix(admission.seq);
    }

    // Reserves, and checks that a refusal changed nothing of the sequence.
    bool reserve(int seq, int length) {
        std::vector<BlockId> const table_before(cache_.block_table(seq).begin(),
                                                cache_.block_table(seq).end());
        // Growth succeeds exactly when the blocks it needs are available, evictions included.
        int const needed = cache_.blocks_needed(seq, length);
        int const available = cache_.available_blocks();
        int const used = cache_.used_blocks();
        if (cache_.reserve(seq, length)) {
            BOOST_REQUIRE(needed <= available);
            BOOST_REQUIRE(cache_.used_blocks() <= used + needed);  // an eviction frees and reuses
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
    // (a shared block to copy and no block to copy it to), which must change nothing.
    void write_tokens(int seq, std::span<int const> tokens) {
        Shadow& s = shadows_[seq];
        for (int const token : tokens) {
            if (!write_position(seq, s.written(), token)) return;
        }
    }

    bool write_position(int seq, int p, int token) {
        Shadow& s = shadows_[seq];
        Shadow next = s;
        next.set(p, token);
        auto const block = static_cast<std::size_t>(p / BlockSize);
        BlockId const before = cache_.block_table(seq)[block];
        bool const shared = cache_.pool().is_shared(before);
        for (int layer = 0; layer < tiny.layers; ++layer) {
            try {
                cache_.write(seq, layer, p, next.keys(p, layer), next.values(p, layer));
            } catch (Error const&) {
                // Only the first layer's write can need the copy; it must have been refused
                // for want of a block, with the block still shared and nothing written.
                BOOST_REQUIRE(layer == 0);
                BOOST_REQUIRE(shared);
                BOOST_REQUIRE(cache_.free_blocks() == 0);
                BOOST_REQUIRE(cache_.block_table(seq)[block] == before);
                ++coverage_.refused_writes;
                return false;
            }
        }
        if (shared) {
            BOOST_REQUIRE(cache_.block_table(seq)[block] != before);
            ++coverage_.copies_on_write;
        }
        s = std::move(next);
        return true;
    }

    void append(int seq) {
        Shadow& s = shadows_[seq];
        int const room = s.max_tokens - s.written();
        if (room <= 0) return release(seq);  // finished
        int const count = uniform(1, std::min(room, 5));
        // Sometimes reserve past what this step writes (a scheduler's lookahead).
        int const ahead =
            std::min(s.max_tokens, s.written() + count + uniform(0, 1) * uniform(0, 3));
        if (!reserve(seq, ahead)) return;
        std::vector<int> tokens;
        for (int i = 0; i < count; ++i) tokens.push_back(uniform(0, tiny.vocab - 1));
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
        Shadow const& s = shadows_[seq];
        if (s.written() == 0) return;
        write_position(seq, s.written() - 1,
                       (s.tokens.back() + uniform(1, tiny.vocab - 1)) % tiny.vocab);
    }

    void release(int seq) {
        cache_.release(seq);
        shadows_.erase(seq);
    }

    void cache_prefix(int seq) {
        Shadow const& s = shadows_[seq];
        cache_.cache_prefix(seq, s.tokens);
    }

    void evict() {
        int const wanted = uniform(1, 4);
        int const evictable = cache_.available_blocks() - cache_.free_blocks();
        int const freed = cache_.evict_cached(wanted);
        BOOST_REQUIRE(freed == std::min(wanted, evictable));
        coverage_.evictions += freed;
    }

    void truncate(int seq) {
        Shadow& s = shadows_[seq];
        int const length = uniform(0, s.written());
        cache_.truncate(seq, length);
        s.truncate(length);
        ++coverage_.truncations;
    }

    void drain() {
        while (!shadows_.empty()) release(shadows_.begin()->first);
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
            BOOST_REQUIRE(static_cast<int>(cache_.block_table(seq).size()) ==
                          Cache::blocks_for(s.reserved));
            for (BlockId const b : cache_.block_table(seq)) ++owners[static_cast<std::size_t>(b)];
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

    void check_data(int op, int seq, Shadow const& s) {
        int const n = s.written();
        if (n == 0) return;
        std::vector<float> keys(static_cast<std::size_t>(n) * tiny.head_dim);
        std::vector<float> values(keys.size());
        for (int layer = 0; layer < tiny.layers; ++layer) {
            auto const view = cache_.view(seq, layer);
            BOOST_REQUIRE(view.tokens() == n);
            for (int head = 0; head < tiny.kv_heads; ++head) {
                // Two loads split at a random position, so runs start mid-block too.
                int const split = uniform(0, n);
                testing::poison(std::span<float>(keys));
                testing::poison(std::span<float>(values));
                view.load_keys(head, 0, split, keys.data());
                view.load_keys(head, split, n - split, keys.data() + split * tiny.head_dim);
                view.load_values(head, 0, split, values.data());
                view.load_values(head, split, n - split, values.data() + split * tiny.head_dim);
                for (int p = 0; p < n; ++p) {
                    float const* k = s.keys(p, layer) + head * tiny.head_dim;
                    float const* v = s.values(p, layer) + head * tiny.head_dim;
                    BOOST_REQUIRE_MESSAGE(std::memcmp(keys.data() + p * tiny.head_dim, k,
                                                      tiny.head_dim * sizeof(float)) == 0 &&
                                              std::memcmp(values.data() + p * tiny.head_dim, v,
                                                          tiny.head_dim * sizeof(float)) == 0,
                                          "op " << op << ": seq " << seq << " layer " << layer
                                                << " position " << p
                                                << " does not hold what was written");
                }
            }
        }
    }

    std::mt19937_64 rng_;
    Cache cache_;
    std::array<std::vector<int>, 4> bases_;
    std::map<int, Shadow> shadows_;  // live sequences by slot
    Coverage coverage_;
};

template <int BlockSize>
void run_property(std::uint64_t seed, int pool_blocks, int operations) {
    PropertyRun<BlockSize> run(seed, pool_blocks);
    Coverage const c = run.run(operations);
    BOOST_TEST_MESSAGE("block size "
                       << BlockSize << ", " << operations << " operations: " << c.failed_reserves
                       << " refused reserves, " << c.prefix_hits << " prefix hits, "
                       << c.copies_on_write << " copies on write, " << c.refused_writes
                       << " refused writes, " << c.evictions << " evictions, " << c.forks
                       << " forks, " << c.truncations << " truncations");
    BOOST_TEST(c.failed_reserves > 0);
    BOOST_TEST(c.prefix_hits > 0);
    BOOST_TEST(c.copies_on_write > 0);
    BOOST_TEST(c.evictions > 0);
    BOOST_TEST(c.forks > 0);
    BOOST_TEST(c.truncations > 0);
    BOOST_TEST(c.refused_writes > 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_property)

BOOST_AUTO_TEST_CASE(hundred_thousand_random_operations_block_size_8) {
    run_property<8>(701, 24, 100000);
}
BOOST_AUTO_TEST_CASE(random_operations_block_size_16) {
    run_property<16>(702, 12, 30000);
}
BOOST_AUTO_TEST_CASE(random_operations_block_size_32) {
    run_property<32>(703, 10, 30000);
}

BOOST_AUTO_TEST_SUITE_END()
