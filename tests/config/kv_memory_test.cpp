// KV cache arithmetic against the figures of our source material (seeds/000: the table of
// bytes per token). Checked at compile time; the runtime cases print them for the log.
#include <boost/test/unit_test.hpp>
#include <tinfer/presets/presets.hpp>

using namespace tinfer;

namespace {
constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;

constexpr ModelConfig llama2_7b_gqa8 = [] {
    auto c = presets::llama2_7b;
    c.kv_heads = 8;  // the source's table: "GQA-8" means 8 KV heads (4 query heads each)
    return c;
}();
// The source's large-model row: 80 layers, 64 KV heads, head_dim 128, fp16.
constexpr ModelConfig big_mha{.layers = 80,
                              .hidden = 8192,
                              .heads = 64,
                              .kv_heads = 64,
                              .head_dim = 128,
                              .ffn = 28672,
                              .vocab = 32000,
                              .max_context = 32768,
                              .weights = DType::f16};
// The source quotes every figure with fp16 K and V (the config carries no KV dtype: the cache's
// codecs decide).
constexpr DType fp16 = DType::f16;
}  // namespace

// Llama-2-7B, fp16, MHA.
static_assert(presets::llama2_7b.kv_bytes_per_token(fp16) == 512 * KiB);
static_assert(presets::llama2_7b.kv_bytes(4096, fp16) == 2 * GiB);
static_assert(presets::llama2_7b.kv_bytes(128 * 1024, fp16) == 64 * GiB);
static_assert(presets::llama2_7b.kv_bytes(4096, fp16) * 16 == 32 * GiB);  // batch 16
// 8 KV heads instead of 32: a quarter of the MHA figures. (The source's section 7.4 calls the
// same thing "4 groups"; its table, which these follow, has 8 KV heads.)
static_assert(llama2_7b_gqa8.kv_bytes_per_token(fp16) == 128 * KiB);
static_assert(llama2_7b_gqa8.kv_bytes(4096, fp16) == 0.5 * GiB);
static_assert(llama2_7b_gqa8.kv_bytes(128 * 1024, fp16) == 16 * GiB);
static_assert(presets::llama3_8b.kv_bytes_per_token(fp16) == 128 * KiB);
// Llama-2-70B, GQA with 8 KV heads.
static_assert(presets::llama2_70b.kv_bytes_per_token(fp16) == 320 * KiB);
static_assert(presets::llama2_70b.kv_bytes(4096, fp16) == 1.25 * GiB);
static_assert(presets::llama2_70b.kv_bytes(128 * 1024, fp16) == 40 * GiB);
// 80 layers x 64 KV heads x 128.
static_assert(big_mha.kv_bytes_per_token(fp16) == 2.5 * MiB);
static_assert(big_mha.kv_bytes(4096, fp16) == 10 * GiB);
static_assert(big_mha.kv_bytes(32 * 1024, fp16) == 80 * GiB);
// FP8 halves every figure.
static_assert(presets::llama2_7b.kv_bytes_per_token(DType::fp8_e4m3) == 256 * KiB);
static_assert(presets::llama2_70b.kv_bytes(4096, DType::fp8_e5m2) == 0.625 * GiB);
static_assert(big_mha.kv_bytes(32 * 1024, DType::fp8_e4m3) == 40 * GiB);
// SmolLM2-135M: 2 * 30 * 3 * 64 * 4 bytes in fp32.
static_assert(presets::smollm2_135m.kv_bytes_per_token() == 46080);
// K and V apart: int8 keys, int4 values (two per byte), 30 * 3 * 64 * (1 + 0.5) bytes.
static_assert(presets::smollm2_135m.kv_bytes_per_token(DType::int8, DType::int4) == 8640);

BOOST_AUTO_TEST_CASE(kv_memory_figures_from_the_source) {
    BOOST_TEST_MESSAGE("Llama-2-7B fp16: " << presets::llama2_7b.kv_bytes_per_token(fp16) / KiB
                                           << " KiB/token");
    BOOST_TEST(presets::llama2_7b.kv_bytes(4096, fp16) / GiB == 2.0);
    BOOST_TEST(big_mha.kv_bytes_per_token(DType::fp8_e4m3) / MiB == 1.25);
}
