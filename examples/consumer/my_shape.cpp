// A researcher's own model shape, declared and checked at compile time against the installed
// tinfer headers.
#include <iostream>

#include <tinfer/tinfer.hpp>

namespace {
constexpr tinfer::ModelConfig my_shape{.layers = 12,
                                       .hidden = 768,
                                       .heads = 12,
                                       .kv_heads = 4,
                                       .head_dim = 64,
                                       .ffn = 2048,
                                       .vocab = 32000,
                                       .max_context = 4096,
                                       .weights = tinfer::DType::q8_0};
static_assert(tinfer::ModelShape<my_shape>);
}  // namespace

int main() {
    std::cout << my_shape << "\n"
              << "KV cache (bf16 K and V): " << my_shape.kv_bytes_per_token(tinfer::DType::bf16)
              << " bytes/token, "
              << my_shape.kv_bytes(my_shape.max_context, tinfer::DType::bf16) / (1 << 20)
              << " MiB at full context\n";
}
