// Must not compile: 12 heads of 16 dims over 4 ranks give each rank 48 input columns of the
// attention output, which is not a whole number of 32-element Q8_0 blocks.
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig shape{.layers = 2,
                                    .hidden = 192,
                                    .heads = 12,
                                    .kv_heads = 4,
                                    .head_dim = 16,
                                    .ffn = 512,
                                    .vocab = 100,
                                    .max_context = 64,
                                    .weights = tinfer::DType::q8_0};

int main() {
    return tinfer::model::TensorParallelShard<shape, 4>::heads;
}
