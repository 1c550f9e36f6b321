#pragma once
// Where PagedKvCache keeps its blocks' bytes. The cache owns the bookkeeping (allocator, block
// tables, reference counts, copy-on-write, prefix cache, token eviction); a BlockStorage owns
// only the bytes, [blocks][bytes_per_block], and every touch of them goes through it. HostBlocks
// keeps them in host memory; kv/device_blocks.hpp keeps them in GPU memory, where the model's
// kernels read and append K/V in place.
//
// Copies and zeroing come in batches because on a GPU each call is a launch: token eviction
// moves many small K/V vectors, and one launch per vector would cost more than the data.
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace tinfer::kv {

// `bytes` bytes from offset `from` to offset `to` of one storage.
struct ByteCopy {
    std::size_t to = 0;
    std::size_t from = 0;
    std::size_t bytes = 0;
};

// `bytes` bytes at offset `at` of one storage.
struct ByteRange {
    std::size_t at = 0;
    std::size_t bytes = 0;
};

// A batch of copies means: the copies applied one after another in the given order. The caller
// guarantees that no copy reads bytes an earlier copy of the batch wrote, that no two copies
// write the same bytes and that no copy's source overlaps its own target; then applying them all
// at once (every source read before any target is written, as a GPU must when copies run side by
// side) gives the same bytes, so a storage may do either. A batch of ranges to zero may
// overlap.
//
// host_addressable: data() points at the bytes in host memory, and the cache reads and encodes
// in place there. Otherwise data() is the storage's own address (a device pointer), which the
// host must never dereference, and the host reaches the bytes only through read and write.
template <class S>
concept BlockStorage = std::constructible_from<S, std::size_t> &&
    requires(S& storage, S const& const_storage, std::size_t offset, std::byte* host_out,
             std::byte const* host_in, std::span<ByteCopy const> copies,
             std::span<ByteRange const> ranges) {
    {std::bool_constant<S::host_addressable>{}};  // a compile-time constant
    { const_storage.size() } -> std::same_as<std::size_t>;
    { storage.data() } -> std::same_as<std::byte*>;
    { const_storage.data() } -> std::same_as<std::byte const*>;
    storage.copy(copies);
    storage.zero(ranges);
    const_storage.read(offset, offset, host_out);  // (at, bytes, host_out)
    storage.write(offset, host_in, offset);        // (at, host_in, bytes)
};

// The blocks in host memory, zeroed at construction.
class HostBlocks {
  public:
    static constexpr bool host_addressable = true;

    explicit HostBlocks(std::size_t bytes) : bytes_(bytes) {}

    std::size_t size() const { return bytes_.size(); }
    std::byte* data() { return bytes_.data(); }
    std::byte const* data() const { return bytes_.data(); }

    // In order: the batch's contract makes that equal to all at once, without a staging copy.
    void copy(std::span<ByteCopy const> copies) {
        for (ByteCopy const& c : copies) std::memcpy(data() + c.to, data() + c.from, c.bytes);
    }
    void zero(std::span<ByteRange const> ranges) {
        for (ByteRange const& r : ranges) std::memset(data() + r.at, 0, r.bytes);
    }
    void read(std::size_t at, std::size_t bytes, std::byte* host_out) const {
        std::memcpy(host_out, data() + at, bytes);
    }
    void write(std::size_t at, std::byte const* host_in, std::size_t bytes) {
        std::memcpy(data() + at, host_in, bytes);
    }

  private:
    std::vector<std::byte> bytes_;  // [blocks][bytes_per_block]
};

static_assert(BlockStorage<HostBlocks>);

}  // namespace tinfer::kv
