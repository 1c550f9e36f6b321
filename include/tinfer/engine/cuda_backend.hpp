#pragma once
// The Engine's CUDA backend: Engine<model::Llama<Cfg>, Scheduler, Cuda, PagedKv<...>> runs its
// steps with cuda::DeviceModel<Cfg, Cache> (the one decoder layer over the device's ops) and
// keeps its paged cache's blocks in device memory (kv::DeviceBlocks); the scheduler, the cache's
// tables, sampling and streaming are the host engine's own.
//
// Plain C++ (compile the engine with the host compiler, link CUDA::cudart); the device half of
// each model is instantiated in one .cu file (model/cuda/device_model.hpp shows how).
#include <concepts>

#include <tinfer/core/backend.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/kv/device_blocks.hpp>
#include <tinfer/model/cuda/device_model.hpp>
#include <tinfer/model/llama.hpp>

namespace tinfer {

// The device cache of an engine on the CUDA backend with the KV layout Kv. (Spelled out, not
// through Kv's member alias template or OnBackend: nvcc 13's host code loses a class-type
// template argument reached through either, "'__T61' was not declared in this scope".)
template <ModelConfig Cfg, class Kv = PagedKv<>>
using CudaCache =
    kv::PagedKvCache<Cfg, Kv::block_size, typename Kv::Keys, typename Kv::Values, kv::DeviceBlocks>;

template <ModelConfig Cfg, class Parallel, class Kv>
struct OnBackend<model::Llama<Cfg, Parallel>, Cuda, Kv> {
    static_assert(std::same_as<Parallel, model::NoParallel>,
                  "Engine<..., Cuda>: tensor and pipeline parallelism are not implemented on the "
                  "CUDA backend yet (NCCL carries the KV transfer only)");
    using Cache = CudaCache<Cfg, Kv>;
    using StepModel = cuda::DeviceModel<Cfg, Cache>;
};

}  // namespace tinfer
