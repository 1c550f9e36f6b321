// Must not compile: 9 query heads cannot share 4 KV heads evenly
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig bad = [] {
    auto c = tinfer::presets::smollm2_135m;
    c.kv_heads = 4;
    return c;
}();
static_assert(tinfer::ModelShape<bad>);
int main() {}
