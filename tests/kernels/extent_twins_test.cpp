// Kernels written once over Extents (core/extent.hpp) compute bitwise the same thing whether a
// dimension is static or dynamic: the same operations in the same order, only the generated
// code differs. Seeded random inputs over the shapes the models and bench/specialization use;
// a dynamic shape a kernel cannot take is refused with a message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/extent.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/kv_view.hpp>

#include "testing.hpp"
#include "weights_for_tests.hpp"

using namespace tinfer;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

template <int width>
void check_rmsnorm(int rows, std::uint64_t seed) {
    auto const x = random_floats(static_cast<std::size_t>(rows) * width, seed);
    auto const w = random_floats(width, seed + 1);
    std::vector<float> fixed(x.size()), any(x.size());
    kernels::rmsnorm(StaticExtent<width>{}, x.data(), w.data(), 1e-6f, rows, fixed.data());
    kernels::rmsnorm(DynamicExtent{width}, x.data(), w.data(), 1e-6f, rows, any.data());
    BOOST_TEST_INFO("rmsnorm width " << width << ", seed " << seed);
    BOOST_TEST(fixed == any);
}

template <int head_dim, RopePairing pairing>
void check_rope(int heads, int rows, std::uint64_t seed) {
    std::vector<int> positions(static_cast<std::size_t>(rows));
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    for (int& p : positions) p = static_cast<int>(rng() % 100000);
    std::vector<float> table(static_cast<std::size_t>(rows) * head_dim), any_table(table.size());
    kernels::rope_table(StaticExtent<head_dim>{}, 10000.0, positions.data(), rows, table.data());
    kernels::rope_table(DynamicExtent{head_dim}, 10000.0, positions.data(), rows, any_table.data());
    BOOST_TEST_INFO("rope table head_dim " << head_dim);
    BOOST_TEST(table == any_table);
    auto fixed = random_floats(static_cast<std::size_t>(rows) * heads * head_dim, seed);
    auto any = fixed;
    std::size_t const stride = static_cast<std::size_t>(heads) * head_dim;
    kernels::apply_rope<pairing>(StaticExtent<head_dim>{}, fixed.data(), rows, heads, stride,
                                 table.data());
    kernels::apply_rope<pairing>(DynamicExtent{head_dim}, any.data(), rows, heads, stride,
                                 table.data());
    BOOST_TEST_INFO("rope head_dim " << head_dim << ", " << heads << " heads");
    BOOST_TEST(fixed == any);
}

template <int head_dim, int group, int window, int scale_dim>
void check_attention(int kv_heads, int context, int queries, std::uint64_t seed) {
    std::size_t const kv = static_cast<std::size_t>(kv_heads) * context * head_dim;
    auto const keys = random_floats(kv, seed), values = random_floats(kv, seed + 1);
    kv::FloatKvView const view{head_dim, context, keys, values};
    std::size_t const row = static_cast<std::size_t>(kv_heads) * group * head_dim;
    auto const q = random_floats(static_cast<std::size_t>(queries) * row, seed + 2, 0.5f);
    std::vector<float> fixed(q.size()), any(q.size());
    auto const chunk = [&](std::vector<float>& out) {
        return kernels::AttentionChunk{.first_position = context - queries,
                                       .queries = queries,
                                       .q = q.data(),
                                       .q_stride = row,
                                       .out = out.data(),
                                       .out_stride = row};
    };
    using Static = kernels::Attention<head_dim, group, window, scale_dim>;
    kernels::AttentionKernel<DynamicExtent, DynamicExtent, DynamicExtent, DynamicExtent> const
        dynamic(DynamicExtent{head_dim}, DynamicExtent{group}, DynamicExtent{window},
                DynamicExtent{scale_dim});
    BOOST_TEST(dynamic.scratch_floats() == Static::scratch_floats);
    BOOST_TEST(dynamic.score_scale() == Static::score_scale);
    std::vector<float> scratch(2 * Static::scratch_floats);
    Static::attend(view, kv_heads, chunk(fixed), 2, scratch);
    dynamic.attend(view, kv_heads, chunk(any), 2, scratch);
    BOOST_TEST_INFO("attention d" << head_dim << " g" << group << " window " << window << " scale "
                                  << scale_dim << ", " << queries << " queries");
    BOOST_TEST(fixed == any);
}

