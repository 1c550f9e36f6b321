// Must not compile: SmolLM2-135M's 9 query heads and 3 KV heads cannot be split over 2 ranks.
#include <tinfer/config/presets.hpp>
#include <tinfer/dist/tensor_parallel.hpp>

int main() {
    return tinfer::dist::TensorParallelShard<tinfer::presets::smollm2_135m, 2>::heads;
}
