// Must not compile: Llama-3-8B's 32 query heads split 16 ways, but its 8 KV heads do not.
#include <tinfer/config/presets.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>

int main() {
    return tinfer::model::TensorParallelShard<tinfer::presets::llama3_8b, 16>::kv_heads;
}
