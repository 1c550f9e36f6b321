// Must not compile: Qwen2.5-0.5B's 14 query heads split 7 ways, but its 2 KV heads neither
// split 7 ways nor replicate evenly over 7 ranks.
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>

int main() {
    return tinfer::model::TensorParallelShard<tinfer::presets::qwen25_05b, 7>::kv_heads;
}
