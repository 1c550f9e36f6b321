#pragma once
// Two PagedKvCaches that differ only in where their blocks live (their BlockStorage) must hold
// the same bytes after any sequence of operations: the bookkeeping is the cache's, and the
// storage only carries out its copies, zeroing, reads and writes. StorageEquivalenceRun drives
// both through one seeded random sequence (admission with prompt prefixes, writes through write()
// and through make_writable + storage().write + mark_written, forks, reservations, truncation,
// token eviction, swap out and in, release, prefix caching and eviction) and after every
// operation compares their accounting, every live sequence's export_blocks() bytes and the whole
// storage. The first difference throws std::runtime_error naming the operation, so the harness
// runs under Boost.Test and under the CUDA tests' plain main() alike (no Boost here).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kv/paged_cache.hpp>

namespace tinfer::testing {

// The shapes both storage tests drive (kv_block_storage_test on the CPU, cuda_device_blocks_test
// on a GPU): one layer group, and three of two layers each.
namespace storage_shapes {
inline constexpr ModelConfig tiny{.layers = 2,
                                  .hidden = 16,
                                  .heads = 4,
                                  .kv_heads = 2,
                                  .head_dim = 4,
                                  .ffn = 8,
                                  .vocab = 8,
                                  .max_context = 96,
                                  .weights = DType::f32};
// Layers 0, 1, 3, 4 slide over 8 tokens, 2 and 5 attend globally: three groups of two layers.
inline constexpr ModelConfig hybrid{.layers = 6,
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
}  // namespace storage_shapes

// How often the paths that matter ran; a run that missed one proves nothing about it.
struct StorageCoverage {
    int prefix_hits = 0;
    int cache_writes = 0;   // positions written through write()
    int direct_writes = 0;  // positions written through storage().write after make_writable
    int direct_copies = 0;  // shared blocks make_writable copied
    int refused_writes = 0;
    int forks = 0;
    int truncations = 0;
    int token_evictions = 0;  // retain_slots that moved tokens
    int refused_token_evictions = 0;
    int swap_ins = 0;
    int cached_evictions = 0;
};

template <class CacheA, class CacheB>
class StorageEquivalenceRun {
    static constexpr ModelConfig Cfg = CacheA::config;
    static_assert(CacheA::config == CacheB::config && CacheA::block_size == CacheB::block_size &&
                      CacheA::bytes_per_block == CacheB::bytes_per_block,
                  "StorageEquivalenceRun: the caches must differ only in their storage");
    static constexpr int block_size = CacheA::block_size;
    static constexpr int groups = CacheA::group_count;
    static constexpr int window = CacheA::sliding_window;
    static constexpr int max_live = 6;
    static constexpr int max_swapped = 2;

  public:
    // `a` and `b`: empty caches of the same number of blocks.
    StorageEquivalenceRun(std::uint64_t seed, CacheA& a, CacheB& b) : rng_(seed), a_(a), b_(b) {
        for (auto& base : bases_) {
            for (int i = 0; i < 40; ++i) base.push_back(uniform(0, Cfg.vocab - 1));
        }
        compare();
    }

    StorageCoverage run(int operations) {
        for (op_ = 0; op_ < operations; ++op_) {
            step();
            compare();
        }
        while (!live_.empty()) release(live_.begin()->first);
        both([](auto& cache) { cache.evict_cached(cache.total_blocks()); });
        compare();
        expect(a_.free_blocks() == a_.total_blocks(), "every block is free at the end");
        return coverage_;
    }

  private:
    struct Sequence {
        std::vector<int> tokens;  // tokens[p]: the token at written position p
        int max_tokens = 0;
        bool evicted = false;  // retain_slots compacted it: its KV no longer follows its tokens
    };
    struct Swapped {
        std::vector<std::byte> bytes;
        Sequence sequence;
    };

    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    void expect(bool ok, std::string const& what) const {
        if (!ok) {
            throw std::runtime_error("operation " + std::to_string(op_) + " (" + operation_ +
                                     "): " + what);
        }
    }

    template <class Op>
    void both(Op&& op) {
        op(a_);
        op(b_);
    }

    // Runs `op` on both caches; both must succeed or both throw `Exception`. True if they
    // succeeded.
    template <class Exception, class Op>
    bool both_or_neither(Op&& op) {
        auto const succeeds = [&](auto& cache) {
            try {
                op(cache);
                return true;
            } catch (Exception const&) {
                return false;
            }
        };
        bool const a_ok = succeeds(a_);
        bool const b_ok = succeeds(b_);
        expect(a_ok == b_ok, "one cache threw and the other did not");
        return a_ok;
    }

