// The device halves of --device cuda's engines (serving_engines_cuda.cpp): the one translation
// unit nvcc compiles for the example programs. The cache type is spelled out, not named through
// tinfer::CudaCache (model/cuda/device_model.hpp says why).
#include <tinfer/model/cuda/device_model.cuh>
#include <tinfer/presets/presets.hpp>

template class tinfer::cuda::DeviceModel<
    tinfer::presets::smollm2_135m,
    tinfer::kv::PagedKvCache<tinfer::presets::smollm2_135m, 16, tinfer::kv::Fp32Codec,
                             tinfer::kv::Fp32Codec, tinfer::kv::DeviceBlocks>>;
