// Must not compile: a model has at least one layer
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig bad = [] {
    auto c = tinfer::presets::smollm2_135m;
    c.layers = 0;
    return c;
}();
static_assert(tinfer::ModelShape<bad>);
int main() {}