    int pick_live() {
        auto it = live_.begin();
        std::advance(it, uniform(0, static_cast<int>(live_.size()) - 1));
        return it->first;
    }

    void step() {
        int const choice = uniform(0, 99);
        if (live_.empty() || (choice < 12 && live_.size() < max_live)) return admit();
        if (choice < 15) return swap_in();
        int const seq = pick_live();
        if (choice < 40) return append(seq);
        if (choice < 47) return live_.size() < max_live ? fork(seq) : release(seq);
        if (choice < 54) return rewrite_last(seq);
        if (choice < 60) return release(seq);
        if (choice < 66) return cache_prefix(seq);
        if (choice < 70) return evict_cached();
        if (choice < 76) return truncate(seq);
        if (choice < 82) return swap_out(seq);
        return evict_tokens(seq);
    }

    void admit() {
        operation_ = "admit";
        auto const& base = bases_[static_cast<std::size_t>(uniform(0, 2))];
        std::vector<int> prompt(base.begin(), base.begin() + uniform(1, 36));
        for (int i = uniform(0, 6); i > 0; --i) prompt.push_back(uniform(0, Cfg.vocab - 1));
        int const max_tokens =
            std::min<int>(Cfg.max_context, static_cast<int>(prompt.size()) + uniform(0, 30));
        auto const admitted = a_.admit(prompt, max_tokens);
        auto const admitted_b = b_.admit(prompt, max_tokens);
        expect(admitted.seq == admitted_b.seq && admitted.cached_tokens == admitted_b.cached_tokens,
               "admissions differ");
        coverage_.prefix_hits += admitted.cached_tokens > 0;
        Sequence& s = live_[admitted.seq];
        s = Sequence{.tokens = {}, .max_tokens = max_tokens, .evicted = false};
        s.tokens.assign(prompt.begin(), prompt.begin() + admitted.cached_tokens);
        compare();
        if (!reserve(admitted.seq, static_cast<int>(prompt.size()))) {
            release(admitted.seq);  // preempted before it ran
            return;
        }
        auto const rest =
            std::span<int const>(prompt).subspan(static_cast<std::size_t>(admitted.cached_tokens));
        if (write_tokens(admitted.seq, std::vector<int>(rest.begin(), rest.end())) &&
            uniform(0, 1) == 0)
            cache_prefix(admitted.seq);
    }

    bool reserve(int seq, int length) {
        bool const reserved = a_.reserve(seq, length);
        expect(b_.reserve(seq, length) == reserved, "reserve answers differ");
        return reserved;
    }

    // Appends `tokens` at the next positions, through write() or through the storage; returns
    // whether the sequence is still live (a refused write preempts it).
    bool write_tokens(int seq, std::vector<int> const& tokens) {
        if (tokens.empty()) return true;
        int const first = static_cast<int>(live_.at(seq).tokens.size());
        if (!write_positions(seq, first, static_cast<int>(tokens.size()))) return false;
        auto& s = live_.at(seq).tokens;
        s.insert(s.end(), tokens.begin(), tokens.end());
        return true;
    }

    // Writes fresh K/V at positions [first, first + count) of every layer, half the time as
    // the host model does (write(), layer by layer), half as a GPU model does (make_writable,
    // the encoded vectors straight into the storage, mark_written).
    bool write_positions(int seq, int first, int count) {
        if (uniform(0, 1) == 0) {
            operation_ = "write";
            for (int p = first; p < first + count; ++p) {
                for (int layer = 0; layer < Cfg.layers; ++layer) {
                    auto const k = random_vectors();
                    auto const v = random_vectors();
                    if (!both_or_neither<Error>(
                            [&](auto& cache) { cache.write(seq, layer, p, k.data(), v.data()); })) {
                        ++coverage_.refused_writes;
                        release(seq);  // its layers disagree now
                        return false;
                    }
                    ++coverage_.cache_writes;
                }
            }
            return true;
        }
        operation_ = "make_writable";
        int shared = 0;
        for (int j = first / block_size; j <= (first + count - 1) / block_size; ++j) {
            for (int g = 0; g < groups; ++g) {
                kv::BlockId const block =
                    a_.block_table(seq)[static_cast<std::size_t>(j * groups + g)];
                shared += block != CacheA::dropped && a_.pool().is_shared(block);
            }
        }
        if (!both_or_neither<Error>([&](auto& cache) { cache.make_writable(seq, first, count); })) {
            ++coverage_.refused_writes;
            release(seq);
            return false;
        }
        coverage_.direct_copies += shared;
        compare();
        operation_ = "storage().write";
        for (int p = first; p < first + count; ++p) {
            for (int layer = 0; layer < Cfg.layers; ++layer) {
                auto const k = random_vectors();
                auto const v = random_vectors();
                for (int h = 0; h < Cfg.kv_heads; ++h) {
                    std::array<std::byte, CacheA::key_vector_bytes> key{};
                    std::array<std::byte, CacheA::value_vector_bytes> value{};
                    CacheA::KeyCodec::template encode<Cfg.head_dim>(k.data() + h * Cfg.head_dim,
                                                                    key.data());
                    CacheA::ValueCodec::template encode<Cfg.head_dim>(v.data() + h * Cfg.head_dim,
                                                                      value.data());
                    std::size_t const block = block_offset(seq, p, layer);
                    auto const slot = static_cast<std::size_t>(p % block_size);
                    both([&](auto& cache) {
                        cache.storage().write(block + CacheA::key_offset(layer, h, slot),
                                              key.data(), key.size());
                        cache.storage().write(block + CacheA::value_offset(layer, h, slot),
                                              value.data(), value.size());
                    });
                }
            }
        }
        operation_ = "mark_written";
        both([&](auto& cache) { cache.mark_written(seq, first + count); });
        coverage_.direct_writes += count;
        return true;
    }

