// Tensor parallelism simulated without the model: SmolLM2-135M's FFN and attention output
// projection, computed whole in float64 and sharded over 3 MPI ranks the Megatron way
// (column-parallel gate/up, row-parallel down and output, one all-reduce each), using
// TensorParallelShard's ranges and shard_weight's slices.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "mpi_testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;
using namespace tinfer::model;

namespace {

constexpr ModelConfig shape = presets::smollm2_135m;
using Shard = TensorParallelShard<shape, 3>;
constexpr double eps = std::numeric_limits<float>::epsilon();

std::vector<float> uniform(std::mt19937_64& rng, std::size_t n, double scale) {
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(dist(rng) * scale);
    return v;
}

std::vector<float> as_floats(std::span<std::byte const> bytes) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

EncodedMatrix f32_matrix(std::vector<float> const& values, int rows, int cols) {
    return {DType::f32, rows, cols, std::as_bytes(std::span(values))};
}

// float32 y = W x, W: [rows, cols] row-major.
std::vector<float> matvec(std::vector<float> const& w, std::span<float const> x, int rows) {
    std::size_t const cols = x.size();
    std::vector<float> y(rows);
    for (int r = 0; r < rows; ++r) {
        float sum = 0;
        for (std::size_t c = 0; c < cols; ++c) sum += w[r * cols + c] * x[c];
        y[r] = sum;
    }
    return y;
}

float silu(float g) {
    return g / (1.f + std::exp(-g));
}

// silu's slope lies in [-0.1, 1.1], so an error e in g moves silu(g) by at most 1.1 e.
constexpr double silu_max_slope = 1.1;
// exp, one addition, one division: each rounds once; std::exp is within 1 ulp.
constexpr double silu_rounding = 4 * eps;

double silu64(double g) {
    return g / (1 + std::exp(-g));
}

template <class Block>
std::vector<float> dequantize(std::span<std::byte const> bytes) {
    std::vector<float> v(bytes.size() / sizeof(Block) * Block::elements);
    for (std::size_t b = 0; b < bytes.size() / sizeof(Block); ++b) {
        Block block;
        std::memcpy(&block, bytes.data() + b * sizeof(Block), sizeof(Block));
        quant::dequantize_block(block, v.data() + b * Block::elements);
    }
    return v;
}

// y = down · (silu(gate · x) ⊙ (up · x)).
void sharded_ffn_matches(MpiCommunicator& comm, testing::mpi::Checks& checks, std::uint64_t seed) {
    constexpr int hidden = shape.hidden, ffn = shape.ffn;
    std::mt19937_64 rng(seed);  // the same weights and input on every rank
    auto const x = uniform(rng, hidden, 1);
    auto const gate = uniform(rng, std::size_t{ffn} * hidden, 1 / std::sqrt(double{hidden}));
    auto const up = uniform(rng, std::size_t{ffn} * hidden, 1 / std::sqrt(double{hidden}));
    auto const down = uniform(rng, std::size_t{hidden} * ffn, 1 / std::sqrt(double{ffn}));

    // This rank's part: its ffn rows of gate and up, the same ffn columns of down.
    int const rank = comm.rank();
    auto const gate_shard = as_floats(
        shard_weight<Shard>(LlamaProjection::ffn_gate, f32_matrix(gate, ffn, hidden), rank));
    auto const up_shard =
        as_floats(shard_weight<Shard>(LlamaProjection::ffn_up, f32_matrix(up, ffn, hidden), rank));
    auto const down_shard = as_floats(
        shard_weight<Shard>(LlamaProjection::ffn_down, f32_matrix(down, hidden, ffn), rank));
    auto const g = matvec(gate_shard, x, Shard::ffn);
    auto const u = matvec(up_shard, x, Shard::ffn);
    std::vector<float> h(Shard::ffn);
    for (int j = 0; j < Shard::ffn; ++j) h[j] = silu(g[j]) * u[j];
    std::vector<float> y = matvec(down_shard, h, hidden);
    comm.all_reduce_sum(y);

    // float64 reference of the whole FFN, with a worst-case float32 error bound per output,
    // and each rank's contribution (to show the bound would catch a shard gone missing).
    std::vector<double> h64(ffn), h_error(ffn);
    for (int j = 0; j < ffn; ++j) {
        double g64 = 0, u64 = 0, g_magnitude = 0, u_magnitude = 0;
        for (int k = 0; k < hidden; ++k) {
            g64 += double{gate[j * hidden + k]} * x[k];
            u64 += double{up[j * hidden + k]} * x[k];
            g_magnitude += std::abs(double{gate[j * hidden + k]} * x[k]);
            u_magnitude += std::abs(double{up[j * hidden + k]} * x[k]);
        }
        double const g_error = hidden * eps * g_magnitude, u_error = hidden * eps * u_magnitude;
        double const s = silu64(g64);
        double const s_error = silu_max_slope * g_error + silu_rounding * (std::abs(s) + g_error);
        h64[j] = s * u64;
        h_error[j] = std::abs(u64) * s_error + std::abs(s) * u_error + s_error * u_error +
                     eps * (std::abs(h64[j]) + s_error * std::abs(u64));
    }
    double worst = 0;
    std::vector<double> loss_if_missing(Shard::degree, 0.0);  // per rank: max |part| / bound
    for (int i = 0; i < hidden; ++i) {
        double y64 = 0, bound = 0;
        std::vector<double> contribution(Shard::degree, 0.0);
        for (int j = 0; j < ffn; ++j) {
            double const w = down[i * ffn + j];
            y64 += w * h64[j];
            contribution[j / Shard::ffn] += w * h64[j];
            // Partial sums of ffn/Tp terms, then Tp-1 additions in the all-reduce.
            bound +=
                (Shard::ffn + Shard::degree) * eps * std::abs(w) * (std::abs(h64[j]) + h_error[j]) +
                std::abs(w) * h_error[j];
        }
        worst = std::max(worst, std::abs(y[i] - y64) / bound);
        for (int r = 0; r < Shard::degree; ++r) {
            loss_if_missing[r] = std::max(loss_if_missing[r], std::abs(contribution[r]) / bound);
        }
    }
    checks.expect(worst <= 1,
                  "sharded FFN vs float64 reference: scaled error " + std::to_string(worst));
    // The bound is tight enough to matter: dropping any one rank's partial sum (an all-reduce
    // that missed a rank) would push some output past it.
    for (int r = 0; r < Shard::degree; ++r) {
        checks.expect(loss_if_missing[r] > 1,
                      "the bound would not notice rank " + std::to_string(r) + "'s part missing");
    }
}

// y = Wo · o, Wo in Q8_0: each rank holds its heads' outputs o[q_features_of(rank)] and the
// matching whole blocks of every row of Wo.
void sharded_attention_output_matches(MpiCommunicator& comm, testing::mpi::Checks& checks,
                                      std::uint64_t seed) {
    constexpr int hidden = shape.hidden, q_width = shape.q_width();
    using Block = quant::BlockQ8_0;
    std::mt19937_64 rng(seed + 1);
    auto const o = uniform(rng, q_width, 1);
    auto const values = uniform(rng, std::size_t{hidden} * q_width, 1 / std::sqrt(double{q_width}));
    std::vector<std::byte> stored(values.size() / Block::elements * sizeof(Block));
    for (std::size_t b = 0; b < values.size() / Block::elements; ++b) {
        Block block;
        quant::quantize_block(values.data() + b * Block::elements, block);
        std::memcpy(stored.data() + b * sizeof(Block), &block, sizeof(Block));
    }
    EncodedMatrix const wo{DType::q8_0, hidden, q_width, stored};

    int const rank = comm.rank();
    auto const shard =
        dequantize<Block>(shard_weight<Shard>(LlamaProjection::attention_output, wo, rank));
    IndexRange const mine = Shard::q_features_of(rank);
    std::vector<float> y = matvec(shard, std::span(o).subspan(mine.first, mine.count), hidden);
    comm.all_reduce_sum(y);

    auto const full = dequantize<Block>(stored);
    double worst = 0;
    for (int i = 0; i < hidden; ++i) {
        double y64 = 0, magnitude = 0;
        for (int j = 0; j < q_width; ++j) {
            y64 += double{full[i * q_width + j]} * o[j];
            magnitude += std::abs(double{full[i * q_width + j]} * o[j]);
        }
        double const bound = (Shard::q_width + Shard::degree) * eps * magnitude;
        worst = std::max(worst, std::abs(y[i] - y64) / bound);
    }
    checks.expect(worst <= 1, "sharded Q8_0 attention output vs float64 reference: scaled error " +
                                  std::to_string(worst));
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "distributed_mpi_tensor_parallel_test", [](auto& checks) {
        std::uint64_t const seed = testing::mpi::shared_seed();
        MpiCommunicator comm;
        if (!checks.expect(comm.size() == Shard::degree, "needs exactly Tp = 3 ranks")) return;
        sharded_ffn_matches(comm, checks, seed);
        sharded_attention_output_matches(comm, checks, seed);
    });
}
