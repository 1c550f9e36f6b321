// Device RMSNorm, RoPE, SwiGLU, row ops, embedding and quantized linear against the host kernels,
// on fresh seeded random inputs at SmolLM2-135M's sizes. Also: RMSNorm and SwiGLU in place (out
// aliasing an input) equal to out of place, bitwise; RoPE and block copies past grid y's 65,535
// blocks; and an error left pending by earlier work is reported as earlier, not as the next
// kernel's.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/cuda/embedding.cuh>
#include <tinfer/kernels/cuda/kv_cache.cuh>
#include <tinfer/kernels/cuda/linear.cuh>
#include <tinfer/kernels/cuda/rmsnorm.cuh>
#include <tinfer/kernels/cuda/rope.cuh>
#include <tinfer/kernels/cuda/rows.cuh>
#include <tinfer/kernels/cuda/swiglu.cuh>
#include <tinfer/kernels/embedding.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/swiglu.hpp>
#include <tinfer/presets/presets.hpp>

#include "cuda_testing.cuh"

namespace {

using namespace tinfer;
using namespace tinfer::cuda_testing;
using kernels::cuda::DeviceBuffer;

constexpr ModelConfig model = presets::smollm2_135m;
// Below any difference the kernels can make; bounds are relative, this only avoids 0/0.
constexpr double tiny = 1e-30;

void test_rmsnorm(Checker& checker, std::mt19937_64& rng) {
    constexpr int rows = 7;
    auto const x = random_floats(rng, rows * model.hidden, -3, 3);
    auto const weight = random_floats(rng, model.hidden, 0.5f, 1.5f);
    float const eps = static_cast<float>(model.norm_eps);
    std::vector<float> expected(x.size());
    kernels::rmsnorm<model.hidden>(x.data(), weight.data(), eps, rows, expected.data());

    DeviceBuffer<float> const dx(x), dweight(weight);
    auto out = poisoned_floats(x.size());
    kernels::cuda::rmsnorm<model.hidden>(dx.data(), dweight.data(), eps, rows, out.data());
    // Each side: sum of squares within hidden * eps, then a square root (halves it), a
    // reciprocal and two products of a few eps each.
    double const rtol = (model.hidden + 16) * float_epsilon;
    auto const result = out.to_host();
    checker.expect_within(max_scaled_error(result, expected, tiny, rtol), "rmsnorm hidden 576");

    // In place (out == x, as the kernel allows): the same floats as out of place.
    DeviceBuffer<float> in_place(x);
    kernels::cuda::rmsnorm<model.hidden>(in_place.data(), dweight.data(), eps, rows,
                                         in_place.data());
    checker.expect(in_place.to_host() == result, "rmsnorm in place == out of place, bitwise");
}

void test_rope(Checker& checker, std::mt19937_64& rng) {
    constexpr int head_dim = model.head_dim;
    constexpr int rows = 9;
    std::vector<int> positions(rows);
    std::uniform_int_distribution<int> position(0,
                                                200000);  // far beyond the context: stresses angles
    for (int& p : positions) p = position(rng);
    positions[0] = 0;
    int const heads = model.heads;
    auto const x = random_floats(rng, static_cast<std::size_t>(rows) * heads * head_dim);

    std::vector<float> table(static_cast<std::size_t>(rows) * head_dim);
    kernels::rope_table<head_dim>(model.rope_base, positions.data(), rows, table.data());
    std::vector<float> expected = x;
    kernels::apply_rope<head_dim>(expected.data(), rows, heads,
                                  static_cast<std::size_t>(heads) * head_dim, table.data());

    DeviceBuffer<int> const dpositions(positions);
    auto dtable = poisoned_floats(table.size());
    kernels::cuda::rope_table<head_dim>(model.rope_base, dpositions.data(), rows, dtable.data());
    // Both sides form the angle in double (pow and the product within a few double ulps of the
    // angle's size) and round cos and sin once to float: they differ by at most one float ulp
    // plus the double error, which matters only where cos or sin is near zero.
    std::vector<double> table_bound(table.size());
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < head_dim / 2; ++i) {
            double const angle = positions[r] * std::pow(model.rope_base, -2.0 * i / head_dim);
            double const angle_error = 8 * std::numeric_limits<double>::epsilon() * (angle + 1);
            for (int k = 0; k < 2; ++k) {
                std::size_t const at = static_cast<std::size_t>(r) * head_dim + 2 * i + k;
                table_bound[at] = float_epsilon * std::abs(table[at]) + angle_error + tiny;
            }
        }
    auto const device_table = dtable.to_host();
    checker.expect_within(max_scaled_error(device_table, table, table_bound), "rope table");