    std::size_t block_offset(int seq, int position, int layer) const {
        kv::BlockId const block = a_.block_table(seq)[static_cast<std::size_t>(
            position / block_size * groups + CacheA::group_of(layer))];
        expect(block != CacheA::dropped, "a write into a released block");
        return static_cast<std::size_t>(block) * CacheA::bytes_per_block;
    }

    std::vector<float> random_vectors() {  // [kv_heads][head_dim]
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::vector<float> out(static_cast<std::size_t>(Cfg.kv_heads) * Cfg.head_dim);
        for (float& x : out) x = value(rng_);
        return out;
    }

    void append(int seq) {
        Sequence const& s = live_.at(seq);
        int const written = static_cast<int>(s.tokens.size());
        int const room = s.max_tokens - written;
        if (room <= 0) return release(seq);  // finished
        int const count = uniform(1, std::min(room, 6));
        // Sometimes past what this step writes (a scheduler's lookahead).
        int const ahead = std::min(s.max_tokens, written + count + uniform(0, 1) * uniform(0, 3));
        operation_ = "reserve";
        if (!reserve(seq, ahead)) return;
        std::vector<int> tokens;
        for (int i = 0; i < count; ++i) tokens.push_back(uniform(0, Cfg.vocab - 1));
        write_tokens(seq, tokens);
    }

    // The last position again: into a block shared with a fork or the prefix cache, the write
    // copies it first.
    void rewrite_last(int seq) {
        Sequence& s = live_.at(seq);
        if (s.tokens.empty()) return;
        if (write_positions(seq, static_cast<int>(s.tokens.size()) - 1, 1))
            live_.at(seq).tokens.back() = uniform(0, Cfg.vocab - 1);
    }

    void fork(int parent) {
        operation_ = "fork";
        int const child = a_.fork(parent);
        expect(b_.fork(parent) == child, "fork slots differ");
        live_[child] = live_.at(parent);
        ++coverage_.forks;
    }

    void release(int seq) {
        operation_ = "release";
        both([&](auto& cache) { cache.release(seq); });
        live_.erase(seq);
    }

    void cache_prefix(int seq) {
        operation_ = "cache_prefix";
        Sequence const& s = live_.at(seq);
        if (s.evicted) return;
        int const cached = a_.cache_prefix(seq, s.tokens);
        expect(b_.cache_prefix(seq, s.tokens) == cached, "cache_prefix answers differ");
    }

    void evict_cached() {
        operation_ = "evict_cached";
        int const blocks = uniform(1, 4);
        int const freed = a_.evict_cached(blocks);
        expect(b_.evict_cached(blocks) == freed, "evict_cached answers differ");
        coverage_.cached_evictions += freed;
    }

    // Any length, so that with sliding layers some are refused (below the held window).
    void truncate(int seq) {
        operation_ = "truncate";
        Sequence& s = live_.at(seq);
        int const length = uniform(0, static_cast<int>(s.tokens.size()));
        if (!both_or_neither<std::logic_error>([&](auto& cache) { cache.truncate(seq, length); }))
            return;
        s.tokens.resize(std::min(s.tokens.size(), static_cast<std::size_t>(length)));
        ++coverage_.truncations;
    }

