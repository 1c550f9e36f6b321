// Int8 activations: the quantizer against its definition, and the integer linear kernels on
// weights repacked into int8 strips, for every weight type with an int8 dot (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; the AVX-512 VNNI path where the build has it, AVX2 where it has
// that, and the portable path always) against a float64 product of the decoded weights and the
// dequantized activations; the paths bitwise equal (prefill's panels and the strips too); batch
// invariance; the grain in which a batched step's threads take strips from a shared counter;
// the fused gated and accumulating epilogues against the separate operations; stacked
// matrices against each alone.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/swiglu.hpp>

#include "testing.hpp"
#include "weights_for_tests.hpp"

namespace tt = tinfer::testing;
namespace k = tinfer::kernels;
using k::Isa;
using tinfer::DType;

namespace {

// A test matrix repacked for the int8 kernels (kernels::repack_int8_strips).
struct Strips {
    std::vector<std::byte> bytes;
    k::WeightMatrix matrix;
    explicit Strips(k::WeightMatrix const& w)
        : bytes(k::int8_strip_matrix_bytes(w.type, w.rows, w.cols), std::byte{0x5a}) {
        matrix = k::repack_int8_strips(w, bytes.data());
    }
};

struct QuantizedRows {
    std::vector<std::byte> bytes;
    std::size_t stride = 0;
    k::Int8Rows view() const { return {bytes.data(), stride}; }
};

template <Isa isa = Isa::native>
QuantizedRows quantize(std::vector<float> const& x, int tokens, int cols) {
    QuantizedRows q;
    q.stride = k::int8_row_bytes(cols);
    q.bytes.assign(q.stride * static_cast<std::size_t>(tokens), std::byte{0x5a});  // poison
    for (int t = 0; t < tokens; ++t) {
        k::quantize_row_int8<isa>(x.data() + static_cast<std::size_t>(t) * cols, cols,
                                  q.bytes.data() + q.stride * static_cast<std::size_t>(t));
    }
    return q;
}

// The offset c_b each activation block's sum is multiplied by (see int8_dot.hpp: Q4_0's 8d,
// Q5_0's 16d, the stored minimum of Q4_1 / Q5_1, a Q4_K / Q5_K sub-block's dmin m_j; none for
// Q8_0, whose integer sums are of its signed values, and Q6_K, which folds its offset in
// integers), read from the GGUF block of `row` that holds activation block b. The float terms
// the integer path rounds are then bounded by sum |w_k x_k| + 2 |c_b| sum |x_k| per block (the
// integer product d sum(q x) is the exact product minus the offset term).
template <DType T>
double offset_magnitude(std::byte const* row, int b) {
    constexpr int elements = k::block_elements<T>();
    std::byte const* block =
        row + static_cast<std::size_t>(b * 32 / elements) * k::block_bytes<T>();
    double const first = tt::f16_value(block), second = tt::f16_value(block + 2);
    if constexpr (T == DType::q8_0) return 0;
    if constexpr (T == DType::q4_0) return 8 * std::abs(first);
    if constexpr (T == DType::q5_0) return 16 * std::abs(first);
    if constexpr (T == DType::q4_1 || T == DType::q5_1) return std::abs(second);
    if constexpr (T == DType::q6_k) return 0;
    if constexpr (T == DType::q4_k || T == DType::q5_k) {
        auto const* sc = reinterpret_cast<std::uint8_t const*>(block + 4);
        int const j = b % 8;
        int const min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
        return std::abs(second) * min;
    }
}

// Error bound: the integer sums are exact; per output the float arithmetic is a few roundings
// per block (scale product, int -> float (exact below 2^24; Q6_K's folded sums may round
// there, by at most eps of the product's magnitude), two fused multiply-adds) over terms
// bounded as above. We allow (8 * blocks + 32) eps of that magnitude.
template <DType T, Isa isa>
void check_against_reference(std::uint64_t seed, int rows, int cols, int tokens, int threads) {
    BOOST_TEST_MESSAGE(name_of(T) << " " << k::name_of(isa) << " rows " << rows << " cols " << cols
                                  << " tokens " << tokens);
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    QuantizedRows const q = quantize(x, tokens, cols);
    std::vector<float> y(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(y));
    Strips const strips(w.matrix);
    k::linear_int8<T, isa>(strips.matrix, q.view(), tokens, y.data(), threads);

    int const blocks = cols / 32;
    double const rtol = tt::float32_sum_rtol(8 * static_cast<std::size_t>(blocks) + 32);
    double worst = 0;
    for (int t = 0; t < tokens; ++t) {
        k::Int8Row const row = q.view().row(t, cols);
        for (int o = 0; o < rows; ++o) {
            double ref = 0, magnitude = 0;
            double const* wrow = w.decoded.data() + static_cast<std::size_t>(o) * cols;
            std::byte const* raw = k::row_pointer<T>(w.matrix, o);
            for (int b = 0; b < blocks; ++b) {
                double block_abs_x = 0;
                for (int i = b * 32; i < b * 32 + 32; ++i) {
                    double const xv = k::int8_row_value(row, i);
                    ref += wrow[i] * xv;
                    magnitude += std::abs(wrow[i] * xv);
                    block_abs_x += std::abs(xv);
                }
                magnitude += 2 * offset_magnitude<T>(raw, b) * block_abs_x;
            }
            double const got = y[static_cast<std::size_t>(t) * rows + o];
            double const error = std::isnan(got) ? std::numeric_limits<double>::infinity()
                                                 : std::abs(got - ref) / (rtol * magnitude);
            worst = std::max(worst, error);
        }
    }
    BOOST_TEST_MESSAGE("worst scaled error " << worst);
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

template <DType T, Isa isa>
void check_shapes(std::uint64_t seed) {
    if constexpr (k::block_elements<T>() == 32) {
        // SmolLM2's q/o, k/v, gate/up, down projections; partial strips (rows % 16).
        check_against_reference<T, isa>(seed + 1, 576, 576, 5, 2);
        check_against_reference<T, isa>(seed + 2, 192, 576, 1, 1);
        check_against_reference<T, isa>(seed + 3, 1536, 576, 3, 2);
        check_against_reference<T, isa>(seed + 4, 576, 1536, 9, 2);
        check_against_reference<T, isa>(seed + 5, 37, 96, 13, 2);
        check_against_reference<T, isa>(seed + 6, 3, 32, 2, 1);
        check_against_reference<T, isa>(seed + 7, 5, 160, 6, 1);
    } else {
        // Gemma 3 270M's attention output and FFN down (1024 and 2048 inputs, 640 outputs, cut
        // to fewer rows for time); partial strips; one super-block.
        check_against_reference<T, isa>(seed + 1, 160, 1024, 5, 2);
        check_against_reference<T, isa>(seed + 2, 64, 2048, 9, 2);
        check_against_reference<T, isa>(seed + 3, 37, 512, 1, 1);
        check_against_reference<T, isa>(seed + 4, 21, 768, 13, 2);
        check_against_reference<T, isa>(seed + 5, 3, 256, 2, 1);
    }
}

// Each token alone, in a batch, on other thread counts and from an odd offset: bitwise equal.
template <DType T, Isa isa>
void check_batch_invariance(std::uint64_t seed, int rows, int cols, int tokens = 23) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    QuantizedRows const q = quantize(x, tokens, cols);
    Strips const strips(w.matrix);
    std::vector<float> batch(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(batch));
    k::linear_int8<T, isa>(strips.matrix, q.view(), tokens, batch.data(), 2);
    std::vector<float> alone(rows);
    // One token on one thread (static shares) and on two (guided shares).
    for (int const threads : {1, 2}) {
        for (int t = 0; t < tokens; ++t) {
            tt::poison(std::span<float>(alone));
            k::linear_int8<T, isa>(strips.matrix, {q.bytes.data() + q.stride * t, q.stride}, 1,
                                   alone.data(), threads);
            BOOST_TEST(
                std::memcmp(alone.data(), batch.data() + static_cast<std::size_t>(t) * rows,
                            rows * sizeof(float)) == 0,
                "token " << t << " alone on " << threads << " thread(s) differs from the batch");
        }
    }
    // Parts of the batch: 7 tokens on one thread, 3 on two (guided shares).
    for (auto const& [first, count, threads] : {std::tuple{3, 7, 1}, std::tuple{5, 3, 2}}) {
        std::vector<float> part(static_cast<std::size_t>(count) * rows);
        k::linear_int8<T, isa>(strips.matrix, {q.bytes.data() + q.stride * first, q.stride}, count,
                               part.data(), threads);
        BOOST_TEST(std::memcmp(part.data(), batch.data() + static_cast<std::size_t>(first) * rows,
                               part.size() * sizeof(float)) == 0,
                   count << " tokens from " << first << " on " << threads << " thread(s)");
    }
}

// Whether this CPU executes version `isa` (the emulated build: AVX-512 through SIMDe).
bool cpu_runs(Isa isa) {
    return k::isa_rank(isa) <= k::isa_rank(k::detected_isa());
}

// The portable and AVX2 kernels do the AVX-512 kernel's float operations in its order: every
// version this CPU runs, and the one chosen at start-up, are bitwise equal.
template <DType T>
void check_portable_equals_native(std::uint64_t seed, int rows, int cols, int tokens) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    QuantizedRows const q = quantize(x, tokens, cols);
    Strips const strips(w.matrix);
    std::vector<float> portable(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(portable));
    k::linear_int8<T, Isa::portable>(strips.matrix, q.view(), tokens, portable.data(), 1);
    auto const check = [&]<Isa isa>(int threads) {
        if (!cpu_runs(isa)) return;
        std::vector<float> y(portable.size());
        tt::poison(std::span<float>(y));
        k::linear_int8<T, isa>(strips.matrix, q.view(), tokens, y.data(), threads);
        BOOST_TEST(std::memcmp(y.data(), portable.data(), y.size() * sizeof(float)) == 0,
                   name_of(T) << " " << rows << "x" << cols << ": " << k::name_of(isa)
                              << " and portable differ");
    };
    check.template operator()<Isa::native>(2);
    check.template operator()<Isa::avx2>(1);
    check.template operator()<Isa::avx512>(1);
}

