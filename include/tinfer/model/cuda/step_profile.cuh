#pragma once
// StepProfile: where a device step's time goes, by part of the layer (the per-kernel breakdown
// of issue 15's decode target). CudaOps records an event on the step's stream after each op
// when a profile is attached (DeviceForwardPass::set_profile); after the step, the time between
// consecutive events is summed by part over every layer. Profiling adds an event per op, so a
// profiled step is timed apart from the throughput runs.
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::cuda {

class StepProfile {
  public:
    StepProfile() = default;
    StepProfile(StepProfile const&) = delete;
    StepProfile& operator=(StepProfile const&) = delete;
    ~StepProfile() {
        for (cudaEvent_t e : pool_) (void)cudaEventDestroy(e);  // a destructor cannot report
    }

    // Starts a step's record (forgets the previous one).
    void begin(cudaStream_t stream) {
        marks_.clear();
        mark("start", stream);
    }
    // The kernels queued since the previous mark belong to `part`.
    void mark(char const* part, cudaStream_t stream) {
        if (marks_.size() == pool_.size()) {
            cudaEvent_t event = nullptr;
            kernels::cuda::check(cudaEventCreate(&event), "cudaEventCreate (step profile)");
            pool_.push_back(event);
        }
        cudaEvent_t const event = pool_[marks_.size()];
        kernels::cuda::check(cudaEventRecord(event, stream), "cudaEventRecord (step profile)");
        marks_.push_back(part);
    }
    // Milliseconds per part over the recorded step, in the order parts first ran; waits for the
    // step's last event.
    std::vector<std::pair<std::string, double>> totals() const {
        std::vector<std::pair<std::string, double>> parts;
        if (marks_.size() < 2) return parts;
        kernels::cuda::check(cudaEventSynchronize(pool_[marks_.size() - 1]),
                             "cudaEventSynchronize (step profile)");
        for (std::size_t i = 1; i < marks_.size(); ++i) {
            float ms = 0;
            kernels::cuda::check(cudaEventElapsedTime(&ms, pool_[i - 1], pool_[i]),
                                 "cudaEventElapsedTime (step profile)");
            std::string const part = marks_[i];
            auto it = parts.begin();
            while (it != parts.end() && it->first != part) ++it;
            if (it == parts.end()) {
                parts.emplace_back(part, ms);
            } else {
                it->second += ms;
            }
        }
        return parts;
    }

  private:
    std::vector<cudaEvent_t> pool_;  // reused across steps
    std::vector<char const*> marks_;
};

}  // namespace tinfer::cuda