    DeviceBuffer<float> dx(x);
    kernels::cuda::apply_rope<head_dim>(dx.data(), rows, heads,
                                        static_cast<std::size_t>(heads) * head_dim, dtable.data());
    // x0 c - x1 s: two products and a sum (3 roundings) per side, plus the tables' difference.
    std::vector<double> bound(x.size());
    for (std::size_t i = 0; i < x.size(); i += 2) {
        std::size_t const row = i / (static_cast<std::size_t>(heads) * head_dim);
        std::size_t const pair = i % head_dim;
        std::size_t const at = row * head_dim + pair;
        double const table_difference = std::max(std::abs(device_table[at] - table[at]),
                                                 std::abs(device_table[at + 1] - table[at + 1]));
        double const magnitude = std::abs(x[i]) + std::abs(x[i + 1]);
        bound[i] = bound[i + 1] = (8 * float_epsilon + table_difference) * magnitude + tiny;
    }
    checker.expect_within(max_scaled_error(dx.to_host(), expected, bound),
                          "rope head_dim 64, 9 heads");
}

void test_swiglu(Checker& checker, std::mt19937_64& rng) {
    constexpr std::size_t n = 5 * model.ffn + 3;  // not a multiple of anything
    auto const gate = random_floats(rng, n, -20, 20);
    auto const up = random_floats(rng, n, -2, 2);
    std::vector<float> expected(n);
    kernels::swiglu(gate.data(), up.data(), n, expected.data());
    DeviceBuffer<float> const dgate(gate), dup(up);
    auto out = poisoned_floats(n);
    kernels::cuda::swiglu(dgate.data(), dup.data(), n, out.data());
    // exp within 2 ulp on the device, 1 on the host; a sum, a quotient and a product.
    auto const result = out.to_host();
    checker.expect_within(max_scaled_error(result, expected, tiny, 8 * float_epsilon), "swiglu");

    // In place on either input (the device model writes over gate): the same floats.
    DeviceBuffer<float> gate_in_place(gate), up_in_place(up);
    kernels::cuda::swiglu(gate_in_place.data(), dup.data(), n, gate_in_place.data());
    kernels::cuda::swiglu(dgate.data(), up_in_place.data(), n, up_in_place.data());
    checker.expect(gate_in_place.to_host() == result, "swiglu out == gate, bitwise");
    checker.expect(up_in_place.to_host() == result, "swiglu out == up, bitwise");
}

// NeoX pairing (x[i], x[i + head_dim/2]), Qwen2's and Gemma's: against the host's, on the same
// table (its own accuracy is test_rope's), so only the pair's products and sum differ.
void test_rope_neox(Checker& checker, std::mt19937_64& rng) {
    constexpr int head_dim = 128;
    constexpr int rows = 7, heads = 5;
    std::vector<int> positions(rows);
    std::uniform_int_distribution<int> position(0, 30000);
    for (int& p : positions) p = position(rng);
    auto const x = random_floats(rng, static_cast<std::size_t>(rows) * heads * head_dim);
    std::vector<float> table(static_cast<std::size_t>(rows) * head_dim);
    kernels::rope_table<head_dim>(1e6, positions.data(), rows, table.data());
    std::vector<float> expected = x;
    std::size_t const stride = static_cast<std::size_t>(heads) * head_dim;
    kernels::apply_rope<head_dim, RopePairing::neox>(expected.data(), rows, heads, stride,
                                                     table.data());
    DeviceBuffer<float> dx(x);
    DeviceBuffer<float> const dtable(table);
    kernels::cuda::apply_rope<head_dim, RopePairing::neox>(dx.data(), rows, heads, stride,
                                                           dtable.data());
    // x0 c - x1 s: two products and a sum, rounded alike or fused (FMA) on either side.
    std::vector<double> bound(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        std::size_t const in_head = i % head_dim;
        std::size_t const partner = in_head < head_dim / 2 ? i + head_dim / 2 : i - head_dim / 2;
        bound[i] = 4 * float_epsilon * (std::abs(x[i]) + std::abs(x[partner])) + tiny;
    }
    checker.expect_within(max_scaled_error(dx.to_host(), expected, bound),
                          "rope neox head_dim 128, 5 heads");
}

