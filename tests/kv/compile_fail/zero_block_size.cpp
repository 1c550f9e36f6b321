// A block must hold at least one token.
#include <tinfer/kv/paged_cache.hpp>

constexpr tinfer::ModelConfig shape{.layers = 1,
                                    .hidden = 64,
                                    .heads = 2,
                                    .kv_heads = 1,
                                    .head_dim = 32,
                                    .ffn = 64,
                                    .vocab = 16,
                                    .max_context = 64};

int main() {
    tinfer::kv::PagedKvCache<shape, 0> cache(1 << 20);
    return cache.total_blocks();
}
