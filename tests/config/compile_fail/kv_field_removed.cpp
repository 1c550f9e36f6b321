// Must not compile: a shape carries no KV dtype (it could not say int4, nor K apart from V, and
// the host cache ignored it). The KV codecs are chosen where the cache is made:
// kv/codec_pairs.hpp.
#include <tinfer/presets/presets.hpp>

constexpr tinfer::ModelConfig with_bf16_kv = [] {
    auto c = tinfer::presets::smollm2_135m;
    c.kv = tinfer::DType::bf16;
    return c;
}();
int main() {}
