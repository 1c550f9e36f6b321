// Must not compile: a layer pattern (every N-th layer global) needs sliding layers between
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig bad = [] {
    auto c = tinfer::presets::gemma3_270m;
    c.sliding_window = 0;
    return c;
}();
static_assert(tinfer::ModelShape<bad>);
int main() {}
