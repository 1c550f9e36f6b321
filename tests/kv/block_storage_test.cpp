// PagedKvCache's block storage as a policy: the cache over SeparateHostBlocks, a storage the
// host cannot address (its bytes reachable only through copy, zero, read and write, as a GPU
// storage's are), holds bitwise what the cache over HostBlocks holds after the same random
// operations, with and without sliding layers and through quantizing codecs; every batch of
// copies the cache submits keeps the batch contract (block_storage.hpp), checked as it is
// applied, so a storage that applies a batch all at once (a GPU kernel) equals one that applies
// it in order; and make_writable / mark_written, the GPU model's way to write, behave as write().
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/kv/block_storage.hpp>
#include <tinfer/kv/paged_cache.hpp>

#include "kv_storage_equivalence.hpp"
#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::kv;

namespace {

using testing::storage_shapes::hybrid;
using testing::storage_shapes::tiny;

// Block storage the host cannot address: the bytes live in a private vector, data() is null (a
// dereference would crash), and a batch of copies is applied all at once (every source read
// into a staging buffer before any target is written), as a GPU applies it. A batch that breaks
// the contract is a logic_error: then in order and all at once could differ.
class SeparateHostBlocks {
  public:
    static constexpr bool host_addressable = false;

    explicit SeparateHostBlocks(std::size_t bytes) : bytes_(bytes) {}

    std::size_t size() const { return bytes_.size(); }
    std::byte* data() { return nullptr; }
    std::byte const* data() const { return nullptr; }

    void copy(std::span<ByteCopy const> copies) {
        check_contract(copies);
        std::vector<std::byte> staged;
        for (ByteCopy const& c : copies) {
            check_range(c.from, c.bytes);
            staged.insert(staged.end(), bytes_.begin() + offset(c.from),
                          bytes_.begin() + offset(c.from + c.bytes));
        }
        auto next = staged.begin();
        for (ByteCopy const& c : copies) {
            check_range(c.to, c.bytes);
            std::copy_n(next, c.bytes, bytes_.begin() + offset(c.to));
            next += offset(c.bytes);
        }
    }
    void zero(std::span<ByteRange const> ranges) {
        for (ByteRange const& r : ranges) {
            check_range(r.at, r.bytes);
            std::fill_n(bytes_.begin() + offset(r.at), r.bytes, std::byte{0});
        }
    }
    void read(std::size_t at, std::size_t bytes, std::byte* host_out) const {
        check_range(at, bytes);
        std::copy_n(bytes_.begin() + offset(at), bytes, host_out);
    }
    void write(std::size_t at, std::byte const* host_in, std::size_t bytes) {
        check_range(at, bytes);
        std::copy_n(host_in, bytes, bytes_.begin() + offset(at));
    }

  private:
    static std::ptrdiff_t offset(std::size_t at) { return static_cast<std::ptrdiff_t>(at); }

    void check_range(std::size_t at, std::size_t bytes) const {
        if (at > bytes_.size() || bytes > bytes_.size() - at)
            throw std::logic_error("SeparateHostBlocks: bytes [" + std::to_string(at) + ", " +
                                   std::to_string(at + bytes) + ") outside the storage of " +
                                   std::to_string(bytes_.size()));
    }

    // No copy reads bytes that it or an earlier copy writes, and no two copies write the same
    // bytes: the targets, sorted, are disjoint, and every target a source overlaps belongs to
    // a later copy.
    static void check_contract(std::span<ByteCopy const> copies) {
        std::vector<std::size_t> by_target(copies.size());
        for (std::size_t i = 0; i < copies.size(); ++i) by_target[i] = i;
        std::ranges::sort(by_target, {}, [&](std::size_t i) { return copies[i].to; });
        for (std::size_t k = 1; k < by_target.size(); ++k) {
            ByteCopy const& before = copies[by_target[k - 1]];
            if (before.to + before.bytes > copies[by_target[k]].to)
                throw std::logic_error("SeparateHostBlocks: two copies of a batch write byte " +
                                       std::to_string(copies[by_target[k]].to));
        }
        for (std::size_t j = 0; j < copies.size(); ++j) {
            ByteCopy const& c = copies[j];
            // The first target ending after the source starts, then every one starting before
            // it ends.
            auto k = std::ranges::partition_point(
                by_target, [&](std::size_t i) { return copies[i].to + copies[i].bytes <= c.from; });
            for (; k != by_target.end() && copies[*k].to < c.from + c.bytes; ++k) {
                if (*k <= j)
                    throw std::logic_error("SeparateHostBlocks: copy " + std::to_string(j) +
                                           " of a batch reads bytes copy " + std::to_string(*k) +
                                           " writes");
            }
        }
    }

