// Must not compile: Q4_1 is a weight block format, not a KV cache type
#include <tinfer/config/presets.hpp>

constexpr tinfer::ModelConfig bad = [] {
    auto c = tinfer::presets::smollm2_135m;
    c.kv = tinfer::DType::q4_1;
    return c;
}();
static_assert(tinfer::ModelShape<bad>);
int main() {}
