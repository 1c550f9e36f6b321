// Property test of speculative decoding's KV bookkeeping on the paged cache: random sequences of
// the operations the engine and a model drafter perform on a target cache and a draft cache
// (admit + prefill, draft: the draft model catches up and runs its drafts, the target reserves
// the round; verify: the target writes [last, drafts], accepts a random prefix and is truncated
// to it, the draft is rolled back to the kept tokens; fork both caches; abort; finish), with a
// shadow model of both caches checked after every operation:
//   - each sequence's block table has the shadow's shape: the same blocks shared with the same
//     sequences (a bijection between shadow blocks and physical blocks), its reserved and
//     written lengths;
//   - every block's reference count is the number of tables holding it, and the free count is
//     the blocks no table holds;
//   - every written position reads back the KV of the tokens the shadow says it holds (the KV
//     of a position is a function of the tokens up to it): no rejected draft survives;
// and when every request has ended both pools are entirely free.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <vector>

#include <tinfer/kv/paged_cache.hpp>

#include "testing.hpp"

using namespace tinfer;

// Checked on every operation: an assertion per element would dominate the run time.
#define SPEC_REQUIRE(condition) \
    if (!(condition)) BOOST_FAIL("failed: " #condition)

namespace {

constexpr ModelConfig target_cfg{.layers = 3,
                                 .hidden = 8,
                                 .heads = 2,
                                 .kv_heads = 1,
                                 .head_dim = 4,
                                 .ffn = 8,
                                 .vocab = 6,
                                 .max_context = 128,
                                 .weights = DType::f32};
constexpr ModelConfig draft_cfg = [] {
    ModelConfig c = target_cfg;
    c.layers = 1;  // a layer-skipping draft: the target's first layer
    return c;
}();
constexpr int block_size = 4;
constexpr int kv_width = target_cfg.kv_width();
constexpr int max_gamma = 6;

std::uint64_t splitmix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The KV of `tokens.back()` at its position, for one layer: a function of every token up to it
// (as a real model's), so a stale token anywhere before shows.
std::array<float, 2 * kv_width> kv_of(std::span<std::int32_t const> tokens, int layer) {
    std::uint64_t h = 0x5eed + static_cast<std::uint64_t>(layer);
    for (std::int32_t const t : tokens) h = splitmix(h ^ static_cast<std::uint64_t>(t + 1));
    std::array<float, 2 * kv_width> out;
    for (int i = 0; i < 2 * kv_width; ++i)
        out[static_cast<std::size_t>(i)] =
            static_cast<float>(splitmix(h + static_cast<std::uint64_t>(i)) >> 40) / 1e6f;
    return out;
}

// One cache and its shadow: block identities, reference counts, each sequence's tokens.
template <ModelConfig Cfg>
class Checked {
  public:
    using Cache = kv::PagedKvCache<Cfg, block_size>;

    explicit Checked(int blocks) : cache(Cache::bytes_per_block * blocks) {}

    struct Seq {
        std::vector<int> blocks;            // shadow block ids
        std::vector<std::int32_t> written;  // the tokens at positions 0 .. written-1
        int reserved = 0;
    };

    int admit(int max_tokens) {
        int const seq = cache.admit(max_tokens);
        seqs[seq] = Seq{};
        return seq;
    }

    // Reserve as the cache does it, in the shadow first: returns whether it fits.
    bool reserve(int seq, int length) {
        Seq& s = seqs.at(seq);
        bool const expected_fit = [&] {
            if (length <= s.reserved) return true;
            int needed = Cache::blocks_for(length) - static_cast<int>(s.blocks.size());
            if (s.reserved % block_size != 0 && refs[s.blocks.back()] > 1) ++needed;
            return needed <= free_blocks();
        }();
        bool const fit = cache.reserve(seq, length);
        SPEC_REQUIRE(fit == expected_fit);
        if (!fit || length <= s.reserved) return fit;
        if (s.reserved % block_size != 0 && refs[s.blocks.back()] > 1) copy_last(s);
        while (static_cast<int>(s.blocks.size()) < Cache::blocks_for(length))
            s.blocks.push_back(new_block());
        s.reserved = length;
        return true;
    }

    // Writes the KV of `tokens` at positions written.size() .. in every layer.
    void write(int seq, std::span<std::int32_t const> tokens) {
        Seq& s = seqs.at(seq);
        for (std::int32_t const token : tokens) {
            int const position = static_cast<int>(s.written.size());
            int& block = s.blocks.at(static_cast<std::size_t>(position / block_size));
            if (refs[block] > 1) {  // the cache copies a shared block before writing into it
                --refs[block];
                block = new_block();
            }
            s.written.push_back(token);
            for (int layer = 0; layer < Cfg.layers; ++layer) {
                auto const kv = kv_of(s.written, layer);
                cache.write(seq, layer, position, kv.data(), kv.data() + kv_width);
            }
        }
    }

    void truncate(int seq, int length) {
        cache.truncate(seq, length);
        Seq& s = seqs.at(seq);
        if (length >= s.reserved) return;
        auto const kept = static_cast<std::size_t>(Cache::blocks_for(length));
        for (std::size_t i = kept; i < s.blocks.size(); ++i) --refs[s.blocks[i]];
        s.blocks.resize(kept);
        s.reserved = length;
        if (static_cast<int>(s.written.size()) > length)
            s.written.resize(static_cast<std::size_t>(length));
    }

    int fork(int parent) {
        int const child = cache.fork(parent);
        Seq copy = seqs.at(parent);
        for (int const b : copy.blocks) ++refs[b];
        seqs[child] = std::move(copy);
        return child;
    }

    void release(int seq) {
        cache.release(seq);
        for (int const b : seqs.at(seq).blocks) --refs[b];
        seqs.erase(seq);
    }

    std::vector<std::int32_t> const& tokens(int seq) const { return seqs.at(seq).written; }

    void check() const {
        std::map<int, kv::BlockId> physical_of;  // shadow block -> physical block
        std::map<kv::BlockId, int> shadow_of;
        for (auto const& [seq, s] : seqs) {
            auto const table = cache.block_table(seq);
            SPEC_REQUIRE(table.size() == s.blocks.size());
            SPEC_REQUIRE(cache.reserved(seq) == s.reserved);
            SPEC_REQUIRE(cache.tokens(seq) == static_cast<int>(s.written.size()));
            for (std::size_t i = 0; i < table.size(); ++i) {
                auto const [p, new_shadow] = physical_of.try_emplace(s.blocks[i], table[i]);
                auto const [q, new_physical] = shadow_of.try_emplace(table[i], s.blocks[i]);
                SPEC_REQUIRE(p->second == table[i]);
                SPEC_REQUIRE(q->second == s.blocks[i]);
            }
            for (int layer = 0; layer < Cfg.layers; ++layer) {
                auto const view = cache.view(seq, layer);
                std::array<float, kv_width> k, v;
                for (int position = 0; position < static_cast<int>(s.written.size()); ++position) {
                    view.load_keys(0, position, 1, k.data());
                    view.load_values(0, position, 1, v.data());
                    auto const expected = kv_of(
                        std::span(s.written).first(static_cast<std::size_t>(position) + 1), layer);
                    SPEC_REQUIRE(std::equal(k.begin(), k.end(), expected.begin()));
                    SPEC_REQUIRE(std::equal(v.begin(), v.end(), expected.begin() + kv_width));
                }
            }
        }
        for (auto const& [shadow, physical] : physical_of)
            SPEC_REQUIRE(cache.pool().ref_count(physical) == refs.at(shadow));
        SPEC_REQUIRE(cache.free_blocks() == free_blocks());
    }

    int free_blocks() const {
        int live = 0;
        for (auto const& [id, count] : refs) live += count > 0;
        return cache.total_blocks() - live;
    }

    Cache cache;
    std::map<int, Seq> seqs;

  private:
    int new_block() {
        refs[next_id_] = 1;
        return next_id_++;
    }
    void copy_last(Seq& s) {
        --refs[s.blocks.back()];
        s.blocks.back() = new_block();
    }

    std::map<int, int> refs;  // shadow block -> holders
    int next_id_ = 0;
};

// A request: its context (prompt + generated) and its sequences. The target cache holds all of
// the context but the last token; the draft holds some prefix of it (plus drafts mid-round).
struct Request {
    std::vector<std::int32_t> context;
    int target = -1;
    int draft = -1;
    int max_length = 0;
    std::vector<std::int32_t> round;  // drafts proposed and reserved, not yet verified
};

struct Coverage {
    long rounds = 0, all_accepted = 0, all_rejected = 0, refused_rounds = 0, forks = 0,
         aborts_mid_round = 0, finished = 0, draft_truncations = 0;
};

class Run {
  public:
    Run(std::uint64_t seed, int target_blocks, int draft_blocks)
        : rng_(testing::seeded_rng(seed)), target_(target_blocks), draft_(draft_blocks) {}

    Coverage run(int operations) {
        for (int op = 0; op < operations; ++op) {
            BOOST_TEST_CONTEXT("operation " << op) {
                step();
                target_.check();
                draft_.check();
            }
        }
        while (!requests_.empty()) end(requests_.begin()->first);
        target_.check();
        draft_.check();
        BOOST_TEST(target_.cache.free_blocks() == target_.cache.total_blocks());
        BOOST_TEST(draft_.cache.free_blocks() == draft_.cache.total_blocks());
        BOOST_TEST(target_.cache.live_sequences() == 0);
        BOOST_TEST(draft_.cache.live_sequences() == 0);
        return coverage_;
    }

  private:
    int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
    std::int32_t token() { return uniform(0, target_cfg.vocab - 1); }

    void step() {
        int const choice = uniform(0, 99);
        if (requests_.empty() || (choice < 10 && requests_.size() < 6)) return admit();
        auto it = requests_.begin();
        std::advance(it, uniform(0, static_cast<int>(requests_.size()) - 1));
        int const id = it->first;
        Request& r = it->second;
        if (choice < 15) {
            if (!r.round.empty()) ++coverage_.aborts_mid_round;
            return end(id);
        }
        if (choice < 20) return fork(id);
        if (r.round.empty()) return draft(r);
        return verify(id, r);
    }

    void admit() {
        int const prompt = uniform(1, 20);
        Request r;
        r.max_length = prompt + uniform(1, 40);
        for (int i = 0; i < prompt; ++i) r.context.push_back(token());
        r.target = target_.admit(r.max_length + max_gamma);
        // Prefill: the prompt's KV, then its first sampled token (not run yet).
        if (!target_.reserve(r.target, prompt)) {
            target_.release(r.target);
            return;
        }
        target_.write(r.target, r.context);
        r.context.push_back(token());
        r.draft = draft_.admit(r.max_length + max_gamma);
        requests_[next_id_++] = std::move(r);
    }

    void end(int id) {
        Request& r = requests_.at(id);
        target_.release(r.target);
        draft_.release(r.draft);
        requests_.erase(id);
    }

    void fork(int id) {
        Request const& parent = requests_.at(id);
        if (!parent.round.empty() || requests_.size() >= 8) return;
        Request child = parent;
        child.target = target_.fork(parent.target);
        child.draft = draft_.fork(parent.draft);
        ++coverage_.forks;
        requests_[next_id_++] = std::move(child);
    }

    // The drafter catches up with the context and runs gamma - 1 drafts (the last draft is not
    // run), then the target reserves the round's positions; when either cache is full the round
    // goes without drafts (here: nothing happens).
    void draft(Request& r) {
        int const length = static_cast<int>(r.context.size());
        int const gamma = std::min(uniform(1, max_gamma), r.max_length + max_gamma - length);
        if (gamma < 1) return;
        auto const& held = draft_.tokens(r.draft);
        auto const common =
            static_cast<std::size_t>(std::ranges::mismatch(held, r.context).in1 - held.begin());
        SPEC_REQUIRE(common == held.size());  // rollback left only a prefix of the context
        std::vector<std::int32_t> drafts;
        for (int i = 0; i < gamma; ++i) drafts.push_back(token());
        std::vector<std::int32_t> to_run(r.context.begin() + static_cast<long>(common),
                                         r.context.end());
        to_run.insert(to_run.end(), drafts.begin(), drafts.end() - 1);
        if (!draft_.reserve(r.draft, static_cast<int>(common + to_run.size())) ||
            !target_.reserve(r.target, length + gamma)) {
            ++coverage_.refused_rounds;
            return;
        }
        draft_.write(r.draft, to_run);
        r.round = std::move(drafts);
    }

    // The target runs [last token, drafts], keeps a random prefix of the drafts and a token of
    // its own, and is truncated to the kept positions; the draft is rolled back to them.
    void verify(int id, Request& r) {
        int const length = static_cast<int>(r.context.size());
        int const gamma = static_cast<int>(r.round.size());
        std::vector<std::int32_t> run{r.context.back()};
        run.insert(run.end(), r.round.begin(), r.round.end());
        target_.write(r.target, run);
        int const accepted = uniform(0, gamma);
        coverage_.all_accepted += accepted == gamma;
        coverage_.all_rejected += accepted == 0;
        ++coverage_.rounds;
        std::vector<std::int32_t> kept(r.round.begin(), r.round.begin() + accepted);
        std::int32_t next = token();
        if (accepted < gamma && next == r.round[static_cast<std::size_t>(accepted)])
            next = (next + 1) % target_cfg.vocab;  // a rejected draft is not the correction
        kept.push_back(next);
        target_.truncate(r.target, length + accepted);
        r.context.insert(r.context.end(), kept.begin(), kept.end());
        auto const& held = draft_.tokens(r.draft);
        auto const common =
            static_cast<int>(std::ranges::mismatch(held, r.context).in1 - held.begin());
        if (common < static_cast<int>(held.size())) ++coverage_.draft_truncations;
        draft_.truncate(r.draft, common);
        r.round.clear();
        SPEC_REQUIRE(target_.tokens(r.target).size() == r.context.size() - 1);
        if (static_cast<int>(r.context.size()) >= r.max_length) {
            ++coverage_.finished;
            end(id);
        }
    }

    std::mt19937_64 rng_;
    Checked<target_cfg> target_;
    Checked<draft_cfg> draft_;
    std::map<int, Request> requests_;
    int next_id_ = 0;
    Coverage coverage_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(speculative_kv_rollback)

BOOST_AUTO_TEST_CASE(random_rounds_keep_both_caches_equal_to_the_shadow) {
    for (std::uint64_t const seed : {11u, 12u, 13u}) {
        BOOST_TEST_CONTEXT("seed " << seed) {
            // Pools small enough that rounds get refused, roomy enough that most run.
            Coverage const c = Run(seed, 40, 24).run(2000);
            BOOST_TEST_MESSAGE(
                "rounds " << c.rounds << ", all accepted " << c.all_accepted << ", all rejected "
                          << c.all_rejected << ", refused " << c.refused_rounds << ", forks "
                          << c.forks << ", aborts mid-round " << c.aborts_mid_round << ", finished "
                          << c.finished << ", draft truncations " << c.draft_truncations);
            BOOST_TEST(c.rounds > 200);
            BOOST_TEST(c.all_accepted > 10);
            BOOST_TEST(c.all_rejected > 10);
            BOOST_TEST(c.refused_rounds > 0);
            BOOST_TEST(c.forks > 10);
            BOOST_TEST(c.aborts_mid_round > 0);
            BOOST_TEST(c.finished > 10);
            BOOST_TEST(c.draft_truncations > 10);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
