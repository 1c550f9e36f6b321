// Kernels written once over Extents (core/extent.hpp) compute bitwise the same thing whether a
// dimension is static or dynamic: the same operations in the same order, only the generated
// code differs. Seeded random inputs over the shapes the models and bench/specialization use;
// a dynamic shape a kernel cannot take is refused with a message.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/extent.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kv/kv_view.hpp>

#include "testing.hpp"

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
}

BOOST_AUTO_TEST_SUITE_END()
