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

namespace tinfer::kernels::cuda {

enum class KernelStatusCode : int {
    ok = 0,
    context_beyond_max_context_length,  // decode: context_lengths[seq] > max_context_length
    empty_context,                      // decode: context_lengths[seq] < 1
    queries_beyond_max_queries,         // prefill: a chunk longer than max_queries
    context_shorter_than_queries,       // prefill: fewer cached positions than chunk queries
};

// The first violation a launch (or a step of launches) found; code 0: none.
struct KernelStatus {
    int code = 0;
    int seq = 0;    // the sequence (index in the launch) that was refused
    int value = 0;  // what it had
    int limit = 0;  // what the arguments allowed
};

__device__ inline void report_status(KernelStatus* status, KernelStatusCode code, int seq,
                                     int value, int limit) {
    if (status == nullptr) __trap();  // nowhere to report: fail the launch rather than drop rows
    if (atomicCAS(&status->code, 0, static_cast<int>(code)) == 0) {
        status->seq = seq;
        status->value = value;
        status->limit = limit;
    }
}

inline std::string describe(KernelStatus const& status) {
    std::string const seq = "sequence " + std::to_string(status.seq) + ": ";
    std::string const value = std::to_string(status.value);
    std::string const limit = std::to_string(status.limit);
    switch (static_cast<KernelStatusCode>(status.code)) {
        case KernelStatusCode::ok:
            return "ok";
        case KernelStatusCode::context_beyond_max_context_length:
            return "decode_attention: " + seq + "context length " + value +
                   " exceeds the launch's max_context_length " + limit;
        case KernelStatusCode::empty_context:
            return "decode_attention: " + seq + "context length " + value +
                   " (the new token must be cached first)";
        case KernelStatusCode::queries_beyond_max_queries:
            return "prefill_attention: " + seq + value +
                   " queries exceed the launch's max_queries " + limit;
        case KernelStatusCode::context_shorter_than_queries:
            return "prefill_attention: " + seq + "context length " + value +
                   " is shorter than its " + limit +
                   " queries (their K and V must be cached first)";
    }
    return "kernel status code " + std::to_string(status.code);
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
    void throw_if_failed(cudaStream_t stream = nullptr) {
        KernelStatus const status = read(stream);
        if (status.code != 0) throw Error(describe(status));
    }

  private:
    DeviceBuffer<KernelStatus> word_;
};

}  // namespace tinfer::kernels::cuda
