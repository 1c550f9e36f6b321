#pragma once
// The device half of cuda::DeviceModel (device_model.hpp says how a program uses it): compiled
// by nvcc in the one translation unit that instantiates the models a program serves on a GPU.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <tinfer/kv/device_blocks.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/cuda/cache_step.hpp>
#include <tinfer/model/cuda/device_forward.cuh>
#include <tinfer/model/cuda/device_model.hpp>
#include <tinfer/model/cuda/step_plan.hpp>

namespace tinfer::cuda {

template <ModelConfig Cfg, class Cache>
struct DeviceModel<Cfg, Cache>::Device {
    explicit Device(model::ModelWeights<Cfg> const& weights) : pass(weights) {}
    DeviceForwardPass<Cfg, Cache> pass;
    std::vector<DeviceChunk> chunks;  // reused: a decode step allocates nothing here
};

template <ModelConfig Cfg, class Cache>
DeviceModel<Cfg, Cache>::DeviceModel(model::ModelWeights<Cfg> const& weights)
    : device_(std::make_unique<Device>(weights)) {}

template <ModelConfig Cfg, class Cache>
DeviceModel<Cfg, Cache>::~DeviceModel() = default;

template <ModelConfig Cfg, class Cache>
DeviceModel<Cfg, Cache>::DeviceModel(DeviceModel&&) noexcept = default;

template <ModelConfig Cfg, class Cache>
DeviceModel<Cfg, Cache>& DeviceModel<Cfg, Cache>::operator=(DeviceModel&&) noexcept = default;

template <ModelConfig Cfg, class Cache>
void DeviceModel<Cfg, Cache>::reserve_steps(int max_rows, int max_chunks) {
    device_->pass.reserve({.max_chunks = max_chunks < max_rows ? max_chunks : max_rows,
                           .max_rows = max_rows,
                           .max_logit_rows = max_rows,
                           .max_context = Cfg.max_context});
}

template <ModelConfig Cfg, class Cache>
void DeviceModel<Cfg, Cache>::run_step(std::span<SequenceChunk const> chunks, Cache& cache,
                                       std::span<float> logits, int layers) const {
    if (layers != Cfg.layers)
        throw RequestError("a forward over the first " + std::to_string(layers) +
                           " layers (self-speculative drafting) is not implemented on the CUDA "
                           "backend: the cache would count the other layers' positions written");
    DeviceStepPlan const plan =
        plan_cache_step(chunks, cache, device_->pass.limits(), device_->chunks);
    device_->pass.run(plan, cache.storage().data(), logits, layers, [] {});
    // Only now are the positions written (a failed step threw above and marks nothing).
    commit_cache_step(plan, cache);
}

}  // namespace tinfer::cuda
