#pragma once
// How Llama<Cfg, Parallel> divides the model between processes: the policy names the shape of
// the attention and FFN this process computes (`local<Cfg>`), cuts the bound weights down to
// it, and completes the row-parallel projections with an all-reduce.
//
// NoParallel (the default) holds the whole model: its local shape is Cfg, it cuts nothing and
// its all-reduce is an empty constexpr function, so Llama<Cfg> compiles to the single-process
// forward pass with no trace of the hooks.
//
// TensorParallel<Tp, Comm> is Megatron's split as distributed/tensor_parallel.hpp derives it: rank
// r owns KV heads [r * kv_heads / Tp, ...) (replicated when kv_heads < Tp:
// tensor_parallel_shard.hpp) with the query heads that read them, and ffn features [r
// * ffn / Tp, ...). Q, K, V, gate and up are column-parallel: whole consecutive rows of the file's
// matrices, viewed in place. The attention output and FFN down projections are row-parallel: a
// column range of every row, copied once at bind time into dense matrices of whole quantization
// blocks (the cut falls between blocks, which TensorParallelShard checks at compile time).
// Embedding, norms and LM head stay whole on every rank, so every rank holds the same residual
// stream and the same logits.
#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/communicator.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::model {

// Weight bytes a policy copied while cutting the weights (row-parallel shards); the model keeps
// them alive and shares them between its copies.
using ShardStorage = std::shared_ptr<std::vector<std::vector<std::byte>> const>;

// A parallel policy: its degree, this process's rank, the local shape of a model, the weight
// cut (shard) and the sum over ranks of a row-parallel projection's partial outputs.
template <class P>
concept ParallelPolicy = requires(P const& policy, std::span<float> partial_sums) {
    { P::degree } -> std::convertible_to<int>;
    { policy.rank() } -> std::convertible_to<int>;
    policy.all_reduce_sum(partial_sums);
};

// The whole model in this process.
struct NoParallel {
    static constexpr int degree = 1;
    template <ModelConfig Cfg>
    static constexpr ModelConfig local = Cfg;

    static constexpr int rank() { return 0; }
    static constexpr void all_reduce_sum(std::span<float>) {}
    template <ModelConfig Cfg>
    static ShardStorage shard(ModelWeights<Cfg>&) {
        return {};
    }
};

// Whether TensorParallelShard<Cfg, Tp> exists, for code choosing a degree at run time (it
// static_asserts the same conditions, naming the one that fails).
template <ModelConfig Cfg, int Tp>
constexpr bool tensor_parallel_fits() {
    if (Tp <= 0 || Cfg.heads % Tp != 0 || Cfg.ffn % Tp != 0) return false;
    if (Cfg.kv_heads % Tp != 0 && Tp % Cfg.kv_heads != 0) return false;
    int const block = model::weight_encoding(Cfg.weights).block_elements;
    return block > 0 && (Cfg.q_width() / Tp) % block == 0 && (Cfg.ffn / Tp) % block == 0;
}

// Megatron tensor parallelism over `Tp` processes of the communicator `Comm` (MpiCommunicator
// for host memory). The communicator must outlive the model.
template <int Tp, Communicator Comm>
class TensorParallel {
  public:
    static constexpr int degree = Tp;
    template <ModelConfig Cfg>
    using Shard = model::TensorParallelShard<Cfg, Tp>;
    template <ModelConfig Cfg>
    static constexpr ModelConfig local = Shard<Cfg>::local;

    explicit TensorParallel(Comm& comm) : comm_(&comm) {
        if (comm.size() != Tp) {
            throw Error("TensorParallel<" + std::to_string(Tp) + ">: the communicator has " +
                        std::to_string(comm.size()) + " ranks");
        }
    }

    int rank() const { return comm_->rank(); }
    void all_reduce_sum(std::span<float> partial_sums) const {
        comm_->all_reduce_sum(partial_sums);
    }

    // Replaces every layer matrix of `weights` (the whole model, viewing the file) by this
    // rank's shard; returns the copied row-parallel shards the matrices now point into.
    template <ModelConfig Cfg>
    ShardStorage shard(ModelWeights<Cfg>& weights) const {
        using Projection = model::LlamaProjection;
        auto storage = std::make_shared<std::vector<std::vector<std::byte>>>();
        // Two row-parallel matrices per layer; reserved so the shards never move.
        storage->reserve(2 * static_cast<std::size_t>(Cfg.layers));
        int const me = rank();
        auto const cut = [&](kernels::WeightMatrix& matrix, Projection projection) {
            model::EncodedMatrix const full{
                matrix.type, matrix.rows, matrix.cols,
                std::span(matrix.data, model::encoded_bytes(matrix.type, matrix.cols) *
                                           static_cast<std::size_t>(matrix.rows))};
            model::IndexRange const slice = Shard<Cfg>::slice_of(projection, me);
            if (model::split_of(projection) == model::Split::column_parallel) {
                matrix = {matrix.type, slice.count, matrix.cols,
                          model::select_rows(full, slice).data()};
            } else {
                storage->push_back(model::shard_weight<Shard<Cfg>>(projection, full, me));
                matrix = {matrix.type, matrix.rows, slice.count, storage->back().data()};
            }
        };
        // A column-parallel projection's bias is cut like its rows.
        auto const cut_bias = [&](std::span<float const>& bias, Projection projection) {
            if (bias.empty()) return;
            model::IndexRange const slice = Shard<Cfg>::slice_of(projection, me);
            bias = bias.subspan(static_cast<std::size_t>(slice.first),
                                static_cast<std::size_t>(slice.count));
        };
        for (LayerWeights& layer : weights.layers) {
            cut_bias(layer.q_bias, Projection::query);
            cut_bias(layer.k_bias, Projection::key);
            cut_bias(layer.v_bias, Projection::value);
            cut(layer.q, Projection::query);
            cut(layer.k, Projection::key);
            cut(layer.v, Projection::value);
            cut(layer.output, Projection::attention_output);
            cut(layer.gate, Projection::ffn_gate);
            cut(layer.up, Projection::ffn_up);
            cut(layer.down, Projection::ffn_down);
        }
        return storage;
    }

  private:
    Comm* comm_;
};

// A pipeline stage (model/pipeline_parallel.hpp): whole layers, a contiguous range of them.
template <class P>
inline constexpr bool is_pipeline_parallel = requires {
    P::pipeline_stages;
};

// Whether a policy's row-parallel projections leave partial sums that all_reduce_sum completes
// (tensor parallelism); NoParallel and a pipeline stage compute whole layers.
template <class P>
inline constexpr bool sums_partial_products =
    !std::same_as<P, NoParallel> && !is_pipeline_parallel<P>;

static_assert(ParallelPolicy<NoParallel>);
static_assert(ParallelPolicy<TensorParallel<1, SingleProcess>>);

}  // namespace tinfer::model
