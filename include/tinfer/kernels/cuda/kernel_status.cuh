#pragma once
// How a kernel refuses arguments only the device can see (lengths in device arrays): instead of
// dropping the rows it cannot serve, it records the first violation in a KernelStatus word the
// caller passed, and the host turns that into a tinfer::Error once the stream has run
// (DeviceStatus::throw_if_failed). A kernel given no status word traps instead, so the
// violation still fails (the context's next call reports a launch failure) rather than
// leaving outputs silently unwritten.
#include <cuda_runtime.h>

#include <string>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/cuda/kernel_status.hpp>

namespace tinfer::kernels::cuda {

__device__ inline void report_status(KernelStatus* status, KernelStatusCode code, int seq,
                                     int value, int limit) {
    if (status == nullptr) __trap();  // nowhere to report: fail the launch rather than drop rows
    if (atomicCAS(&status->code, 0, static_cast<int>(code)) == 0) {
        status->seq = seq;
        status->value = value;
        status->limit = limit;
    }
}

// One status word in device memory: reset before the launches, read after them.
class DeviceStatus {
  public:
    DeviceStatus() : word_(1) { word_.fill_bytes(0); }

    KernelStatus* get() { return word_.data(); }

    void reset(cudaStream_t stream = nullptr) {
        check(cudaMemsetAsync(word_.data(), 0, sizeof(KernelStatus), stream),
              "cudaMemsetAsync kernel status");
    }
    // Waits for `stream`, then throws the first violation recorded since reset (tinfer::Error).
    KernelStatus read(cudaStream_t stream = nullptr) {
        KernelStatus status;
        check(cudaMemcpyAsync(&status, word_.data(), sizeof status, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync kernel status");
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize kernel status");
        return status;
    }
    void throw_if_failed(cudaStream_t stream = nullptr) { throw_if_refused(read(stream)); }

  private:
    DeviceBuffer<KernelStatus> word_;
};

}  // namespace tinfer::kernels::cuda