// Outputs start as NaN (poisoned), so a product left unwritten cannot pass.
bool all_finite(std::vector<float> const& v) {
    return std::ranges::all_of(v, [](float x) { return std::isfinite(x); });
}

bool bitwise_equal(std::vector<float> const& a, std::vector<float> const& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One matrix (or the gated pair, activation fused) over `cols` input features, float rows and,
// where W has an int8 dot, int8 rows on the repacked strips. Rows not a multiple of the row
// tiles and tokens not a multiple of the token tile take every leftover path.
template <DType W, int cols, bool gated, class Activation = kernels::SiluGate>
void check_linear(int rows, int tokens, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto const gate = testing::make_weights<W>(rng, rows, cols, 0.5f);
    auto const up = testing::make_weights<W>(rng, rows, cols, 0.5f);
    auto const x = random_floats(static_cast<std::size_t>(tokens) * cols, seed + 1);
    kernels::FloatRows const float_rows{x.data(), static_cast<std::size_t>(cols)};
    std::vector<float> buffer(kernels::linear_scratch_floats(cols));
    auto const stride = static_cast<std::size_t>(rows);
    auto const run_float = [&](auto extent) {
        std::vector<float> out(static_cast<std::size_t>(tokens) * rows,
                               std::numeric_limits<float>::quiet_NaN());
        if constexpr (gated) {
            kernels::gated_linear_team<W, kernels::Isa::native, Activation>(
                extent, gate.matrix, up.matrix, float_rows, tokens, out.data(), stride,
                buffer.data());
        } else {
            kernels::linear_team<W>(extent, gate.matrix, float_rows, tokens, out.data(), stride,
                                    kernels::Store::assign, buffer.data());
        }
        return out;
    };
    BOOST_TEST_INFO("linear " << name_of(W) << (gated ? " gated" : "") << " " << cols << " -> "
                              << rows << " x " << tokens << " tokens");
    auto const fixed = run_float(StaticExtent<cols>{});
    BOOST_TEST(bitwise_equal(fixed, run_float(DynamicExtent{cols})));
    BOOST_TEST(all_finite(fixed));
    if constexpr (kernels::has_int8_dot(W)) {
        std::vector<std::byte> gate_strips(kernels::int8_strip_matrix_bytes(W, rows, cols)),
            up_strips(gate_strips.size());
        auto const gate8 = kernels::repack_int8_strips(gate.matrix, gate_strips.data());
        auto const up8 = kernels::repack_int8_strips(up.matrix, up_strips.data());
        std::size_t const row_bytes = kernels::int8_row_bytes(cols);
        std::vector<std::byte> quantized(row_bytes * static_cast<std::size_t>(tokens));
        for (int t = 0; t < tokens; ++t)
            kernels::quantize_row_int8(x.data() + static_cast<std::size_t>(t) * cols, cols,
                                       quantized.data() + row_bytes * static_cast<std::size_t>(t));
        kernels::Int8Rows const int8_rows{quantized.data(), row_bytes};
        auto const run_int8 = [&](auto extent) {
            std::vector<float> out(static_cast<std::size_t>(tokens) * rows,
                                   std::numeric_limits<float>::quiet_NaN());
            if constexpr (gated) {
                kernels::gated_linear_team<W, kernels::Isa::native, Activation>(
                    extent, gate8, up8, int8_rows, tokens, out.data(), stride);
            } else {
                kernels::linear_team<W>(extent, gate8, int8_rows, tokens, out.data(), stride,
                                        kernels::Store::assign);
            }
            return out;
        };
        auto const fixed8 = run_int8(StaticExtent<cols>{});
        BOOST_TEST_INFO("int8 strips");
        BOOST_TEST(bitwise_equal(fixed8, run_int8(DynamicExtent{cols})));
        BOOST_TEST(all_finite(fixed8));
    }
}

// The same tokens drawn, step after step, with the vocabulary static or dynamic.
template <int vocab>
void check_sampling(kernels::SamplingParams const& params, std::uint64_t seed) {
    auto const logits = random_floats(vocab, seed, 3.0f);
    kernels::SamplingWorkspace fixed_workspace(vocab), any_workspace(vocab);
    int differing = 0;
    for (std::uint32_t step = 0; step < 64; ++step) {
        auto const fixed = kernels::sample_token(StaticExtent<vocab>{}, logits, params, {}, seed,
                                                 step, fixed_workspace);
        auto const any = kernels::sample_token(DynamicExtent{vocab}, logits, params, {}, seed, step,
                                               any_workspace);
        differing += fixed.token != any.token || fixed.logprob != any.logprob;
    }
    BOOST_TEST_INFO("sampling vocab " << vocab << ", temperature " << params.temperature
                                      << ", top_k " << params.top_k << ", top_p " << params.top_p);
    BOOST_TEST(differing == 0);
}

// Encoded bytes and decoded floats of seeded vectors, head_dim static or dynamic.
template <class Codec, int head_dim>
void check_kv_codec(std::uint64_t seed) {
    constexpr std::size_t stored = Codec::template vector_bytes<head_dim>;
    constexpr int vectors = 5;
    auto const x = random_floats(static_cast<std::size_t>(vectors) * head_dim, seed, 2.0f);
    std::vector<std::byte> fixed(stored * vectors, std::byte{0x5a}),
        any(fixed.size(), std::byte{0xa5});
    std::vector<float> fixed_out(x.size(), std::numeric_limits<float>::quiet_NaN()),
        any_out(x.size(), std::numeric_limits<float>::quiet_NaN());
    for (int v = 0; v < vectors; ++v) {
        float const* in = x.data() + static_cast<std::size_t>(v) * head_dim;
        Codec::encode(StaticExtent<head_dim>{}, in, fixed.data() + stored * v);
        Codec::encode(DynamicExtent{head_dim}, in, any.data() + stored * v);
        Codec::decode(StaticExtent<head_dim>{}, fixed.data() + stored * v,
                      fixed_out.data() + static_cast<std::size_t>(v) * head_dim);
        Codec::decode(DynamicExtent{head_dim}, fixed.data() + stored * v,
                      any_out.data() + static_cast<std::size_t>(v) * head_dim);
    }
    BOOST_TEST_INFO("kv codec " << Codec::name << " head_dim " << head_dim);
    BOOST_TEST((fixed == any));  // poisoned differently: every byte written, alike
    BOOST_TEST(bitwise_equal(fixed_out, any_out));
    BOOST_TEST(all_finite(fixed_out));
}

template <int head_dim>
void check_kv_codecs(std::uint64_t seed) {
    check_kv_codec<kv::Fp32Codec, head_dim>(seed);
    check_kv_codec<kv::Fp16Codec, head_dim>(seed);
    check_kv_codec<kv::Bf16Codec, head_dim>(seed);
    check_kv_codec<kv::Fp8E4M3Codec, head_dim>(seed);
    check_kv_codec<kv::Fp8E5M2Codec, head_dim>(seed);
    check_kv_codec<kv::Int8Codec, head_dim>(seed);
    check_kv_codec<kv::Int4Codec, head_dim>(seed);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(extent_twins)

BOOST_AUTO_TEST_CASE(rmsnorm_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_rmsnorm<64>(7, seed);
    check_rmsnorm<100>(3, seed);  // not a multiple of the reduction lanes
    check_rmsnorm<256>(5, seed);
    check_rmsnorm<576>(4, seed);
    check_rmsnorm<640>(2, seed);
}

BOOST_AUTO_TEST_CASE(rope_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_rope<64, RopePairing::adjacent>(12, 9, seed);
    check_rope<128, RopePairing::neox>(5, 4, seed);
    check_rope<256, RopePairing::neox>(5, 3, seed);
}

BOOST_AUTO_TEST_CASE(attention_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_attention<64, 3, 0, 64>(3, 300, 1, seed);      // SmolLM2 decode
    check_attention<64, 3, 0, 64>(3, 300, 70, seed);     // a prefill chunk
    check_attention<256, 4, 40, 256>(1, 200, 33, seed);  // Gemma: MQA, a window
    check_attention<128, 8, 0, 100>(2, 150, 5, seed);    // Llama-3-like group, another scale
    check_attention<128, 1, 0, 128>(4, 90, 1, seed);     // MHA
}

BOOST_AUTO_TEST_CASE(linear_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_linear<DType::f32, 100, false>(7, 6, seed);  // cols not a multiple of the lanes
    check_linear<DType::f16, 96, false>(9, 5, seed);
    check_linear<DType::bf16, 64, false>(5, 1, seed);
    check_linear<DType::q4_0, 96, false>(21, 6, seed);
    check_linear<DType::q4_1, 96, false>(21, 5, seed);
    check_linear<DType::q5_0, 64, false>(17, 3, seed);
    check_linear<DType::q5_1, 64, false>(18, 1, seed);
    check_linear<DType::q8_0, 96, false>(19, 6, seed);
    check_linear<DType::q4_k, 256, false>(18, 5, seed);
    check_linear<DType::q5_k, 256, false>(17, 2, seed);
    check_linear<DType::q6_k, 256, false>(20, 6, seed);
}

BOOST_AUTO_TEST_CASE(gated_linear_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_linear<DType::q4_1, 96, true>(21, 6, seed);                          // SwiGLU
    check_linear<DType::q8_0, 64, true, kernels::GeluTanhGate>(18, 5, seed);   // GeGLU
    check_linear<DType::q4_k, 256, true, kernels::GeluTanhGate>(17, 3, seed);  // GeGLU
    check_linear<DType::f32, 100, true>(6, 5, seed);
}

BOOST_AUTO_TEST_CASE(sampling_static_and_dynamic_agree) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_sampling<1000>({.temperature = 0, .logprobs = true}, seed);
    check_sampling<1000>({.temperature = 0.8f, .top_k = 40, .seed = seed}, seed);
    check_sampling<4099>({.temperature = 1.2f, .top_p = 0.9f, .min_p = 0.01f, .seed = seed}, seed);
    check_sampling<4099>({.temperature = 1, .seed = seed, .top_logprobs = 5}, seed);
}

BOOST_AUTO_TEST_CASE(kv_codecs_static_and_dynamic_agree_bitwise) {
    std::uint64_t const seed = testing::seeded_rng(20261201)();
    check_kv_codecs<64>(seed);
    check_kv_codecs<128>(seed);
    check_kv_codecs<256>(seed);
}

BOOST_AUTO_TEST_CASE(dynamic_shapes_a_kernel_cannot_take_are_refused) {
    using Dynamic =
        kernels::AttentionKernel<DynamicExtent, DynamicExtent, DynamicExtent, DynamicExtent>;
    auto const message = [](auto make) {
        try {
            make();
        } catch (Error const& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    BOOST_TEST(message([] {
                   Dynamic(DynamicExtent{1024}, DynamicExtent{1}, DynamicExtent{0},
                           DynamicExtent{64});
               }).find("head_dim 1024") != std::string::npos);
    BOOST_TEST(message([] {
                   Dynamic(DynamicExtent{64}, DynamicExtent{0}, DynamicExtent{0},
                           DynamicExtent{64});
               }).find("group_size 0") != std::string::npos);
    int const position = 1;
    float table[4];
    BOOST_TEST(message([&] {
                   kernels::rope_table(DynamicExtent{63}, 1e4, &position, 1, table);
               }).find("RoPE head_dim must be even") != std::string::npos);
    BOOST_TEST(message([] { kv::Int4Codec::check_head_dim(48); }).find("head_dim 48") !=
               std::string::npos);
    BOOST_TEST(message([] { kv::Int4Codec::check_head_dim(96); }).empty());
    auto const sampled = [](int vocab) {
        kernels::SamplingWorkspace workspace(1000);
        std::vector<float> const logits(1000, 0.0f);
        (void)kernels::sample_token(DynamicExtent{vocab}, logits, {.temperature = 0}, {}, 1, 0,
                                    workspace);
    };
    BOOST_TEST(message([&] { sampled(999); }).find("vocabulary 999") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
