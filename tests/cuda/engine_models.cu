// The device halves of the models cuda_engine_test serves on the CUDA backend: the only
// translation unit nvcc compiles for it (model/cuda/device_model.hpp says why). The cache type
// is spelled out: nvcc 13's host code loses a class-type template argument reached through an
// alias template (tinfer::CudaCache names the same type).
#include <tinfer/model/cuda/device_model.cuh>

#include "engine_shapes.hpp"

template class tinfer::cuda::DeviceModel<
    tinfer::cuda_testing::engine_llama,
    tinfer::kv::PagedKvCache<tinfer::cuda_testing::engine_llama,
                             tinfer::cuda_testing::EngineKv::block_size, tinfer::kv::Fp32Codec,
                             tinfer::kv::Fp32Codec, tinfer::kv::DeviceBlocks>>;
template class tinfer::cuda::DeviceModel<
    tinfer::cuda_testing::engine_parts,
    tinfer::kv::PagedKvCache<tinfer::cuda_testing::engine_parts,
                             tinfer::cuda_testing::EngineKv::block_size, tinfer::kv::Fp32Codec,
                             tinfer::kv::Fp32Codec, tinfer::kv::DeviceBlocks>>;
