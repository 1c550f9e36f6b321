#pragma once
// kv::DeviceBlocks: a PagedKvCache's blocks in GPU memory (kv/block_storage.hpp's contract), the
// storage of the Engine's CUDA backend. The cache's bookkeeping stays on the host; the device
// model's kernels append and read K/V in these bytes in place, and the cache's own data moves
// (copy-on-write, swap out and in, hand-off export and import) are CUDA runtime copies.
//
// Plain C++ over the CUDA runtime API (no kernel), so the Engine that owns the cache compiles
// with the host compiler; link CUDA::cudart. Every operation has finished when it returns (it
// synchronizes its stream), so the host's bookkeeping never runs ahead of the bytes; the copies
// of one batch are queued back to back before that one wait.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <tinfer/core/error.hpp>
#include <tinfer/kv/block_storage.hpp>

namespace tinfer::kv {

class DeviceBlocks {
  public:
    static constexpr bool host_addressable = false;

    // `bytes` of device memory, zeroed; ops run on `stream` (the legacy default stream unless
    // given: the device model's stream is created blocking, so it orders after them).
    explicit DeviceBlocks(std::size_t bytes, cudaStream_t stream = nullptr)
        : size_(bytes), stream_(stream) {
        if (size_ == 0) return;
        check(cudaMalloc(reinterpret_cast<void**>(&data_), size_), "cudaMalloc KV blocks");
        check(cudaMemsetAsync(data_, 0, size_, stream_), "cudaMemsetAsync KV blocks");
        wait("zeroing KV blocks");
    }
    DeviceBlocks(DeviceBlocks&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)),
          stream_(other.stream_) {}
    DeviceBlocks& operator=(DeviceBlocks&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
            stream_ = other.stream_;
        }
        return *this;
    }
    DeviceBlocks(DeviceBlocks const&) = delete;
    DeviceBlocks& operator=(DeviceBlocks const&) = delete;
    ~DeviceBlocks() { release(); }

    std::size_t size() const { return size_; }
    cudaStream_t stream() const { return stream_; }
    // Device addresses: for the kernels, never dereferenced on the host.
    std::byte* data() { return data_; }
    std::byte const* data() const { return data_; }

    void copy(std::span<ByteCopy const> copies) {
        for (ByteCopy const& c : copies) {
            check_range(c.to, c.bytes, "copy target");
            check_range(c.from, c.bytes, "copy source");
            check(cudaMemcpyAsync(data_ + c.to, data_ + c.from, c.bytes, cudaMemcpyDeviceToDevice,
                                  stream_),
                  "cudaMemcpyAsync KV block copy");
        }
        if (!copies.empty()) wait("KV block copies");
    }
    void zero(std::span<ByteRange const> ranges) {
        for (ByteRange const& r : ranges) {
            check_range(r.at, r.bytes, "zeroed range");
            check(cudaMemsetAsync(data_ + r.at, 0, r.bytes, stream_), "cudaMemsetAsync KV range");
        }
        if (!ranges.empty()) wait("KV zeroing");
    }
    void read(std::size_t at, std::size_t bytes, std::byte* host_out) const {
        check_range(at, bytes, "read");
        check(cudaMemcpyAsync(host_out, data_ + at, bytes, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync KV blocks to host");
        wait("KV blocks to host");
    }
    void write(std::size_t at, std::byte const* host_in, std::size_t bytes) {
        check_range(at, bytes, "write");
        check(cudaMemcpyAsync(data_ + at, host_in, bytes, cudaMemcpyHostToDevice, stream_),
              "cudaMemcpyAsync KV blocks to device");
        wait("KV blocks to device");
    }

  private:
    static void check(cudaError_t status, char const* what) {
        if (status != cudaSuccess)
            throw Error(std::string("kv::DeviceBlocks: ") + what + ": " +
                        cudaGetErrorString(status));
    }
    void wait(char const* what) const { check(cudaStreamSynchronize(stream_), what); }
    void check_range(std::size_t at, std::size_t bytes, char const* what) const {
        if (at > size_ || bytes > size_ - at)
            throw Error(std::string("kv::DeviceBlocks: ") + what + " of " + std::to_string(bytes) +
                        " bytes at " + std::to_string(at) + " outside the " +
                        std::to_string(size_) + " bytes");
    }
    void release() noexcept {
        if (data_ != nullptr) (void)cudaFree(data_);  // a destructor cannot report
        data_ = nullptr;
        size_ = 0;
    }

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    cudaStream_t stream_ = nullptr;
};

static_assert(BlockStorage<DeviceBlocks>);

}  // namespace tinfer::kv