// GeGLU's gate, gelu_tanh(gate) * up: the host's formula with exp2f for its degree-6 2^x (each
// within about one float ulp). tanh(u) = (1 - e) / (1 + e) with e = 2^(-2 log2(e) |u|): an error
// of a few ulp of e (<= 1) moves tanh by a few 2^-24 absolutely, so gelu = x (1 + tanh) / 2 by
// |x| times that; a few roundings of the result on top.
void test_gated_gelu(Checker& checker, std::mt19937_64& rng) {
    constexpr std::size_t n = 3 * model.ffn + 5;
    auto const gate = random_floats(rng, n, -12, 12);
    auto const up = random_floats(rng, n, -2, 2);
    std::vector<float> expected(n);
    std::vector<double> bound(n);
    for (std::size_t i = 0; i < n; ++i) {
        expected[i] = kernels::gelu_tanh(gate[i]) * up[i];
        bound[i] = 8 * float_epsilon * (std::abs(expected[i]) + std::abs(gate[i] * up[i])) + tiny;
    }
    DeviceBuffer<float> const dgate(gate), dup(up);
    auto out = poisoned_floats(n);
    kernels::cuda::gated_activation<GatedActivation::gelu_tanh>(dgate.data(), dup.data(), n,
                                                                out.data());
    checker.expect_within(max_scaled_error(out.to_host(), expected, bound), "gelu_tanh gate");
    // In place, as the device layer gates: the same floats.
    DeviceBuffer<float> in_place(gate);
    kernels::cuda::gated_activation<GatedActivation::gelu_tanh>(in_place.data(), dup.data(), n,
                                                                in_place.data());
    checker.expect(in_place.to_host() == out.to_host(), "gelu_tanh gate in place, bitwise");
}

// The architecture parts' elementwise kernels: one addition (QKV bias) and one product (the
// embedding scale) are exact roundings on both sides, so bitwise; soft-capping's tanhf is
// within 2 ulp of the host's std::tanh, times the cap.
void test_architecture_parts(Checker& checker, std::mt19937_64& rng) {
    constexpr int rows = 13, width = 96;
    auto const x = random_floats(rng, static_cast<std::size_t>(rows) * width, -5, 5);
    auto const bias = random_floats(rng, width, -1, 1);
    std::vector<float> biased = x, scaled = x, capped = x;
    constexpr float scale = 24.0f, cap = 3.0f;
    std::vector<double> cap_bound(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        biased[i] += bias[i % width];
        scaled[i] *= scale;
        capped[i] = cap * std::tanh(capped[i] / cap);
        cap_bound[i] = 8 * float_epsilon * cap + tiny;
    }
    DeviceBuffer<float> dx(x);
    DeviceBuffer<float> const dbias(bias);
    kernels::cuda::add_row_bias(dx.data(), dbias.data(), rows, width);
    checker.expect(dx.to_host() == biased, "add_row_bias == host, bitwise");
    DeviceBuffer<float> dscaled(x);
    kernels::cuda::scale_in_place(dscaled.data(), scale, x.size());
    checker.expect(dscaled.to_host() == scaled, "scale_in_place == host, bitwise");
    DeviceBuffer<float> dcapped(x);
    kernels::cuda::soft_cap(dcapped.data(), cap, x.size());
    checker.expect_within(max_scaled_error(dcapped.to_host(), capped, cap_bound), "soft_cap");
}

