// kv::DeviceBlocks, PagedKvCache's block storage in GPU memory, against HostBlocks:
//  - batches of copies (the single-launch path and the staged one, for copies whose targets
//    are other copies' sources, as token eviction's chains of moves are), zeroing, reads and
//    writes at any alignment, more copies than a grid's y dimension holds, give the bytes the
//    host storage gives;
//  - the cache over DeviceBlocks (on a stream of its own) holds bitwise what the cache over
//    HostBlocks holds after the same random operations (tests/support/kv_storage_equivalence.hpp),
//    with and without sliding layers, through quantizing codecs;
//  - an offset outside the storage is refused before anything is launched.
// Exits 77 (skipped) without a GPU.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <tinfer/kv/block_storage.hpp>
#include <tinfer/kv/device_blocks.hpp>
#include <tinfer/kv/paged_cache.hpp>

#include "cuda_testing.cuh"
#include "kv_storage_equivalence.hpp"

using namespace tinfer;
using namespace tinfer::cuda_testing;
using tinfer::kv::ByteCopy;
using tinfer::kv::ByteRange;
using tinfer::kv::DeviceBlocks;
using tinfer::kv::HostBlocks;

namespace {

using testing::storage_shapes::hybrid;
using testing::storage_shapes::tiny;

std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
    std::vector<std::byte> out(n);
    for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
    return out;
}

std::vector<std::byte> contents(DeviceBlocks const& device) {
    std::vector<std::byte> out(device.size());
    device.read(0, out.size(), out.data());
    return out;
}

// Both storages filled with the same random bytes.
void fill_both(std::mt19937_64& rng, HostBlocks& host, DeviceBlocks& device) {
    std::vector<std::byte> const bytes = random_bytes(rng, host.size());
    host.write(0, bytes.data(), bytes.size());
    device.write(0, bytes.data(), bytes.size());
}

bool same_bytes(HostBlocks const& host, DeviceBlocks const& device) {
    std::vector<std::byte> const on_device = contents(device);
    return on_device.size() == host.size() &&
           std::equal(on_device.begin(), on_device.end(), host.data());
}

void test_batches(Checker& checker, std::mt19937_64& rng, cudaStream_t stream) {
    constexpr std::size_t bytes = 1 << 18;
    HostBlocks host(bytes);
    DeviceBlocks device(bytes, stream);
    checker.expect(same_bytes(host, device), "a new DeviceBlocks is zeroed, as HostBlocks is");

    // Whole 4 KiB blocks, no target a source: the single-launch path with word copies.
    fill_both(rng, host, device);
    std::vector<ByteCopy> const blocks{{.to = 4096, .from = 0, .bytes = 4096},
                                       {.to = 12288, .from = 8192, .bytes = 4096}};
    host.copy(blocks);
    device.copy(blocks);
    checker.expect(same_bytes(host, device), "whole-block copies");

    // A chain as token eviction makes: slot i takes slot i + 1 (vectors of 36 bytes, unaligned),
    // so every copy's target is an earlier copy's source: the staged path.
    fill_both(rng, host, device);
    std::vector<ByteCopy> chain;
    for (std::size_t i = 0; i < 200; ++i)
        chain.push_back({.to = 100 + 36 * i, .from = 100 + 36 * (i + 1), .bytes = 36});
    host.copy(chain);
    device.copy(chain);
    checker.expect(same_bytes(host, device), "a chain of overlapping moves (staged)");

    // More copies than grid y holds (65,535), so each CUDA block strides over several: 1-byte
    // copies, apart and then as a chain (staged).
    fill_both(rng, host, device);
    std::vector<ByteCopy> apart, chained;
    for (std::size_t i = 0; i < 70000; ++i) {
        apart.push_back({.to = 131072 + i, .from = i, .bytes = 1});
        chained.push_back({.to = 80000 + i, .from = 80000 + i + 1, .bytes = 1});
    }
    host.copy(apart);
    device.copy(apart);
    checker.expect(same_bytes(host, device), "70,000 copies in one batch");
    host.copy(chained);
    device.copy(chained);
    checker.expect(same_bytes(host, device), "a chain of 70,000 copies in one batch (staged)");

    // Zeroing: whole blocks (words) and odd vectors (bytes).
    fill_both(rng, host, device);
    std::vector<ByteRange> zeros{{.at = 8192, .bytes = 4096}};
    for (std::size_t i = 0; i < 100; ++i) zeros.push_back({.at = 20001 + 37 * i, .bytes = 13});
    host.zero(zeros);
    device.zero(zeros);
    checker.expect(same_bytes(host, device), "zeroing");

    // Reads and writes at odd offsets.
    std::vector<std::byte> const piece = random_bytes(rng, 333);
    host.write(1001, piece.data(), piece.size());
    device.write(1001, piece.data(), piece.size());
    std::vector<std::byte> back(piece.size());
    device.read(1001, back.size(), back.data());
    checker.expect(back == piece && same_bytes(host, device), "read and write at odd offsets");

    bool refused = false;
    try {
        device.write(bytes - 10, piece.data(), piece.size());
    } catch (Error const&) {
        refused = true;
    }
    checker.expect(refused, "a write past the storage is refused");
    refused = false;
    try {
        std::vector<ByteCopy> const outside{{.to = bytes, .from = 0, .bytes = 1}};
        device.copy(outside);
    } catch (Error const&) {
        refused = true;
    }
    checker.expect(refused && same_bytes(host, device),
                   "a copy past the storage is refused and nothing is copied");
}

