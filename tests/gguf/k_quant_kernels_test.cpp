// The host kernels' float paths (embedding, linear) on the K-quant tensors of golden_v3.gguf,
// dispatched on the stored type, against gguf-py's decoding of the same bytes
// (tests/reference/make_gguf_golden.py): each block format reaches the kernels intact.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/embedding.hpp>
#include <tinfer/kernels/linear.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace gguf = tinfer::gguf;
namespace kernels = tinfer::kernels;
namespace tt = tinfer::testing;
using namespace tinfer::testing::gguf_support;

namespace {

constexpr char const* k_quant_tensors[] = {"t_q2_k", "t_q3_k", "t_q4_k", "t_q5_k", "t_q6_k"};

struct Golden {
    std::vector<float> values;   // gguf-py's decoding, [rows][cols]
    std::vector<float> offsets;  // affine types: the decoding with d = 0; else empty
};

Golden golden_values(std::string const& name) {
    Golden g{read_floats(gguf_data_dir() / ("golden_" + name + ".f32")), {}};
    auto const offset_path = gguf_data_dir() / ("golden_" + name + ".offset.f32");
    if (std::filesystem::exists(offset_path)) g.offsets = read_floats(offset_path);
    return g;
}

kernels::WeightMatrix matrix_of(gguf::TensorInfo const& t) {
    return {gguf::to_dtype(t.type).value(), static_cast<int>(t.rows()),
            static_cast<int>(t.row_length()), t.data.data()};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(k_quant_kernels)

BOOST_AUTO_TEST_CASE(embedding_rows_are_the_decoded_rows) {
    auto const file = gguf::File::open(gguf_data_dir() / "golden_v3.gguf");
    for (char const* name : k_quant_tensors) {
        BOOST_TEST_CONTEXT(name) {
            auto const& tensor = file.tensor(name);
            kernels::WeightMatrix const w = matrix_of(tensor);
            Golden const g = golden_values(name);
            std::vector<std::int32_t> tokens;  // every row, in an order not the file's
            for (int r = w.rows - 1; r >= 0; --r) tokens.push_back(r);
            tokens.push_back(0);
            std::vector<float> out(tokens.size() * static_cast<std::size_t>(w.cols));
            tt::poison(std::span<float>(out));
            kernels::embedding_any(w, tokens, out.data());
            std::vector<float> row(w.cols);
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                std::size_t const at = static_cast<std::size_t>(tokens[i]) * w.cols;
                std::span<float const> const got(out.data() + i * w.cols, w.cols);
                // Bitwise the reader's decoding of that row ...
                gguf::dequantize_rows(tensor, static_cast<std::uint64_t>(tokens[i]), row);
                BOOST_TEST(std::memcmp(got.data(), row.data(), row.size() * sizeof(float)) == 0,
                           "row " << tokens[i]);
                // ... and gguf-py's, within the FMA bound for affine types.
                check_decoded(got, std::span<float const>(g.values).subspan(at, w.cols),
                              g.offsets.empty()
                                  ? std::span<float const>{}
                                  : std::span<float const>(g.offsets).subspan(at, w.cols),
                              std::string(name) + " row " + std::to_string(tokens[i]));
            }
        }
    }
}

// One output y = sum_k w_k x_k against float64 over gguf-py's weights: the kernel's own float
// sum allows (cols + 2) roundings of sum |w_k x_k| (tests/kernels/linear_test.cpp derives it);
// an affine weight may differ from gguf-py's by the FMA bound eps (|w - offset| + |w|), which
// moves y by at most that times |x_k|.
BOOST_AUTO_TEST_CASE(linear_matches_float64_over_gguf_py_weights) {
    auto const file = gguf::File::open(gguf_data_dir() / "golden_v3.gguf");
    constexpr double eps = std::numeric_limits<float>::epsilon();
    auto rng = tt::seeded_rng(46);
    for (char const* name : k_quant_tensors) {
        BOOST_TEST_CONTEXT(name) {
            kernels::WeightMatrix const w = matrix_of(file.tensor(name));
            Golden const g = golden_values(name);
            int const tokens = 5, threads = 2;
            std::vector<float> const x =
                tt::random_floats(rng, static_cast<std::size_t>(tokens) * w.cols);
            std::vector<float> y(static_cast<std::size_t>(tokens) * w.rows);
            tt::poison(std::span<float>(y));
            std::vector<float> scratch(kernels::linear_scratch_floats(w.cols) * threads);
            kernels::linear_any(w, x.data(), tokens, y.data(), threads, scratch);

            double const rtol = tt::float32_sum_rtol(static_cast<std::size_t>(w.cols) + 2);
            double worst = 0;
            for (int t = 0; t < tokens; ++t) {
                for (int o = 0; o < w.rows; ++o) {
                    double ref = 0, magnitude = 0, decode_slack = 0;
                    for (int k = 0; k < w.cols; ++k) {
                        std::size_t const at = static_cast<std::size_t>(o) * w.cols + k;
                        double const wk = g.values[at];
                        double const xk = x[static_cast<std::size_t>(t) * w.cols + k];
                        ref += wk * xk;
                        magnitude += std::abs(wk * xk);
                        if (!g.offsets.empty())
                            decode_slack +=
                                eps * (std::abs(wk - g.offsets[at]) + std::abs(wk)) * std::abs(xk);
                    }
                    double const got = y[static_cast<std::size_t>(t) * w.rows + o];
                    double const allowed = rtol * magnitude + decode_slack;
                    double const error = std::isnan(got) ? std::numeric_limits<double>::infinity()
                                         : allowed > 0   ? std::abs(got - ref) / allowed
                                                         : (got == ref ? 0.0 : 1e300);
                    worst = std::max(worst, error);
                }
            }
            BOOST_TEST_MESSAGE(name << ": worst error / bound " << worst);
            BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