// More rows than grid y holds blocks (65,535): every row must still turn, the last ones too.
void test_rope_beyond_grid_y(Checker& checker, std::mt19937_64& rng) {
    constexpr int head_dim = model.head_dim;
    constexpr int rows = 65535 + 4465;  // 70,000
    constexpr int heads = 1;
    std::vector<int> positions(rows);
    for (int r = 0; r < rows; ++r) positions[r] = r;
    auto const x = random_floats(rng, static_cast<std::size_t>(rows) * heads * head_dim);
    DeviceBuffer<int> const dpositions(positions);
    auto dtable = poisoned_floats(static_cast<std::size_t>(rows) * head_dim);
    kernels::cuda::rope_table<head_dim>(model.rope_base, dpositions.data(), rows, dtable.data());
    auto const table = dtable.to_host();
    // The host applies the device's own table: the two differ only by the rounding of
    // x0 c - x1 s (3 roundings a side, or 2 where the device fuses a product into the sum).
    std::vector<float> expected = x;
    kernels::apply_rope<head_dim>(expected.data(), rows, heads, head_dim, table.data());
    DeviceBuffer<float> dx(x);
    kernels::cuda::apply_rope<head_dim>(dx.data(), rows, heads, head_dim, dtable.data());
    std::vector<double> bound(x.size());
    for (std::size_t i = 0; i < x.size(); i += 2)
        bound[i] = bound[i + 1] = 8 * float_epsilon * (std::abs(x[i]) + std::abs(x[i + 1])) + tiny;
    checker.expect_within(max_scaled_error(dx.to_host(), expected, bound),
                          "rope over 70,000 rows (past grid y's 65,535)");
}

// More block copies than grid y holds blocks: every target a bitwise copy of its source.
void test_copy_blocks_beyond_grid_y(Checker& checker, std::mt19937_64& rng) {
    constexpr int copies = 65535 + 4465;
    constexpr std::size_t block_bytes = 48;  // 3 words of 16 bytes
    std::vector<std::byte> pool(2 * copies * block_bytes);
    for (std::size_t i = 0; i < copies * block_bytes; ++i) pool[i] = std::byte(rng() & 0xff);
    std::vector<kernels::cuda::BlockCopy> pairs;
    for (int c = 0; c < copies; ++c) pairs.push_back({c, 2 * copies - 1 - c});  // reversed
    DeviceBuffer<std::byte> dpool(pool);
    DeviceBuffer<kernels::cuda::BlockCopy> const dpairs(pairs);
    kernels::cuda::copy_blocks(dpool.data(), block_bytes, dpairs.data(), copies);
    auto const result = dpool.to_host();
    bool equal = true;
    for (int c = 0; c < copies; ++c)
        equal = equal && std::memcmp(result.data() + (2 * copies - 1 - c) * block_bytes,
                                     pool.data() + c * block_bytes, block_bytes) == 0;
    checker.expect(equal, "copy_blocks of 70,000 blocks (past grid y's 65,535), bitwise");
}

__global__ void idle_kernel() {}

// An error that earlier work left pending is reported as earlier, not as the next kernel's
// failure; kernel execution failures (which a not-yet-run kernel cannot cause) likewise.
void test_earlier_errors_are_named_earlier(Checker& checker) {
    idle_kernel<<<1, 4096>>>();  // 4096 threads per block: an invalid configuration, unchecked
    DeviceBuffer<float> buffer(64);
    std::string message;
    cudaError_t code = cudaSuccess;
    try {
        kernels::cuda::swiglu(buffer.data(), buffer.data(), buffer.size(), buffer.data());
    } catch (kernels::cuda::CudaError const& error) {
        message = error.what();
        code = error.code;
    }
    checker.expect(code == cudaErrorInvalidConfiguration &&
                       message.find("an earlier CUDA call or kernel failed") != std::string::npos &&
                       message.find("before launching gated_activation_kernel") != std::string::npos,
                   "an error pending before a launch is named earlier: '" + message + "'");
    // The pending error was consumed with the report: the next launch runs.
    kernels::cuda::swiglu(buffer.data(), buffer.data(), buffer.size(), buffer.data());
    kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    checker.expect(kernels::cuda::is_earlier_kernel_failure(cudaErrorIllegalAddress) &&
                       kernels::cuda::is_earlier_kernel_failure(cudaErrorLaunchFailure) &&
                       !kernels::cuda::is_earlier_kernel_failure(cudaErrorInvalidConfiguration) &&
                       !kernels::cuda::is_earlier_kernel_failure(cudaErrorLaunchOutOfResources),
                   "execution failures are told from launch failures");
}

