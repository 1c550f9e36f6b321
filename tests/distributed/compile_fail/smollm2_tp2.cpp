// Must not compile: SmolLM2-135M's 9 query heads and 3 KV heads cannot be split over 2 ranks.
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>

int main() {
    return tinfer::model::TensorParallelShard<tinfer::presets::smollm2_135m, 2>::heads;
}
