#pragma once
// Owning device memory for trivially copyable elements: one allocation, freed once, movable
// and not copyable. Kernels take raw pointers and extents; this only decides lifetime.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

template <class T>
class DeviceBuffer {
    static_assert(std::is_trivially_copyable_v<T>,
                  "DeviceBuffer<T>: T must be trivially copyable (it is moved with cudaMemcpy)");

  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t count) : count_(count) {
        if (count_ > 0) check(cudaMalloc(&data_, bytes()), "cudaMalloc");
    }
    explicit DeviceBuffer(std::span<T const> host) : DeviceBuffer(host.size()) { copy_from(host); }
    explicit DeviceBuffer(std::vector<T> const& host) : DeviceBuffer(std::span<T const>(host)) {}

    DeviceBuffer(DeviceBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
    ~DeviceBuffer() { release(); }

    T* data() { return data_; }
    T const* data() const { return data_; }
    std::size_t size() const { return count_; }
    std::size_t bytes() const { return count_ * sizeof(T); }

    void copy_from(std::span<T const> host) {
        if (host.size() != count_) throw Error("DeviceBuffer::copy_from: size mismatch");
        if (count_ > 0)
            check(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice),
                  "cudaMemcpy host to device");
    }
    std::vector<T> to_host() const {
        std::vector<T> host(count_);
        if (count_ > 0)
            check(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy device to host");
        return host;
    }
    // Every byte set to `byte`: 0xff makes every float (and f16/bf16) a NaN, for poisoning.
    void fill_bytes(int byte) {
        if (count_ > 0) check(cudaMemset(data_, byte, bytes()), "cudaMemset");
    }

  private:
    void release() noexcept {
        if (data_ != nullptr) (void)cudaFree(data_);  // a destructor cannot report; see check()
        data_ = nullptr;
        count_ = 0;
    }

    T* data_ = nullptr;
    std::size_t count_ = 0;
};

}  // namespace tinfer::kernels::cuda