// A [rows][cols] matrix of random weights in encoding W, as bytes.
template <DType W>
std::vector<std::byte> random_weights(std::mt19937_64& rng, int rows, int cols) {
    auto const values = random_floats(rng, static_cast<std::size_t>(rows) * cols);
    std::vector<std::byte> bytes(static_cast<std::size_t>(rows) * kernels::row_bytes<W>(cols));
    if constexpr (W == DType::f32) {
        std::memcpy(bytes.data(), values.data(), bytes.size());
    } else if constexpr (W == DType::f16 || W == DType::bf16) {
        for (std::size_t i = 0; i < values.size(); ++i) {
            std::uint16_t const bits =
                W == DType::f16 ? float_to_f16_bits(values[i]) : float_to_bf16_bits(values[i]);
            std::memcpy(bytes.data() + i * sizeof bits, &bits, sizeof bits);
        }
    } else {
        using Block = quant::BlockOfT<W>;
        auto* blocks = reinterpret_cast<Block*>(bytes.data());
        for (std::size_t b = 0; b < values.size() / Block::elements; ++b)
            quant::quantize_block(values.data() + b * Block::elements, blocks[b]);
    }
    return bytes;
}

template <DType W>
void test_embedding(Checker& checker, std::mt19937_64& rng) {
    constexpr int vocab = 1000;  // a slice of the real table is enough to test the gather
    auto const table = random_weights<W>(rng, vocab, model.hidden);
    std::vector<std::int32_t> tokens = {0, vocab - 1, 17, 17, 512};
    std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
    for (int i = 0; i < 11; ++i) tokens.push_back(token(rng));
    kernels::WeightMatrix const host_table{W, vocab, model.hidden, table.data()};
    std::vector<float> expected(tokens.size() * model.hidden);
    kernels::embedding<W>(host_table, tokens, expected.data());

    DeviceBuffer<std::byte> const dtable(table);
    DeviceBuffer<std::int32_t> const dtokens(tokens);
    auto out = poisoned_floats(expected.size());
    kernels::WeightMatrix const device_table{W, vocab, model.hidden, dtable.data()};
    kernels::cuda::embedding<W, model.hidden>(device_table, dtokens.data(),
                                              static_cast<int>(tokens.size()), out.data());
    // Dequantization is exact arithmetic on both sides: bitwise equal.
    auto const result = out.to_host();
    bool const equal =
        std::memcmp(result.data(), expected.data(), expected.size() * sizeof(float)) == 0;
    checker.expect(equal, std::string("embedding ") + std::string(name_of(W)) + " bitwise");
    if (equal) std::printf("ok: embedding %s bitwise\n", std::string(name_of(W)).c_str());
}