    std::vector<std::byte> bytes_;
};
static_assert(BlockStorage<SeparateHostBlocks>);

template <ModelConfig Cfg, int BlockSize, class KCodec, class VCodec>
void run_equivalence(std::uint64_t seed, int pool_blocks, int operations) {
    using Host = PagedKvCache<Cfg, BlockSize, KCodec, VCodec, HostBlocks>;
    using Separate = PagedKvCache<Cfg, BlockSize, KCodec, VCodec, SeparateHostBlocks>;
    std::size_t const budget = Host::bytes_per_block * static_cast<std::size_t>(pool_blocks);
    Host host(budget);
    Separate separate(budget);
    BOOST_TEST_MESSAGE("seed " << seed);
    testing::StorageEquivalenceRun run(seed, host, separate);
    testing::StorageCoverage const c = run.run(operations);
    BOOST_TEST_MESSAGE(
        c.prefix_hits << " prefix hits, " << c.cache_writes << " + " << c.direct_writes
                      << " writes (" << c.direct_copies << " copies by make_writable, "
                      << c.refused_writes << " refused), " << c.forks << " forks, " << c.truncations
                      << " truncations, " << c.token_evictions << " token evictions ("
                      << c.refused_token_evictions << " refused), " << c.swap_ins << " swap-ins, "
                      << c.cached_evictions << " prefix blocks evicted");
    BOOST_TEST(c.prefix_hits > 0);
    BOOST_TEST(c.cache_writes > 0);
    BOOST_TEST(c.direct_writes > 0);
    BOOST_TEST(c.direct_copies > 0);
    BOOST_TEST(c.refused_writes > 0);
    BOOST_TEST(c.forks > 0);
    BOOST_TEST(c.truncations > 0);
    BOOST_TEST(c.token_evictions > 0);
    BOOST_TEST(c.swap_ins > 0);
    BOOST_TEST(c.cached_evictions > 0);
    if constexpr (Host::has_sliding) BOOST_TEST(c.refused_token_evictions > 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_block_storage)

BOOST_AUTO_TEST_CASE(a_storage_the_host_cannot_address_holds_the_same_bytes) {
    run_equivalence<tiny, 4, Fp32Codec, Fp32Codec>(901, 20, 20000);
    run_equivalence<tiny, 8, Int8Codec, Bf16Codec>(902, 11, 20000);
}

BOOST_AUTO_TEST_CASE(the_same_bytes_with_sliding_layers) {
    run_equivalence<hybrid, 4, Fp32Codec, Fp32Codec>(911, 60, 20000);
    run_equivalence<hybrid, 2, Bf16Codec, Int8Codec>(912, 110, 20000);
}

// ---- make_writable and mark_written: what write() does, for a model writing the storage ----

using Tiny = PagedKvCache<tiny, 4>;
using Hybrid = PagedKvCache<hybrid, 4>;

// Writes positions [first, end) of every layer through write(), every value `value`.
template <class Cache>
void write_all(Cache& cache, int seq, int first, int end, float value) {
    std::vector<float> const kv(static_cast<std::size_t>(Cache::config.kv_width()), value);
    for (int p = first; p < end; ++p) {
        for (int layer = 0; layer < Cache::config.layers; ++layer)
            cache.write(seq, layer, p, kv.data(), kv.data());
    }
}

BOOST_AUTO_TEST_CASE(make_writable_copies_the_shared_blocks_a_write_would_copy) {
    Tiny cache(Tiny::bytes_per_block * 8);
    int const parent = cache.admit(16);
    BOOST_REQUIRE(cache.reserve(parent, 6));
    write_all(cache, parent, 0, 6, 1.0f);
    int const child = cache.fork(parent);
    BOOST_REQUIRE(cache.reserve(child, 10));  // copies the shared, partly filled last block
    std::vector<BlockId> const before(cache.block_table(child).begin(),
                                      cache.block_table(child).end());
    BOOST_TEST(cache.pool().is_shared(before[0]));
    // Rewrites positions 2..7: block 0 is still shared with the parent, block 1 is the child's.
    cache.make_writable(child, 2, 6);
    BOOST_TEST(cache.block_table(child)[0] != before[0]);
    BOOST_TEST(cache.block_table(child)[1] == before[1]);
    BOOST_TEST(!cache.pool().is_shared(cache.block_table(child)[0]));
    BOOST_TEST(cache.block_table(parent)[0] == before[0]);
    // The copy holds the parent's bytes.
    std::vector<std::byte> parent_bytes, child_bytes;
    cache.export_blocks(parent, parent_bytes);
    cache.export_blocks(child, child_bytes);
    BOOST_TEST(std::ranges::equal(std::span(parent_bytes).first(Tiny::bytes_per_block),
                                  std::span(child_bytes).first(Tiny::bytes_per_block)));
    BOOST_TEST(cache.tokens(child) == 6);
    cache.mark_written(child, 8);
    BOOST_TEST(cache.tokens(child) == 8);
    for (int layer = 0; layer < tiny.layers; ++layer)
        BOOST_TEST(cache.view(child, layer).tokens() == 8);
    cache.mark_written(child, 7);  // never lowers what is written
    BOOST_TEST(cache.tokens(child) == 8);
}

BOOST_AUTO_TEST_CASE(make_writable_without_a_free_block_throws_and_changes_nothing) {
    Tiny cache(Tiny::bytes_per_block * 2);
    int const parent = cache.admit(8);
    BOOST_REQUIRE(cache.reserve(parent, 8));
    write_all(cache, parent, 0, 6, 1.0f);
    int const child = cache.fork(parent);
    BOOST_REQUIRE_EQUAL(cache.free_blocks(), 0);
    std::vector<BlockId> const before(cache.block_table(child).begin(),
                                      cache.block_table(child).end());
    BOOST_CHECK_THROW(cache.make_writable(child, 2, 5), Error);  // two shared blocks, none free
    BOOST_TEST(std::ranges::equal(cache.block_table(child), before));
    BOOST_TEST(cache.used_blocks() == 2);
    cache.release(parent);  // now the child owns both
    cache.make_writable(child, 2, 5);
    BOOST_TEST(std::ranges::equal(cache.block_table(child), before));
}

BOOST_AUTO_TEST_CASE(make_writable_and_mark_written_refuse_what_write_refuses) {
    Tiny cache(Tiny::bytes_per_block * 8);
    int const seq = cache.admit(16);
    BOOST_REQUIRE(cache.reserve(seq, 6));
    write_all(cache, seq, 0, 2, 1.0f);
    BOOST_CHECK_THROW(cache.make_writable(seq, 3, 1), std::logic_error);  // a gap after 2
    BOOST_CHECK_THROW(cache.make_writable(seq, 2, 5), std::logic_error);  // past the reservation
    BOOST_CHECK_THROW(cache.make_writable(seq, -1, 1), std::logic_error);
    BOOST_CHECK_THROW(cache.mark_written(seq, 7), std::logic_error);
    cache.make_writable(seq, 2, 0);  // nothing to do
    // Positions in a block shared with a fork that make_writable never copied.
    int const child = cache.fork(seq);
    BOOST_CHECK_THROW(cache.mark_written(child, 4), std::logic_error);
    BOOST_TEST(cache.tokens(child) == 2);
    cache.make_writable(child, 2, 2);
    cache.mark_written(child, 4);
    BOOST_TEST(cache.tokens(child) == 4);
}

// A sliding group's released block cannot be written, through write() or make_writable; the
// blocks of its window can, and mark_written leaves sliding_from as write() does.
BOOST_AUTO_TEST_CASE(with_sliding_layers_released_blocks_are_refused_like_write) {
    Hybrid cache(Hybrid::bytes_per_block * 40);
    int const seq = cache.admit(40);
    for (int length = 4; length <= 24; length += 4) {
        BOOST_REQUIRE(cache.reserve(seq, length));
        write_all(cache, seq, length - 4, length, 1.0f);
    }
    BOOST_REQUIRE(cache.dropped_blocks(seq) > 0);
    std::vector<float> const kv(static_cast<std::size_t>(hybrid.kv_width()), 2.0f);
    BOOST_CHECK_THROW(cache.write(seq, 0, 0, kv.data(), kv.data()), std::logic_error);
    BOOST_CHECK_THROW(cache.make_writable(seq, 0, 1), std::logic_error);
    // The last position again (inside the window) and two new ones, through the storage path,
    // in a fork: every group's block of position 23 is shared with the parent and is copied.
    int const child = cache.fork(seq);
    BOOST_REQUIRE(cache.reserve(child, 26));
    int const sliding_from = cache.sliding_from(child);
    int const used = cache.used_blocks();
    cache.make_writable(child, 23, 3);
    BOOST_TEST(cache.used_blocks() == used + Hybrid::group_count);
    for (int g = 0; g < Hybrid::group_count; ++g) {
        auto const at = static_cast<std::size_t>(5 * Hybrid::group_count + g);
        BOOST_TEST(cache.block_table(child)[at] != cache.block_table(seq)[at]);
    }
    cache.mark_written(child, 26);
    BOOST_TEST(cache.tokens(child) == 26);
    BOOST_TEST(cache.sliding_from(child) == sliding_from);
}

BOOST_AUTO_TEST_SUITE_END()
