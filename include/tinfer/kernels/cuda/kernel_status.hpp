#pragma once
// The status word a kernel fills when it refuses arguments only the device can see (lengths in
// device arrays), and its text: plain C++, so the messages are tested on the CPU. The device side
// (report_status, DeviceStatus) is kernel_status.cuh.
#include <string>

#include <tinfer/core/error.hpp>

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

// What the host does with a status read back after the kernels ran: a refusal becomes the
// tinfer::Error describe() words, so the caller sees the device's refusal as an exception.
inline void throw_if_refused(KernelStatus const& status) {
    if (status.code != 0) throw Error(describe(status));
}

}  // namespace tinfer::kernels::cuda