template <DType W, int In>
void test_linear(Checker& checker, std::mt19937_64& rng, int outputs, int tokens) {
    auto const weights = random_weights<W>(rng, outputs, In);
    auto const x = random_floats(rng, static_cast<std::size_t>(tokens) * In);
    kernels::WeightMatrix const host_w{W, outputs, In, weights.data()};
    std::vector<float> expected(static_cast<std::size_t>(tokens) * outputs);
    kernels::linear<W>(host_w, x.data(), tokens, expected.data());

    // Bound per output: a float sum of In products is within In * eps * sum |w x| of the exact
    // value on either side (worst case, whatever the order), so they differ by at most twice it.
    std::vector<float> row(In);
    std::vector<double> bound(expected.size());
    for (int o = 0; o < outputs; ++o) {
        kernels::dequantize_row<W>(kernels::row_pointer<W>(host_w, o), In, row.data());
        for (int t = 0; t < tokens; ++t) {
            double magnitude = 0;
            for (int k = 0; k < In; ++k)
                magnitude +=
                    std::abs(static_cast<double>(row[k]) * x[static_cast<std::size_t>(t) * In + k]);
            bound[static_cast<std::size_t>(t) * outputs + o] =
                2 * In * float_epsilon * magnitude + tiny;
        }
    }

    DeviceBuffer<std::byte> const dweights(weights);
    DeviceBuffer<float> const dx(x);
    auto y = poisoned_floats(expected.size());
    kernels::WeightMatrix const device_w{W, outputs, In, dweights.data()};
    kernels::cuda::linear<W, In>(device_w, dx.data(), tokens, y.data());
    checker.expect_within(max_scaled_error(y.to_host(), expected, bound),
                          "linear " + std::string(name_of(W)) + " in " + std::to_string(In) +
                              " out " + std::to_string(outputs) + " tokens " +
                              std::to_string(tokens));
}

// The residual add and the row gather of the device model: one float add per element, and
// plain copies, so both are exact (compared bitwise, NaN poison included).
void test_row_ops(Checker& checker, std::mt19937_64& rng) {
    constexpr int rows = 13;
    constexpr std::size_t n = static_cast<std::size_t>(rows) * model.hidden;
    auto const y = random_floats(rng, n, -4, 4);
    auto const x = random_floats(rng, n, -4, 4);
    std::vector<float> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = y[i] + x[i];
    DeviceBuffer<float> dy(y);
    DeviceBuffer<float> const dx(x);
    kernels::cuda::add_in_place(dy.data(), dx.data(), n);
    checker.expect(dy.to_host() == expected, "add_in_place exact");

    std::vector<int> const ids = {12, 0, 5, 5, 7};
    DeviceBuffer<int> const dids(ids);
    auto out = poisoned_floats(ids.size() * model.hidden);
    kernels::cuda::gather_rows<model.hidden>(dx.data(), dids.data(), static_cast<int>(ids.size()),
                                             rows, out.data());
    std::vector<float> gathered;
    for (int id : ids)
        gathered.insert(gathered.end(), x.begin() + static_cast<std::ptrdiff_t>(id) * model.hidden,
                        x.begin() + static_cast<std::ptrdiff_t>(id + 1) * model.hidden);
    checker.expect(out.to_host() == gathered, "gather_rows exact");
}

}  // namespace

int main() {
    return run_device_tests("cuda_elementwise_test", [](Checker& checker) {
        auto rng = seeded_rng(test_seed());
        test_rmsnorm(checker, rng);
        test_rope(checker, rng);
        test_swiglu(checker, rng);
        test_rope_neox(checker, rng);
        test_gated_gelu(checker, rng);
        test_architecture_parts(checker, rng);
        test_rope_beyond_grid_y(checker, rng);
        test_copy_blocks_beyond_grid_y(checker, rng);
        test_earlier_errors_are_named_earlier(checker);
        test_row_ops(checker, rng);
        test_embedding<DType::q8_0>(checker, rng);
        test_embedding<DType::f16>(checker, rng);
        test_embedding<DType::f32>(checker, rng);
        // Decode (warp per row: 1 and 5 tokens) and prefill (tiled GEMM: 77 tokens, ragged
        // tiles on both axes), for each legacy block format at SmolLM2's attention/FFN sizes.
        for (int tokens : {1, 5, 77}) {
            test_linear<DType::q4_0, model.hidden>(checker, rng, model.ffn + 8, tokens);
            test_linear<DType::q4_1, model.hidden>(checker, rng, model.kv_width(), tokens);
            test_linear<DType::q8_0, model.hidden>(checker, rng, model.hidden + 3, tokens);
        }
    });
}
