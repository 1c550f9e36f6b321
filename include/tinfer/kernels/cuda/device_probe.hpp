#pragma once
// Whether "no CUDA device" is the truth or a failure. CUDA reports a missing driver and a broken
// one alike through cudaGetDeviceCount's error, so the answer also asks the machine: a GPU node
// under /dev (/dev/nvidia0, ...) or a GPU listed by `nvidia-smi -L` means a GPU is there, and
// CUDA not seeing it is an error to report, never a reason to skip. Plain C++ (no CUDA headers),
// so the decision is tested on the CPU (tests/cuda/device_probe_test.cpp).
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace tinfer::kernels::cuda {

// What cudaGetDeviceCount said, in the terms the decision needs.
enum class CudaDeviceQuery {
    ok,                   // it succeeded (the count may still be 0)
    no_device_or_driver,  // cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary
    other_error,          // anything else: initialization failed, the device is broken, ...
};

// The outcome: `devices` to use (0: none, skip), or `failure` (non-empty) to report.
struct DeviceCountDecision {
    int devices = 0;
    std::string failure;
};

// cuda_count is used only when query is ok; gpu_visible: the machine shows a GPU (see below).
inline DeviceCountDecision decide_device_count(CudaDeviceQuery query, int cuda_count,
                                               bool gpu_visible, std::string_view cuda_error = {}) {
    std::string const said =
        cuda_error.empty() ? std::string() : " (" + std::string(cuda_error) + ")";
    switch (query) {
        case CudaDeviceQuery::ok:
            if (cuda_count > 0) return {cuda_count, {}};
            if (gpu_visible)
                return {0,
                        "CUDA sees no device, but this machine shows a GPU (/dev/nvidia* or "
                        "nvidia-smi): CUDA_VISIBLE_DEVICES or the driver hides it"};
            return {0, {}};
        case CudaDeviceQuery::no_device_or_driver:
            if (gpu_visible)
                return {0, "CUDA reports no usable device or driver" + said +
                               ", but this machine shows a GPU (/dev/nvidia* or nvidia-smi): the "
                               "driver and the CUDA runtime do not work together"};
            return {0, {}};
        case CudaDeviceQuery::other_error:
            return {0, "cudaGetDeviceCount failed" + said +
                           (gpu_visible ? ", and this machine shows a GPU" : "")};
    }
    return {0, "decide_device_count: unknown query result"};
}

// A GPU node in `dev_directory`: nvidia0, nvidia1, ... (not nvidiactl or nvidia-uvm, which a
// driver without a GPU also makes).
inline bool gpu_device_node_in(std::filesystem::path const& dev_directory) {
    std::error_code error;
    for (auto const& entry : std::filesystem::directory_iterator(dev_directory, error)) {
        std::string const name = entry.path().filename().string();
        constexpr std::string_view prefix = "nvidia";
        if (name.size() > prefix.size() && name.starts_with(prefix) &&
            name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
            return true;
    }
    return false;
}

// `command` (a shell command line, nvidia-smi -L in practice) prints a line starting "GPU ".
inline bool command_lists_gpu(char const* command) {
    FILE* pipe = ::popen(command, "r");
    if (pipe == nullptr) return false;
    bool found = false;
    char line[512];
    while (std::fgets(line, sizeof line, pipe) != nullptr)
        if (std::string_view(line).starts_with("GPU ")) found = true;
    (void)::pclose(pipe);
    return found;
}

// Whether this machine shows a GPU whatever CUDA says.
inline bool machine_shows_gpu() {
    return gpu_device_node_in("/dev") || command_lists_gpu("nvidia-smi -L 2>/dev/null");
}

}  // namespace tinfer::kernels::cuda
