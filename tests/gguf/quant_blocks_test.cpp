// Quantized block formats: layouts against hand-built blocks, the reference quantizers against
// llama.cpp's Python package, and quantize -> dequantize within the quantization step.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace quant = tinfer::quant;
namespace gguf = tinfer::gguf;
using namespace tinfer::testing::gguf_support;

namespace {

constexpr std::uint16_t f16_one = 0x3c00;
// Half an ulp of a normal f16 relative to its value: the error of storing a scale as f16.
constexpr double f16_relative_rounding = 1.0 / 2048;
constexpr double float_eps = std::numeric_limits<float>::epsilon();

static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q4_0>, quant::BlockQ4_0>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q4_1>, quant::BlockQ4_1>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q5_0>, quant::BlockQ5_0>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q5_1>, quant::BlockQ5_1>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q8_0>, quant::BlockQ8_0>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q2_k>, quant::BlockQ2_K>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q3_k>, quant::BlockQ3_K>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q4_k>, quant::BlockQ4_K>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q5_k>, quant::BlockQ5_K>);
static_assert(std::is_same_v<quant::BlockOfT<tinfer::DType::q6_k>, quant::BlockQ6_K>);

// Packs 6-bit scales and minimums of 8 sub-blocks as gguf-py's Q4_K.get_scale_min unpacks them
// (Q4_K and Q5_K): sub-blocks 0..3 keep 6 bits in bytes s and s+4; 4..7 put their low nibbles
// in byte s+4 and their top 2 bits in the spare top bits of bytes s-4 (scale) and s (minimum).
void pack_scale_min_k4(std::array<int, 8> const& scale, std::array<int, 8> const& minimum,
                       std::uint8_t* scales) {
    for (int s = 0; s < 4; ++s) {
        scales[s] = static_cast<std::uint8_t>(scale[s]);
        scales[s + 4] = static_cast<std::uint8_t>(minimum[s]);
    }
    for (int s = 4; s < 8; ++s) {
        scales[s + 4] = static_cast<std::uint8_t>((scale[s] & 15) | ((minimum[s] & 15) << 4));
        scales[s - 4] |= static_cast<std::uint8_t>((scale[s] >> 4) << 6);
        scales[s] |= static_cast<std::uint8_t>((minimum[s] >> 4) << 6);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quant_blocks)

BOOST_AUTO_TEST_CASE(block_sizes_match_bits_per_element) {
    // dtype.hpp states bits per element independently; the structs must agree with it.
    auto check = [](tinfer::DType t, std::size_t bytes, int elements) {
        BOOST_TEST(tinfer::bits_per_element(t) == bytes * 8.0 / elements);
    };
    check(tinfer::DType::q4_0, sizeof(quant::BlockQ4_0), quant::BlockQ4_0::elements);
    check(tinfer::DType::q4_1, sizeof(quant::BlockQ4_1), quant::BlockQ4_1::elements);
    check(tinfer::DType::q5_0, sizeof(quant::BlockQ5_0), quant::BlockQ5_0::elements);
    check(tinfer::DType::q5_1, sizeof(quant::BlockQ5_1), quant::BlockQ5_1::elements);
    check(tinfer::DType::q8_0, sizeof(quant::BlockQ8_0), quant::BlockQ8_0::elements);
    check(tinfer::DType::q2_k, sizeof(quant::BlockQ2_K), quant::BlockQ2_K::elements);
    check(tinfer::DType::q3_k, sizeof(quant::BlockQ3_K), quant::BlockQ3_K::elements);
    check(tinfer::DType::q4_k, sizeof(quant::BlockQ4_K), quant::BlockQ4_K::elements);
    check(tinfer::DType::q5_k, sizeof(quant::BlockQ5_K), quant::BlockQ5_K::elements);
    check(tinfer::DType::q6_k, sizeof(quant::BlockQ6_K), quant::BlockQ6_K::elements);
}

BOOST_AUTO_TEST_CASE(q4_0_low_nibbles_are_the_first_half) {
    quant::BlockQ4_0 block{};
    block.d = f16_one;
    for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
    float out[32];
    quant::dequantize_block(block, out);
    for (int j = 0; j < 16; ++j) {
        BOOST_TEST(out[j] == j - 8);
        BOOST_TEST(out[j + 16] == 7 - j);
    }
}

BOOST_AUTO_TEST_CASE(q4_1_adds_the_minimum) {
    quant::BlockQ4_1 block{};
    block.d = 0x4000;  // 2.0
    block.m = 0xbc00;  // -1.0
    for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
    float out[32];
    quant::dequantize_block(block, out);
    for (int j = 0; j < 16; ++j) {
        BOOST_TEST(out[j] == 2 * j - 1);
        BOOST_TEST(out[j + 16] == 2 * (15 - j) - 1);
    }
}

BOOST_AUTO_TEST_CASE(q5_high_bits_come_from_qh_in_element_order) {
    // Element j's fifth bit is bit j of qh read as a little-endian u32.
    std::uint32_t const high_bits = 0xa5c3'0f71u;
    quant::BlockQ5_0 b0{};
    quant::BlockQ5_1 b1{};
    b0.d = b1.d = f16_one;
    b1.m = 0x3800;  // 0.5
    for (int k = 0; k < 4; ++k)
        b0.qh[k] = b1.qh[k] = static_cast<std::uint8_t>(high_bits >> (8 * k));
    for (int j = 0; j < 16; ++j) {
        b0.qs[j] = b1.qs[j] = static_cast<std::uint8_t>(((j * 7) & 15) | (((j * 3 + 1) & 15) << 4));
    }
    float out0[32], out1[32];
    quant::dequantize_block(b0, out0);
    quant::dequantize_block(b1, out1);
    for (int j = 0; j < 32; ++j) {
        int const low = j < 16 ? ((j * 7) & 15) : (((j - 16) * 3 + 1) & 15);
        int const q = low + 16 * static_cast<int>((high_bits >> j) & 1u);
        BOOST_TEST(out0[j] == q - 16);
        BOOST_TEST(out1[j] == q + 0.5f);
    }
}

BOOST_AUTO_TEST_CASE(q4_k_unpacks_six_bit_scales_and_minimums) {
    // Packing as documented in gguf-py (quants.py, Q4_K.get_scale_min): sub-blocks 0..3 keep 6
    // bits in bytes s and s+4; 4..7 put their low nibbles in byte s+4 and top 2 bits in the
    // spare top bits of bytes s-4 (scale) and s (minimum).
    std::array<int, 8> scale{}, minimum{};
    quant::BlockQ4_K block{};
    block.d = 0x3800;     // 0.5
    block.dmin = 0x3400;  // 0.25
    for (int s = 0; s < 8; ++s) {
        scale[s] = 10 + 7 * s;    // up to 59: exercises the high bits
        minimum[s] = 63 - 5 * s;  // down to 28
    }
    pack_scale_min_k4(scale, minimum, block.scales);
    std::mt19937_64 rng = tinfer::testing::seeded_rng(41);
    std::array<int, 256> q{};
    for (int& v : q) v = static_cast<int>(rng() % 16);
    // Sub-blocks 2p and 2p+1 share bytes 32p..32p+31: low nibbles, then high nibbles.
    for (int i = 0; i < 256; ++i) {
        int const pair = i / 64, within = i % 64;
        int const byte = 32 * pair + within % 32;
        block.qs[byte] |= static_cast<std::uint8_t>(within < 32 ? q[i] : q[i] << 4);
    }
    float out[256];
    quant::dequantize_block(block, out);
    for (int i = 0; i < 256; ++i) {
        int const s = i / 32;
        double const expected = 0.5 * scale[s] * q[i] - 0.25 * minimum[s];
        BOOST_TEST(out[i] == expected, "element " << i);
    }
}

BOOST_AUTO_TEST_CASE(q6_k_combines_four_and_two_bit_parts) {
    // Layout from gguf-py's Q6_K.dequantize_blocks: in each 128-element half, element
    // 32k + l takes nibble k/2 of ql[64h + l + 32(k%2)] and bits 2k..2k+1 of qh[32h + l].
    std::mt19937_64 rng = tinfer::testing::seeded_rng(42);
    std::array<int, 256> q{};
    for (int& v : q) v = static_cast<int>(rng() % 64);
    quant::BlockQ6_K block{};
    block.d = 0x3800;  // 0.5
    for (int s = 0; s < 16; ++s) block.scales[s] = static_cast<std::int8_t>(s * 9 - 70);
    for (int i = 0; i < 256; ++i) {
        int const h = i / 128, k = (i % 128) / 32, l = i % 32;
        block.ql[64 * h + l + 32 * (k % 2)] |=
            static_cast<std::uint8_t>((q[i] & 15) << (4 * (k / 2)));
        block.qh[32 * h + l] |= static_cast<std::uint8_t>((q[i] >> 4) << (2 * k));
    }
    float out[256];
    quant::dequantize_block(block, out);
    for (int i = 0; i < 256; ++i) {
        double const expected = 0.5 * block.scales[i / 16] * (q[i] - 32);
        BOOST_TEST(out[i] == expected, "element " << i);
    }
}

BOOST_AUTO_TEST_CASE(q2_k_two_bit_codes_and_four_bit_scales) {
    // Layout from gguf-py's Q2_K.dequantize_blocks: sub-block s has scale scales[s] & 15 and
    // minimum scales[s] >> 4; element i takes bits 2k..2k+1 of qs[32h + l], h = i / 128,
    // k = (i % 128) / 32, l = i % 32.
    std::mt19937_64 rng = tinfer::testing::seeded_rng(43);
    std::array<int, 256> q{};
    for (int& v : q) v = static_cast<int>(rng() % 4);
    quant::BlockQ2_K block{};
    block.d = 0x3800;     // 0.5
    block.dmin = 0x3400;  // 0.25
    for (int s = 0; s < 16; ++s) block.scales[s] = static_cast<std::uint8_t>(s | ((15 - s) << 4));
    for (int i = 0; i < 256; ++i) {
        int const h = i / 128, k = (i % 128) / 32, l = i % 32;
        block.qs[32 * h + l] |= static_cast<std::uint8_t>(q[i] << (2 * k));
    }
    float out[256];
    quant::dequantize_block(block, out);
    for (int i = 0; i < 256; ++i) {
        int const s = i / 16;
        double const expected = 0.5 * s * q[i] - 0.25 * (15 - s);
        BOOST_TEST(out[i] == expected, "element " << i);
    }
}

BOOST_AUTO_TEST_CASE(q3_k_signed_six_bit_scales_and_high_mask) {
    // Layout from gguf-py's Q3_K.dequantize_blocks: scale s (stored + 32) has its low 4 bits in
    // the low (s < 8) or high nibble of scales[s % 8] and its top 2 bits in bits 2(s/4)..
    // 2(s/4)+1 of scales[8 + s % 4]; element i keeps 2 bits as Q2_K does and subtracts 4 unless
    // bit i / 32 of hmask[i % 32] is set.
    std::mt19937_64 rng = tinfer::testing::seeded_rng(44);
    std::array<int, 256> q{};
    for (int& v : q) v = static_cast<int>(rng() % 8) - 4;
    std::array<int, 16> scale{};
    for (int s = 0; s < 16; ++s) scale[s] = s * 4 - 32 + s % 3;  // -32 .. 29, every high bit
    scale[15] = 31;
    quant::BlockQ3_K block{};
    block.d = 0x3800;  // 0.5
    for (int s = 0; s < 16; ++s) {
        int const stored = scale[s] + 32;
        block.scales[s % 8] |= static_cast<std::uint8_t>((stored & 15) << (s < 8 ? 0 : 4));
        block.scales[8 + s % 4] |= static_cast<std::uint8_t>((stored >> 4) << (2 * (s / 4)));
    }
    for (int i = 0; i < 256; ++i) {
        int const h = i / 128, k = (i % 128) / 32, l = i % 32;
        bool const high = q[i] >= 0;
        int const low = high ? q[i] : q[i] + 4;
        block.qs[32 * h + l] |= static_cast<std::uint8_t>(low << (2 * k));
        if (high) block.hmask[l] |= static_cast<std::uint8_t>(1 << (i / 32));
    }
    for (int s = 0; s < 16; ++s) BOOST_TEST(quant::scale_k3(s, block.scales) == scale[s]);
    float out[256];
    quant::dequantize_block(block, out);
    for (int i = 0; i < 256; ++i) {
        double const expected = 0.5 * scale[i / 16] * q[i];
        BOOST_TEST(out[i] == expected, "element " << i);
    }
}

BOOST_AUTO_TEST_CASE(q5_k_adds_a_fifth_bit_to_q4_k) {
    // Layout from gguf-py's Q5_K.dequantize_blocks: Q4_K's scales, minimums and nibbles, and
    // the fifth bit of element i in bit i / 32 of qh[i % 32].
    std::array<int, 8> scale{}, minimum{};
    for (int s = 0; s < 8; ++s) {
        scale[s] = 63 - 6 * s;   // down to 21
        minimum[s] = 3 + 8 * s;  // up to 59
    }
    quant::BlockQ5_K block{};
    block.d = 0x3800;     // 0.5
    block.dmin = 0x3400;  // 0.25
    pack_scale_min_k4(scale, minimum, block.scales);
    std::mt19937_64 rng = tinfer::testing::seeded_rng(45);
    std::array<int, 256> q{};
    for (int& v : q) v = static_cast<int>(rng() % 32);
    for (int i = 0; i < 256; ++i) {
        int const pair = i / 64, within = i % 64;
        int const byte = 32 * pair + within % 32;
        block.qs[byte] |= static_cast<std::uint8_t>(within < 32 ? q[i] & 15 : (q[i] & 15) << 4);
        block.qh[i % 32] |= static_cast<std::uint8_t>((q[i] >> 4) << (i / 32));
    }
    float out[256];
    quant::dequantize_block(block, out);
    for (int i = 0; i < 256; ++i) {
        int const s = i / 32;
        double const expected = 0.5 * scale[s] * q[i] - 0.25 * minimum[s];
        BOOST_TEST(out[i] == expected, "element " << i);
    }
}

// The reference quantizers must produce the same bytes as gguf-py's quantizers (which follow
// ggml's quantize_row_*_ref) for the same input floats.
template <class Block>
void check_quantizer_matches_gguf_py(std::string const& name) {
    auto const file = gguf::File::open(gguf_data_dir() / "golden_v3.gguf");
    std::vector<float> const input =
        read_floats(gguf_data_dir() / ("golden_" + name + ".input.f32"));
    auto const& tensor = file.tensor(name);
    BOOST_REQUIRE_EQUAL(tensor.elements(), input.size());
    std::size_t const blocks = input.size() / Block::elements;
    BOOST_REQUIRE_EQUAL(tensor.data.size(), blocks * sizeof(Block));
    std::size_t differing = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
        Block mine;
        quant::quantize_block(input.data() + b * Block::elements, mine);
        if (std::memcmp(&mine, tensor.data.data() + b * sizeof(Block), sizeof(Block)) != 0)
            ++differing;
    }
    BOOST_TEST(differing == 0u, name << ": " << differing << " of " << blocks << " blocks differ");
}