template <ModelConfig Cfg, int BlockSize, class KCodec, class VCodec>
void test_cache(Checker& checker, std::uint64_t seed, int pool_blocks, int operations,
                cudaStream_t stream) {
    using Host = kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec, HostBlocks>;
    using Device = kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec, DeviceBlocks>;
    std::size_t const budget = Host::bytes_per_block * static_cast<std::size_t>(pool_blocks);
    Host host(budget);
    Device device(budget, stream);
    checker.expect(device.storage().stream() == stream, "the cache's storage uses its stream");
    std::string const name = std::string(Host::has_sliding ? "sliding" : "global") +
                             " layers, block size " + std::to_string(BlockSize) + ", " +
                             std::string(KCodec::name) + "/" + std::string(VCodec::name);
    try {
        testing::StorageEquivalenceRun run(seed, host, device);
        testing::StorageCoverage const c = run.run(operations);
        std::printf(
            "%s: %d prefix hits, %d + %d writes (%d copies by make_writable), %d forks, "
            "%d token evictions, %d swap-ins\n",
            name.c_str(), c.prefix_hits, c.cache_writes, c.direct_writes, c.direct_copies, c.forks,
            c.token_evictions, c.swap_ins);
        checker.expect(c.prefix_hits > 0 && c.cache_writes > 0 && c.direct_writes > 0 &&
                           c.direct_copies > 0 && c.forks > 0 && c.token_evictions > 0 &&
                           c.swap_ins > 0,
                       name + ": every path ran");
        checker.expect(true, name + ": the device cache holds the host cache's bytes");
    } catch (std::exception const& error) {
        checker.expect(false, name + " (seed " + std::to_string(seed) + "): " + error.what());
    }
}

}  // namespace

int main() {
    return run_device_tests("cuda_device_blocks_test", [](Checker& checker) {
        auto rng = seeded_rng(test_seed());
        cudaStream_t stream = nullptr;
        kernels::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags");
        test_batches(checker, rng, stream);
        test_batches(checker, rng, nullptr);  // the default stream
        test_cache<tiny, 4, kv::Fp32Codec, kv::Fp32Codec>(checker, rng(), 20, 3000, stream);
        test_cache<tiny, 8, kv::Int8Codec, kv::Bf16Codec>(checker, rng(), 11, 3000, stream);
        test_cache<hybrid, 4, kv::Fp32Codec, kv::Fp32Codec>(checker, rng(), 60, 3000, stream);
        test_cache<hybrid, 2, kv::Bf16Codec, kv::Int8Codec>(checker, rng(), 110, 3000, stream);
        kernels::cuda::check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    });
}
