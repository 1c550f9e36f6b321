// int4 KV quantizes in groups of 32: a head_dim of 48 is refused, naming the parameter.
#include <tinfer/kv/paged_cache.hpp>

constexpr tinfer::ModelConfig shape{.layers = 1,
                                    .hidden = 96,
                                    .heads = 2,
                                    .kv_heads = 1,
                                    .head_dim = 48,
                                    .ffn = 96,
                                    .vocab = 16,
                                    .max_context = 64};

int main() {
    tinfer::kv::PagedKvCache<shape, 16, tinfer::kv::Int4Codec> cache(1 << 20);
    return cache.total_blocks();
}