    void swap_out(int seq) {
        operation_ = "swap out";
        if (swapped_.size() >= max_swapped) return;
        std::vector<std::byte> bytes, bytes_b;
        int const tokens = a_.export_blocks(seq, bytes);
        expect(b_.export_blocks(seq, bytes_b) == tokens && bytes == bytes_b, "exports differ");
        Sequence s = live_.at(seq);
        release(seq);
        swapped_.push_back({std::move(bytes), std::move(s)});
    }

    void swap_in() {
        operation_ = "swap in";
        if (swapped_.empty() || live_.size() >= max_live) return;
        auto const& [bytes, s] = swapped_.front();
        int const tokens = static_cast<int>(s.tokens.size());
        std::optional<int> const seq = a_.import_blocks(bytes, tokens, s.max_tokens);
        expect(b_.import_blocks(bytes, tokens, s.max_tokens) == seq, "imports differ");
        if (!seq) return;
        live_[*seq] = s;
        swapped_.erase(swapped_.begin());
        ++coverage_.swap_ins;
    }

    // Token eviction: half the time a policy's choice (always the last window - 1 tokens),
    // half any subset, which with sliding layers the cache may refuse.
    void evict_tokens(int seq) {
        operation_ = "retain_slots";
        Sequence& s = live_.at(seq);
        int const n = static_cast<int>(s.tokens.size());
        if (n < 2) return;
        bool const policy = uniform(0, 1) == 0;
        int const recent = CacheA::has_sliding ? std::min(n, window - 1 + uniform(0, 2)) : 0;
        std::vector<int> kept;
        for (int p = 0; p < n; ++p) {
            if ((policy && p >= n - recent) || uniform(0, 2) > 0) kept.push_back(p);
        }
        if (kept.empty()) kept.push_back(n - 1);
        if (!both_or_neither<Error>([&](auto& cache) { cache.retain_slots(seq, kept); })) {
            ++coverage_.refused_token_evictions;
            return;
        }
        std::vector<int> tokens;
        for (int const p : kept) tokens.push_back(s.tokens[static_cast<std::size_t>(p)]);
        coverage_.token_evictions += kept.back() != static_cast<int>(kept.size()) - 1;
        s.tokens = std::move(tokens);
        s.evicted = true;
    }

    void compare() {
        expect(a_.live_sequences() == b_.live_sequences() &&
                   a_.live_sequences() == static_cast<int>(live_.size()),
               "live sequences differ");
        expect(a_.free_blocks() == b_.free_blocks() && a_.used_blocks() == b_.used_blocks() &&
                   a_.sequence_blocks() == b_.sequence_blocks() &&
                   a_.available_blocks() == b_.available_blocks() &&
                   a_.live_tokens() == b_.live_tokens(),
               "block accounting differs");
        for (auto const& [seq, s] : live_) {
            std::string const which = "sequence " + std::to_string(seq);
            expect(b_.is_live(seq) && a_.reserved(seq) == b_.reserved(seq) &&
                       a_.tokens(seq) == b_.tokens(seq) &&
                       a_.tokens(seq) == static_cast<int>(s.tokens.size()) &&
                       a_.dropped_blocks(seq) == b_.dropped_blocks(seq) &&
                       a_.sliding_from(seq) == b_.sliding_from(seq) &&
                       std::ranges::equal(a_.block_table(seq), b_.block_table(seq)),
                   which + ": accounting differs");
            std::vector<std::byte> bytes_a, bytes_b;
            int const tokens = a_.export_blocks(seq, bytes_a);
            expect(b_.export_blocks(seq, bytes_b) == tokens && bytes_a == bytes_b,
                   which + ": export_blocks bytes differ");
        }
        // Blocks only the prefix cache holds, and stale bytes of free blocks, alike too.
        std::vector<std::byte> all_a(a_.storage().size()), all_b(b_.storage().size());
        expect(all_a.size() == all_b.size(), "storage sizes differ");
        a_.storage().read(0, all_a.size(), all_a.data());
        b_.storage().read(0, all_b.size(), all_b.data());
        if (all_a != all_b) {
            auto const at =
                static_cast<std::size_t>(std::ranges::mismatch(all_a, all_b).in1 - all_a.begin());
            expect(false, "storage differs at byte " + std::to_string(at) + " (block " +
                              std::to_string(at / CacheA::bytes_per_block) + ")");
        }
    }

    std::mt19937_64 rng_;
    CacheA& a_;
    CacheB& b_;
    std::array<std::vector<int>, 3> bases_;
    std::map<int, Sequence> live_;
    std::vector<Swapped> swapped_;
    StorageCoverage coverage_;
    int op_ = 0;
    std::string operation_ = "start";
};

}  // namespace tinfer::testing
