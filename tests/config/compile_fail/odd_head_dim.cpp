// Must not compile: RoPE rotates pairs, so head_dim must be even
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig bad = [] {
    auto c = tinfer::presets::smollm2_135m;
    c.head_dim = 63;
    return c;
}();
static_assert(tinfer::ModelShape<bad>);
int main() {}
