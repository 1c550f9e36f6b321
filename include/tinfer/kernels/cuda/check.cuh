#pragma once
// Every CUDA runtime call goes through check(): a failure becomes tinfer::Error naming the call
// and where it was made, so a misconfigured launch is reported where it happens rather than at
// the next synchronisation.
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/cuda/device_probe.hpp>
#include <tinfer/kernels/cuda/grid_limits.hpp>

namespace tinfer::kernels::cuda {

// A CUDA runtime failure; `code` keeps the original error for callers that branch on it.
struct CudaError : Error {
    cudaError_t code;
    CudaError(cudaError_t error, std::string const& what)
        : Error(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")"),
          code(error) {}
};

// Kernel execution failures: a kernel that has not run yet cannot have caused them, so when a
// launch reports one, it belongs to work queued earlier (CUDA reports it at the next call).
inline bool is_earlier_kernel_failure(cudaError_t error) {
    switch (error) {
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
        case cudaErrorLaunchTimeout:
        case cudaErrorAssert:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorECCUncorrectable:
            return true;
        default:
            return false;
    }
}

inline void check(cudaError_t error, char const* what,
                  std::source_location where = std::source_location::current()) {
    if (error == cudaSuccess) return;
    // A synchronisation or copy that reports a kernel's execution failure did not cause it.
    std::string const blame =
        is_earlier_kernel_failure(error) ? " (a kernel queued earlier failed; reported here)" : "";
    throw CudaError(error, std::string(what) + " at " + where.file_name() + ":" +
                               std::to_string(where.line()) + blame);
}

inline std::string launch_site(char const* kernel, std::source_location const& where) {
    return std::string(kernel) + " at " + where.file_name() + ":" + std::to_string(where.line());
}

// Call right before every <<<...>>>: an error already pending (an unchecked earlier launch, or
// an asynchronous failure CUDA has noticed) is reported as earlier, so check_launch after the
// launch blames only what the launch itself did.
inline void check_before_launch(char const* kernel,
                                std::source_location where = std::source_location::current()) {
    if (cudaError_t const pending = cudaGetLastError(); pending != cudaSuccess)
        throw CudaError(pending,
                        "an earlier CUDA call or kernel failed (error pending before "
                        "launching " +
                            launch_site(kernel, where) + ")");
}

// Launch errors (bad configuration, too much shared memory) surface only through
// cudaGetLastError; call this right after every <<<...>>>.
inline void check_launch(char const* kernel,
                         std::source_location where = std::source_location::current()) {
    cudaError_t const error = cudaGetLastError();
    if (error == cudaSuccess) return;
    if (is_earlier_kernel_failure(error))
        throw CudaError(error, "a kernel queued before " + launch_site(kernel, where) +
                                   " failed (reported at this launch)");
    throw CudaError(error, "launching " + launch_site(kernel, where));
}

// A grid CUDA cannot launch (grid_limits.hpp) is refused naming the kernel (a launch would
// fail with an opaque invalid configuration).
inline void check_grid(dim3 grid, char const* kernel) {
    if (!grid_fits(grid.x, grid.y, grid.z))
        throw Error(std::string(kernel) + ": grid (" + std::to_string(grid.x) + ", " +
                    std::to_string(grid.y) + ", " + std::to_string(grid.z) +
                    ") cannot be launched (1 to " + std::to_string(max_grid_x) +
                    " blocks in x, 1 to " + std::to_string(max_grid_yz) + " in y and z)");
}

// Devices visible to this process: 0 when there is truly no GPU (no driver, no device: tests
// and benchmarks skip), a CudaError when CUDA fails on a machine that shows a GPU
// (device_probe.hpp), so a broken setup never passes as "no device".
inline int device_count() {
    int count = 0;
    cudaError_t const error = cudaGetDeviceCount(&count);
    (void)cudaGetLastError();  // a failed query leaves its error pending; it is handled here
    CudaDeviceQuery const query = error == cudaSuccess ? CudaDeviceQuery::ok
                                  : error == cudaErrorNoDevice ||
                                          error == cudaErrorInsufficientDriver ||
                                          error == cudaErrorStubLibrary
                                      ? CudaDeviceQuery::no_device_or_driver
                                      : CudaDeviceQuery::other_error;
    // The machine is asked only when CUDA found nothing (nvidia-smi takes a while).
    bool const gpu_visible = query == CudaDeviceQuery::ok && count > 0 ? true : machine_shows_gpu();
    DeviceCountDecision const decision = decide_device_count(
        query, count, gpu_visible, error == cudaSuccess ? "" : cudaGetErrorName(error));
    if (!decision.failure.empty())
        throw CudaError(error == cudaSuccess ? cudaErrorNoDevice : error, decision.failure);
    return decision.devices;
}

// Runs a setup step once per device (function attributes such as a kernel's dynamic shared
// memory limit belong to the current device's context: a process that uses several devices
// must set them on each). One instance per setup step, usually a function-local static.
class PerDeviceOnce {
  public:
    // On the current device.
    template <class Setup>
    void operator()(Setup&& setup) {
        int device = 0;
        check(cudaGetDevice(&device), "cudaGetDevice");
        (*this)(device, std::forward<Setup>(setup));
    }

    // On `device`, which the caller has made current.
    template <class Setup>
    void operator()(int device, Setup&& setup) {
        if (device < 0) throw Error("PerDeviceOnce: device " + std::to_string(device));
        std::lock_guard const lock(mutex_);
        auto const index = static_cast<std::size_t>(device);
        if (index >= done_.size()) done_.resize(index + 1, false);
        if (done_[index]) return;
        setup();  // throws: not marked done, tried again next time
        done_[index] = true;
    }

  private:
    std::mutex mutex_;
    std::vector<bool> done_;
};

// Integer division rounding up, for grid sizes.
template <class Int>
__host__ __device__ constexpr Int ceil_div(Int numerator, Int denominator) {
    return (numerator + denominator - 1) / denominator;
}

}  // namespace tinfer::kernels::cuda