// Prefill on AVX-512 multiplies panels (kernels/int8_panels.hpp) where the caller gives scratch,
// the strips in place where it does not: both bitwise equal, for every format, over chunks of
// tokens (one chunk, or two of even length past linear_token_chunk), column slices (cols
// past int8_panel_slice_blocks * 32), partial strips, threads, and for the gated pair. Where
// amx_int8_ready, tiles of 16 tokens take AMX (37 tokens: two such tiles, then 4 + 1 on VNNI),
// every format but Q6_K, an odd number of blocks per slice included (1248 columns: 16, 16, 7).
template <DType T>
void check_panels_equal_strips(std::uint64_t seed, int rows, int cols) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    tt::TestWeights const up = tt::make_weights<T>(rng, rows, cols);
    Strips const strips(w.matrix), up_strips(up.matrix);
    int const chunk = k::linear_token_chunk(k::int8_row_bytes(cols));
    for (int const tokens : {k::int8_panel_min_tokens<T>(), 37, chunk + 3}) {
        std::vector<float> const x =
            tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
        QuantizedRows const q = quantize(x, tokens, cols);
        std::size_t const n = static_cast<std::size_t>(tokens) * rows;
        for (int const threads : {1, 2}) {
            std::size_t const per_thread = k::linear_scratch_floats(cols);
            std::vector<float> scratch(per_thread * threads);
            auto const run = [&](bool panels, bool gated) {
                std::vector<float> y(n);
                tt::poison(std::span<float>(y));
#pragma omp parallel num_threads(threads)
                {
                    float* buffer =
                        panels ? scratch.data() + per_thread * omp_get_thread_num() : nullptr;
                    if (gated) {
                        k::gated_linear_team<T, Isa::avx512>(strips.matrix, up_strips.matrix,
                                                             q.view(), tokens, y.data(), rows,
                                                             buffer);
                    } else {
                        k::linear_team<T, Isa::avx512>(strips.matrix, q.view(), tokens, y.data(),
                                                       rows, k::Store::assign, buffer);
                    }
                }
                return y;
            };
            for (bool const gated : {false, true}) {
                std::vector<float> const panel = run(true, gated), strip = run(false, gated);
                BOOST_TEST(std::memcmp(panel.data(), strip.data(), n * sizeof(float)) == 0,
                           name_of(T) << " " << rows << "x" << cols << ", " << tokens << " tokens, "
                                      << threads << " thread(s)" << (gated ? ", gated" : "")
                                      << ": panels and strips differ");
            }
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(int8_linear)

BOOST_AUTO_TEST_CASE(quantized_rows_follow_the_definition) {
    auto rng = tt::seeded_rng(1000);
    for (int const cols : {32, 96, 128, 160, 576, 1536}) {
        std::vector<float> x = tt::random_floats(rng, static_cast<std::size_t>(cols), -3.f, 3.f);
        for (int i = 64; i < std::min(cols, 96); ++i)
            x[static_cast<std::size_t>(i)] = 0;  // all-zero block
        QuantizedRows const native = quantize<Isa::native>(x, 1, cols);
        QuantizedRows const portable = quantize<Isa::portable>(x, 1, cols);
        BOOST_TEST(
            std::memcmp(native.bytes.data(), portable.bytes.data(), native.bytes.size()) == 0,
            "native and portable quantizers differ at cols " << cols);
        if (cpu_runs(Isa::avx512)) {
            QuantizedRows const avx512 = quantize<Isa::avx512>(x, 1, cols);
            BOOST_TEST(
                std::memcmp(avx512.bytes.data(), portable.bytes.data(), avx512.bytes.size()) == 0,
                "AVX-512 and portable quantizers differ at cols " << cols);
        }
        if (cpu_runs(Isa::avx2)) {
            QuantizedRows const avx2 = quantize<Isa::avx2>(x, 1, cols);
            BOOST_TEST(
                std::memcmp(avx2.bytes.data(), portable.bytes.data(), avx2.bytes.size()) == 0,
                "AVX2 and portable quantizers differ at cols " << cols);
        }
        k::Int8Row const row = native.view().row(0, cols);
        int const blocks = cols / 32;
        for (int b = 0; b < blocks; ++b) {
            float amax = 0;
            for (int i = b * 32; i < b * 32 + 32; ++i) amax = std::max(amax, std::abs(x[i]));
            double const d = amax / 127.0;
            BOOST_TEST(std::abs(row.scale[b] - d) <= 1e-6 * d);
            long sum = 0;
            for (int i = b * 32; i < b * 32 + 32; ++i) {
                double const value = k::int8_row_value(row, i);
                BOOST_TEST(std::abs(value - x[i]) <= 0.5 * d * (1 + 1e-5) + 1e-30,
                           "element " << i << " of cols " << cols);
                sum += row.q[i];
            }
            BOOST_TEST(std::abs(row.sum[b] - row.scale[b] * sum) <=
                       1e-6 * std::abs(row.scale[b] * sum) + 1e-30);
        }
        BOOST_TEST(reinterpret_cast<std::byte const*>(row.sum + blocks) <=
                   native.bytes.data() + k::int8_row_bytes(cols));
    }
}

// The test's float64 decoding (weights_for_tests.hpp, written from the block layouts) and the
// library's dequantizer are independent readings of the formats: they agree.
BOOST_AUTO_TEST_CASE(reference_decoding_agrees_with_the_library) {
    auto rng = tt::seeded_rng(1050);
    auto const check = [&]<DType T>() {
        int const rows = 3, cols = 512;
        tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
        std::vector<float> decoded(static_cast<std::size_t>(cols));
        for (int r = 0; r < rows; ++r) {
            k::dequantize_row<T>(k::row_pointer<T>(w.matrix, r), cols, decoded.data());
            double worst = 0, largest = 0;
            for (int i = 0; i < cols; ++i) {
                double const ref = w.decoded[static_cast<std::size_t>(r) * cols + i];
                worst = std::max(worst, std::abs(decoded[i] - ref));
                largest = std::max(largest, std::abs(ref));
            }
            BOOST_TEST(worst <= 1e-6 * largest, name_of(T) << " row " << r << ": " << worst);
            BOOST_TEST(largest > 0);
        }
    };
    check.template operator()<DType::q5_0>();
    check.template operator()<DType::q5_1>();
    check.template operator()<DType::q4_k>();
    check.template operator()<DType::q5_k>();
    check.template operator()<DType::q6_k>();
}

BOOST_AUTO_TEST_CASE(q4_0_matches_reference) {
    check_shapes<DType::q4_0, Isa::native>(1100);
    check_shapes<DType::q4_0, Isa::portable>(1150);
}
BOOST_AUTO_TEST_CASE(q4_1_matches_reference) {
    check_shapes<DType::q4_1, Isa::native>(1200);
    check_shapes<DType::q4_1, Isa::portable>(1250);
}
BOOST_AUTO_TEST_CASE(q8_0_matches_reference) {
    check_shapes<DType::q8_0, Isa::native>(1300);
    check_shapes<DType::q8_0, Isa::portable>(1350);
}
BOOST_AUTO_TEST_CASE(q5_0_matches_reference) {
    check_shapes<DType::q5_0, Isa::native>(2100);
    check_shapes<DType::q5_0, Isa::portable>(2150);
}
BOOST_AUTO_TEST_CASE(q5_1_matches_reference) {
    check_shapes<DType::q5_1, Isa::native>(2200);
    check_shapes<DType::q5_1, Isa::portable>(2250);
}
BOOST_AUTO_TEST_CASE(q4_k_matches_reference) {
    check_shapes<DType::q4_k, Isa::native>(2300);
    check_shapes<DType::q4_k, Isa::portable>(2350);
}
BOOST_AUTO_TEST_CASE(q5_k_matches_reference) {
    check_shapes<DType::q5_k, Isa::native>(2500);
    check_shapes<DType::q5_k, Isa::portable>(2550);
}
BOOST_AUTO_TEST_CASE(q6_k_matches_reference) {
    check_shapes<DType::q6_k, Isa::native>(2400);
    check_shapes<DType::q6_k, Isa::portable>(2450);
}
BOOST_AUTO_TEST_CASE(avx2_matches_reference) {
    if (!cpu_runs(Isa::avx2)) {
        BOOST_TEST_MESSAGE("this CPU has no AVX2: only the portable kernels run here");
        return;
    }
    check_shapes<DType::q4_0, Isa::avx2>(1160);
    check_shapes<DType::q4_1, Isa::avx2>(1260);
    check_shapes<DType::q8_0, Isa::avx2>(1360);
    check_shapes<DType::q5_0, Isa::avx2>(2160);
    check_shapes<DType::q5_1, Isa::avx2>(2260);
    check_shapes<DType::q4_k, Isa::avx2>(2360);
    check_shapes<DType::q5_k, Isa::avx2>(2560);
    check_shapes<DType::q6_k, Isa::avx2>(2460);
}

BOOST_AUTO_TEST_CASE(avx512_matches_reference) {
    if (!cpu_runs(Isa::avx512)) {
        BOOST_TEST_MESSAGE("this CPU has no AVX-512 VNNI: kernels_avx512_emulated_test runs it");
        return;
    }
    check_shapes<DType::q4_0, Isa::avx512>(1170);
    check_shapes<DType::q4_1, Isa::avx512>(1270);
    check_shapes<DType::q8_0, Isa::avx512>(1370);
    check_shapes<DType::q5_0, Isa::avx512>(2170);
    check_shapes<DType::q5_1, Isa::avx512>(2270);
    check_shapes<DType::q4_k, Isa::avx512>(2370);
    check_shapes<DType::q5_k, Isa::avx512>(2570);
    check_shapes<DType::q6_k, Isa::avx512>(2470);
}

// Isa::native runs the widest version this CPU executes, unless TINFER_ISA names a lower one.
BOOST_AUTO_TEST_CASE(native_runs_the_widest_version_the_cpu_has) {
    char const* const request = std::getenv("TINFER_ISA");
    Isa expected = k::isa_rank(k::detected_isa()) < k::isa_rank(k::isa_floor) ? k::isa_floor
                                                                              : k::detected_isa();
    // tests/kernels/CMakeLists.txt runs the narrower builds with a request they can take.
    Isa const wanted = k::parse_isa(request ? request : "").value_or(expected);
    if (k::isa_rank(wanted) <= k::isa_rank(expected) &&
        k::isa_rank(wanted) >= k::isa_rank(k::isa_floor))
        expected = wanted;
    BOOST_TEST(k::name_of(k::running_isa()) == k::name_of(expected));
    BOOST_TEST(k::isa_compiled(k::running_isa()));
    BOOST_TEST(k::isa_compiled(k::isa_floor));
}

// TINFER_ISA caps the choice; never above the CPU, never below the build's floor.
BOOST_AUTO_TEST_CASE(the_isa_request_caps_the_choice) {
    std::string note;
    auto const choose = [&](Isa cpu, char const* request) {
        note.clear();
        return k::choose_isa(cpu, request ? std::optional<std::string_view>(request) : std::nullopt,
                             &note);
    };
    Isa const widest = k::isa_ceiling;
    BOOST_TEST(k::name_of(choose(Isa::avx512, nullptr)) ==
               k::name_of(k::isa_rank(k::isa_floor) > k::isa_rank(widest) ? k::isa_floor : widest));
    BOOST_TEST(note.empty());
    if constexpr (k::isa_floor == Isa::portable && k::isa_ceiling == Isa::avx512) {
        BOOST_TEST(k::name_of(choose(Isa::avx2, nullptr)) == std::string("avx2"));
        BOOST_TEST(k::name_of(choose(Isa::portable, nullptr)) == std::string("portable"));
        BOOST_TEST(k::name_of(choose(Isa::avx512, "avx2")) == std::string("avx2"));
        BOOST_TEST(k::name_of(choose(Isa::avx512, "portable")) == std::string("portable"));
        BOOST_TEST(note.empty());
        BOOST_TEST(k::name_of(choose(Isa::avx2, "avx512")) == std::string("avx2"));
        BOOST_TEST(note.find("past what this CPU runs") != std::string::npos, note);
    }
    if constexpr (k::isa_floor != Isa::portable) {
        BOOST_TEST(k::name_of(choose(Isa::avx512, "portable")) == k::name_of(k::isa_floor));
        BOOST_TEST(note.find("compiled for") != std::string::npos, note);
    }
    BOOST_TEST(k::name_of(choose(Isa::avx512, "sse9")) == k::name_of(choose(Isa::avx512, nullptr)));
    choose(Isa::avx512, "sse9");
    BOOST_TEST(note.find("not one of avx512, avx2, portable") != std::string::npos, note);
}

BOOST_AUTO_TEST_CASE(portable_is_bitwise_native) {
    // Full and partial strips (rows % 16), decode and prefill tiles: of 16 and 8 where the
    // format takes them (27 tokens), of 4, then 1, 2 or 3.
    for (auto const& [rows, cols, tokens] : {std::tuple{576, 576, 5},
                                             {37, 96, 9},
                                             {6, 160, 1},
                                             {3, 32, 4},
                                             {19, 224, 7},
                                             {21, 64, 6},
                                             {21, 64, 27}}) {
        check_portable_equals_native<DType::q4_0>(1600 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q4_1>(1700 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q8_0>(1800 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q5_0>(2600 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q5_1>(2700 + rows, rows, cols, tokens);
    }
    for (auto const& [rows, cols, tokens] : {std::tuple{160, 1024, 5},
                                             {37, 256, 9},
                                             {6, 512, 1},
                                             {19, 768, 7},
                                             {21, 256, 6},
                                             {21, 256, 27}}) {
        check_portable_equals_native<DType::q4_k>(2800 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q5_k>(3000 + rows, rows, cols, tokens);
        check_portable_equals_native<DType::q6_k>(2900 + rows, rows, cols, tokens);
    }
}

BOOST_AUTO_TEST_CASE(panels_are_bitwise_the_strips) {
    if (!cpu_runs(Isa::avx512)) {
        BOOST_TEST_MESSAGE("this CPU has no AVX-512 VNNI: kernels_avx512_emulated_test runs it");
        return;
    }
    BOOST_TEST_MESSAGE(
        (k::amx_int8_ready() ? "tiles of 16 tokens on AMX" : "no AMX here: the VNNI panels alone"));
    check_panels_equal_strips<DType::q4_0>(3100, 37, 1248);
    check_panels_equal_strips<DType::q4_1>(3101, 19, 576);
    check_panels_equal_strips<DType::q5_0>(3102, 37, 640);
    check_panels_equal_strips<DType::q5_1>(3103, 21, 96);
    check_panels_equal_strips<DType::q8_0>(3104, 37, 1248);
    check_panels_equal_strips<DType::q4_k>(3105, 37, 1280);
    check_panels_equal_strips<DType::q5_k>(3106, 19, 768);
    check_panels_equal_strips<DType::q6_k>(3107, 37, 1280);
}

// A matrix in the file's layout is refused by the int8 kernel, and a repacked one by repacking.
BOOST_AUTO_TEST_CASE(layouts_are_checked) {
    auto rng = tt::seeded_rng(1900);
    tt::TestWeights const w = tt::make_weights<DType::q4_1>(rng, 8, 64);
    std::vector<float> const x = tt::random_floats(rng, 64);
    QuantizedRows const q = quantize(x, 1, 64);
    std::vector<float> y(8);
    BOOST_CHECK_THROW(k::linear_int8<DType::q4_1>(w.matrix, q.view(), 1, y.data()), tinfer::Error);
    Strips const strips(w.matrix);
    BOOST_CHECK_THROW(k::linear<DType::q4_1>(strips.matrix, x.data(), 1, y.data()), tinfer::Error);
    std::vector<std::byte> again(strips.bytes.size());
    BOOST_CHECK_THROW(k::repack_int8_strips(strips.matrix, again.data()), tinfer::Error);
    tt::TestWeights const f16 = tt::make_weights<DType::f16>(rng, 8, 64);
    BOOST_CHECK_THROW(k::repack_int8_strips(f16.matrix, again.data()), tinfer::Error);
}

// Steps of several tokens (batched decode, prefill of one or more token chunks) hand strips out
// from a shared counter, fewer take guided shares (grain 0); a grab is never more than a
// thread's share, nor less than one strip. The outputs are the same bits either way
// (portable_is_bitwise_native runs 5 tokens on 2 threads).
BOOST_AUTO_TEST_CASE(strip_sharing_grain_follows_its_rules) {
    using k::detail::dynamic_share_grain;
    int const chunk = k::linear_token_chunk(k::int8_row_bytes(640));
    std::size_t const strip = 7040;                                 // a Q5_0 strip of 640 columns
    BOOST_TEST(dynamic_share_grain(128, strip, 2, 1) == 0);         // decode
    BOOST_TEST(dynamic_share_grain(128, strip, 2, 3) == 0);         // under 4 tokens
    BOOST_TEST(dynamic_share_grain(128, strip, 1, 16) == 0);        // one thread
    BOOST_TEST(dynamic_share_grain(128, strip, 2, chunk) > 0);      // one chunk
    BOOST_TEST(dynamic_share_grain(128, strip, 2, chunk + 1) > 0);  // two chunks
    // 16384 strips (Gemma 3's LM head): about eight grabs per thread.
    BOOST_TEST(dynamic_share_grain(16384, 10880, 2, 16) == 16384 / 16);
    // Small strips: at least dynamic_share_min_bytes per grab.
    int const least = static_cast<int>((k::detail::dynamic_share_min_bytes + 99) / 100);
    BOOST_TEST(dynamic_share_grain(100000, 100, 2, 16) == std::max(100000 / 16, least));
    BOOST_TEST(dynamic_share_grain(1000, 100, 2, 16) == least);
    // Few strips: never past a thread's share, never under one strip.
    BOOST_TEST(dynamic_share_grain(3, strip, 2, 16) == 2);
    BOOST_TEST(dynamic_share_grain(1, strip, 4, 16) == 1);
}

// A step's token chunks: whole tiles of 16 but the step's last, none longer than the L2 allows
// (rounded down to whole tiles), no more of them than that bound needs, and as even as whole
// tiles allow, so that only the step's end leaves a short tile.
BOOST_AUTO_TEST_CASE(token_chunks_are_even_whole_tiles) {
    int const tile = k::int8_widest_token_tile;
    for (int const cols : {96, 576, 640, 1536, 2048, 6144}) {
        int const longest = k::linear_token_chunk(k::int8_row_bytes(cols));
        int const bound = std::max(longest / tile * tile, tile);
        for (int tokens = 1; tokens <= 3000; ++tokens) {
            int const chunk = k::even_token_chunk(tokens, longest, tile);
            int const chunks = (tokens + chunk - 1) / chunk;
            int const last = tokens - (chunks - 1) * chunk;
            BOOST_TEST_REQUIRE(chunk % tile == 0, cols << " cols, " << tokens << " tokens");
            BOOST_TEST_REQUIRE(chunk <= bound, cols << " cols, " << tokens << " tokens");
            BOOST_TEST_REQUIRE(chunks == (tokens + bound - 1) / bound,
                               cols << " cols, " << tokens << " tokens");
            // As even as whole tiles allow: one tile fewer per chunk would need another chunk.
            BOOST_TEST_REQUIRE((chunk == tile || (chunk - tile) * chunks < tokens),
                               cols << " cols, " << tokens << " tokens");
            BOOST_TEST_REQUIRE(last > 0);
        }
    }
    // SmolLM2's 512-token prefill: its 1536-column rows in four chunks of 128, not 136 (each
    // ending in a tile of 8), its 576-column rows in two of 256, not 340 and 172.
    BOOST_TEST(k::even_token_chunk(512, k::linear_token_chunk(k::int8_row_bytes(1536)), tile) ==
               128);
    BOOST_TEST(k::even_token_chunk(512, k::linear_token_chunk(k::int8_row_bytes(576)), tile) ==
               256);
}

BOOST_AUTO_TEST_CASE(batch_invariant_bitwise) {
    check_batch_invariance<DType::q4_1, Isa::native>(1400, 576, 576);
    check_batch_invariance<DType::q8_0, Isa::native>(1401, 37, 96);
    check_batch_invariance<DType::q4_0, Isa::native>(1402, 21, 160);
    check_batch_invariance<DType::q4_1, Isa::portable>(1403, 37, 96);
    check_batch_invariance<DType::q5_0, Isa::native>(1404, 37, 640);
    check_batch_invariance<DType::q5_1, Isa::native>(1405, 21, 160);
    check_batch_invariance<DType::q4_k, Isa::native>(1406, 37, 1024);
    check_batch_invariance<DType::q6_k, Isa::native>(1407, 37, 512);
    check_batch_invariance<DType::q4_k, Isa::portable>(1408, 21, 256);
    check_batch_invariance<DType::q6_k, Isa::avx2>(1409, 21, 256);
    check_batch_invariance<DType::q5_k, Isa::native>(1410, 37, 768);
    // Two token chunks on two threads, strips handed out from the shared counter in each.
    check_batch_invariance<DType::q4_1, Isa::native>(
        1411, 64, 576, k::linear_token_chunk(k::int8_row_bytes(576)) + 3);
}

// Matrices multiplied as one stacked list (a layer's Q, K and V) give each matrix's products
// alone, bitwise: partial last strips, a decode row, a few rows (shared strips from the
// counter on two threads), a prefill chunk on the panels; one thread and two.
template <DType T>
void check_stacked_equals_alone(std::uint64_t seed, int cols) {
    auto rng = tt::seeded_rng(seed);
    int const rows[3] = {37, 16, 5};
    std::vector<tt::TestWeights> weights;
    std::vector<Strips> strips;
    weights.reserve(3);  // each matrix points into its own bytes: no reallocation
    strips.reserve(3);
    for (int const r : rows) weights.push_back(tt::make_weights<T>(rng, r, cols));
    for (auto const& w : weights) strips.emplace_back(w.matrix);
    for (int const tokens : {1, 3, 40}) {
        std::vector<float> const x =
            tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
        QuantizedRows const q = quantize(x, tokens, cols);
        for (int const threads : {1, 2}) {
            std::vector<std::vector<float>> stacked(3);
            k::StackedOutput outputs[3];
            for (int m = 0; m < 3; ++m) {
                stacked[m].resize(static_cast<std::size_t>(tokens) * rows[m]);
                tt::poison(std::span<float>(stacked[m]));
                outputs[m] = {&strips[m].matrix, stacked[m].data(),
                              static_cast<std::size_t>(rows[m])};
            }
            std::size_t const per_thread = k::linear_scratch_floats(cols);
            std::vector<float> scratch(per_thread * threads);
#pragma omp parallel num_threads(threads)
            k::stacked_linear_team<T>(
                tinfer::DynamicExtent{cols}, outputs, q.view(), tokens, k::Store::assign,
                scratch.data() + per_thread * static_cast<std::size_t>(omp_get_thread_num()));
            for (int m = 0; m < 3; ++m) {
                std::vector<float> alone(stacked[m].size());
                k::linear_int8<T>(strips[m].matrix, q.view(), tokens, alone.data(), 1);
                BOOST_TEST(
                    std::memcmp(alone.data(), stacked[m].data(), alone.size() * sizeof(float)) == 0,
                    "matrix " << m << ", " << tokens << " tokens on " << threads << " thread(s)");
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(stacked_matrices_equal_each_alone) {
    check_stacked_equals_alone<DType::q4_1>(1600, 160);
    check_stacked_equals_alone<DType::q5_0>(1601, 640);
    check_stacked_equals_alone<DType::q6_k>(1602, 256);
}

// The fused epilogues are the separate operations, bitwise: gated = swiglu of two products,
// accumulate = y + product; for float and int8 rows.
BOOST_AUTO_TEST_CASE(fused_epilogues_equal_separate_operations) {
    auto rng = tt::seeded_rng(1500);
    int const rows = 37, cols = 160, tokens = 9;
    tt::TestWeights const gate = tt::make_weights<DType::q4_1>(rng, rows, cols);
    tt::TestWeights const up = tt::make_weights<DType::q4_1>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    std::vector<float> const base = tt::random_floats(rng, static_cast<std::size_t>(tokens) * rows);
    QuantizedRows const q = quantize(x, tokens, cols);
    std::vector<float> buffer(k::linear_scratch_floats(cols));
    std::size_t const n = static_cast<std::size_t>(tokens) * rows;

    auto const check = [&](auto rows_view, k::WeightMatrix const& g_matrix,
                           k::WeightMatrix const& u_matrix, auto separate) {
        std::vector<float> g(n), u(n), fused(n);
        separate(g_matrix, g.data());
        separate(u_matrix, u.data());
        k::swiglu(g.data(), u.data(), n, g.data());
        k::gated_linear_team<DType::q4_1>(g_matrix, u_matrix, rows_view, tokens, fused.data(), rows,
                                          buffer.data());
        BOOST_TEST(std::memcmp(g.data(), fused.data(), n * sizeof(float)) == 0);

        std::vector<float> sum = base, product(n);
        separate(g_matrix, product.data());
        for (std::size_t i = 0; i < n; ++i) product[i] = base[i] + product[i];
        k::linear_team<DType::q4_1>(g_matrix, rows_view, tokens, sum.data(), rows,
                                    k::Store::accumulate, buffer.data());
        BOOST_TEST(std::memcmp(sum.data(), product.data(), n * sizeof(float)) == 0);
    };
    check(k::FloatRows{x.data(), static_cast<std::size_t>(cols)}, gate.matrix, up.matrix,
          [&](k::WeightMatrix const& w, float* y) {
              k::linear<DType::q4_1>(w, x.data(), tokens, y, 1);
          });
    Strips const gate_strips(gate.matrix), up_strips(up.matrix);
    check(q.view(), gate_strips.matrix, up_strips.matrix, [&](k::WeightMatrix const& w, float* y) {
        k::linear_int8<DType::q4_1>(w, q.view(), tokens, y, 1);
    });
}

BOOST_AUTO_TEST_SUITE_END()