BOOST_AUTO_TEST_CASE(reference_quantizers_match_gguf_py) {
    check_quantizer_matches_gguf_py<quant::BlockQ4_0>("t_q4_0");
    check_quantizer_matches_gguf_py<quant::BlockQ4_1>("t_q4_1");
    check_quantizer_matches_gguf_py<quant::BlockQ5_0>("t_q5_0");
    check_quantizer_matches_gguf_py<quant::BlockQ5_1>("t_q5_1");
    check_quantizer_matches_gguf_py<quant::BlockQ8_0>("t_q8_0");
}

// Worst-case error of round-to-nearest with scale d on `levels` levels, given the block's
// extremes. Symmetric formats (Q4_0, Q5_0) clip the top level, so an element can be a whole
// step off; affine ones are within half a step. Storing d and the minimum as f16 adds at most
// (largest level) * |d| and |min| times f16's relative rounding; float arithmetic a few eps of
// the largest magnitude.
struct StepBound {
    bool symmetric;
    int levels;  // 256 for Q8_0 (-127..127 around zero), 16 or 32 otherwise
};

template <class Block>
void check_round_trip(StepBound bound, std::uint64_t seed) {
    std::mt19937_64 rng = tinfer::testing::seeded_rng(seed);
    std::uniform_real_distribution<float> log_scale(std::log(0.05f), std::log(100.f));
    double worst_ratio = 0;
    for (int trial = 0; trial < 400; ++trial) {
        float const scale = std::exp(log_scale(rng));
        float const shift = trial % 2 == 0 ? 0.f : scale * 0.5f;  // also blocks off centre
        std::vector<float> x = tinfer::testing::random_floats(rng, Block::elements, -scale, scale);
        for (float& v : x) v += shift;
        Block block;
        quant::quantize_block(x.data(), block);
        std::vector<float> y(Block::elements);
        tinfer::testing::poison(std::span<float>(y));
        quant::dequantize_block(block, y.data());

        float const lo = *std::min_element(x.begin(), x.end());
        float const hi = *std::max_element(x.begin(), x.end());
        double const amax = std::max(std::abs(lo), std::abs(hi));
        double step, largest_level, minimum = 0, allowed_steps;
        if (bound.levels == 256) {
            step = amax / 127, largest_level = 127, allowed_steps = 0.5;
        } else if (bound.symmetric) {
            step = amax / (bound.levels / 2), largest_level = bound.levels / 2, allowed_steps = 1.0;
        } else {
            step = (hi - lo) / (bound.levels - 1.0), largest_level = bound.levels - 1;
            minimum = std::abs(lo), allowed_steps = 0.5;
        }
        double const allowed = allowed_steps * step +
                               (largest_level * step + minimum) * f16_relative_rounding +
                               8 * float_eps * (amax + minimum);
        for (int i = 0; i < Block::elements; ++i) {
            double const err = std::abs(static_cast<double>(y[i]) - x[i]);
            worst_ratio = std::max(worst_ratio, err / allowed);
            if (!(err <= allowed)) {
                BOOST_FAIL("trial " << trial << " element " << i << ": " << x[i] << " -> " << y[i]
                                    << ", error " << err << " > bound " << allowed);
            }
        }
    }
    BOOST_TEST_MESSAGE("worst error / bound = " << worst_ratio);
    // A bound the quantizer comes nowhere near would not test it.
    BOOST_TEST(worst_ratio > 0.25);
}

BOOST_AUTO_TEST_CASE(round_trip_within_quantization_step) {
    check_round_trip<quant::BlockQ4_0>({true, 16}, 101);
    check_round_trip<quant::BlockQ4_1>({false, 16}, 102);
    check_round_trip<quant::BlockQ5_0>({true, 32}, 103);
    check_round_trip<quant::BlockQ5_1>({false, 32}, 104);
    check_round_trip<quant::BlockQ8_0>({true, 256}, 105);
}

BOOST_AUTO_TEST_CASE(blocks_of_zeros_decode_to_zeros) {
    // A zero block yields d = 0 and must not divide by it.
    float const zeros[32] = {};
    float out[32];
    quant::BlockQ8_0 b8;
    quant::quantize_block(zeros, b8);
    quant::dequantize_block(b8, out);
    for (float v : out) BOOST_TEST(v == 0.f);
    quant::BlockQ4_1 b41;
    quant::quantize_block(zeros, b41);
    quant::dequantize_block(b41, out);
    for (float v : out) BOOST_TEST(v == 0.f);
}

BOOST_AUTO_TEST_SUITE_END()
