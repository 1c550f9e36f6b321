#pragma once
// --device cpu | cuda: the backend the programs' engine runs on. cuda needs a build with the
// CUDA backend (nvcc found at configure time) and a model whose parts the device layer composes
// (SmolLM2; Gemma 3's sliding-window layers are not on the device yet); the options the CUDA
// backend does not implement are refused before anything loads.
#include <string>

#include <CLI/CLI.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/cuda/device_model.hpp>
#include <tinfer/model/shipped_presets.hpp>

#include "serving_engines.hpp"

#ifdef TINFER_WITH_CUDA_BACKEND
#include <tinfer/kernels/cuda/check.cuh>
#endif

namespace tinfer::examples {

inline void add_device_option(CLI::App& app, std::string& device) {
    app.add_option("--device", device,
                   "Where the model runs: cpu, or cuda (the GPU; SmolLM2's parts, float32 "
                   "activations and KV)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
}

// What --device cuda cannot be combined with, refused with the flag's name.
struct DeviceConflicts {
    std::string const& kv_cache_dtype;
    std::string const& precision;
    bool draft_model = false;
    bool split = false;  // --tp / --pp
};

inline void check_device_options(std::string const& device, DeviceConflicts const& other) {
    if (device != "cuda") return;
    auto const refuse = [](std::string const& flag) {
        throw RequestError("--device cuda: " + flag +
                           " is not implemented on the CUDA backend yet; use --device cpu");
    };
    if (other.kv_cache_dtype != "fp32") refuse("--kv-cache-dtype " + other.kv_cache_dtype);
    if (other.precision == "int8") refuse("--precision int8");
    if (other.draft_model) refuse("--draft-model");
    if (other.split) refuse("--tp / --pp");
}

// Calls body.template operator()<Engine>() with the CUDA backend's engine of the file's shape;
// a shape the device layer cannot run, or a build without the backend, is a RequestError that
// says which.
template <class Body>
int with_cuda_engine(gguf::File const& file, Body&& body) {
#ifdef TINFER_WITH_CUDA_BACKEND
    // No GPU is a plain refusal; CUDA failing where the machine shows one throws its error.
    if (kernels::cuda::device_count() == 0)
        throw RequestError("--device cuda: this machine has no CUDA device; use --device cpu");
    return model::with_shipped_preset(file, [&]<ModelConfig Cfg>() -> int {
        if constexpr (cuda::runs_on_device<Cfg>) {
            return body.template operator()<CudaServingEngineFor<Cfg>>();
        } else {
            throw RequestError("--device cuda: this model has " + cuda::missing_on_device<Cfg>() +
                               ", which the CUDA backend does not implement yet; use --device cpu");
        }
    });
#else
    (void)file;
    (void)body;
    throw RequestError(
        "--device cuda: this build has no CUDA backend (it was configured without nvcc, or "
        "with -DTINFER_CUDA=OFF; reconfigure where the CUDA toolkit is installed)");
#endif
}

}  // namespace tinfer::examples
