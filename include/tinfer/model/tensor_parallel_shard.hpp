#pragma once
// Megatron-style tensor parallelism for a Llama-family layer, derived at compile time from the
// model's shape.
//
// Attention splits by KV-head groups: rank r owns KV heads [r*kv_heads/Tp, ...) and exactly
// the query heads that read them, so attention runs locally with no communication. A model
// with fewer KV heads than ranks (Gemma 3 270M has one) replicates them instead: each KV head
// lives on Tp / kv_heads consecutive ranks, which split its query heads between them, and
// every one of those ranks computes (and caches) that KV head in full. Q, K and V
// are column-parallel (each rank computes its heads' output rows of the projection from the
// full, replicated input); the output projection is row-parallel (each rank multiplies its
// heads' slice of the input columns and the partial sums are added by one all-reduce). The FFN
// is the same pattern: gate and up column-parallel (rank r owns ffn rows [r*ffn/Tp, ...)),
// down row-parallel over the same ffn slice, one all-reduce. Two all-reduces per layer, each
// of `hidden` activations per token; norms, embedding and LM head stay replicated.
//
// A rank's attention and FFN are those of a smaller model, `TensorParallelShard::local`: its
// KV cache, kernels and weights are instantiated for that shape.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/config/validate.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace tinfer::model {

// The half-open range [first, first + count).
struct IndexRange {
    int first = 0;
    int count = 0;
    constexpr int end() const { return first + count; }
    friend constexpr bool operator==(IndexRange, IndexRange) = default;
};

// How a weight type is stored along a row: runs of `block_elements` consecutive elements
// encoded together in `block_bytes` bytes. A row can only be cut between blocks.
struct WeightEncoding {
    int block_elements = 0;
    std::size_t block_bytes = 0;
};

constexpr WeightEncoding weight_encoding(DType t) {
    switch (t) {
        case DType::f32:
            return {1, sizeof(float)};
        case DType::f16:
        case DType::bf16:
            return {1, sizeof(std::uint16_t)};
        case DType::q4_0:
            return {quant::BlockQ4_0::elements, sizeof(quant::BlockQ4_0)};
        case DType::q4_1:
            return {quant::BlockQ4_1::elements, sizeof(quant::BlockQ4_1)};
        case DType::q5_0:
            return {quant::BlockQ5_0::elements, sizeof(quant::BlockQ5_0)};
        case DType::q5_1:
            return {quant::BlockQ5_1::elements, sizeof(quant::BlockQ5_1)};
        case DType::q8_0:
            return {quant::BlockQ8_0::elements, sizeof(quant::BlockQ8_0)};
        case DType::q2_k:
            return {quant::BlockQ2_K::elements, sizeof(quant::BlockQ2_K)};
        case DType::q3_k:
            return {quant::BlockQ3_K::elements, sizeof(quant::BlockQ3_K)};
        case DType::q4_k:
            return {quant::BlockQ4_K::elements, sizeof(quant::BlockQ4_K)};
        case DType::q5_k:
            return {quant::BlockQ5_K::elements, sizeof(quant::BlockQ5_K)};
        case DType::q6_k:
            return {quant::BlockQ6_K::elements, sizeof(quant::BlockQ6_K)};
        case DType::fp8_e4m3:
        case DType::fp8_e5m2:
        case DType::int8:
        case DType::int4:
            break;
    }
    return {};  // not a weight type (ModelShape refuses it)
}

// Each check is a function template over the values it tests, so the compiler's
// "In instantiation of ... [with int tp = 2; int heads = 9]" line names them next to the
// message naming the parameter.
namespace shard_check {

template <int tp>
consteval void degree_positive() {
    static_assert(tp > 0, "TensorParallelShard: Tp (the tensor-parallel degree) must be positive");
}
template <int tp, int heads>
consteval void divides_heads() {
    static_assert(tp <= 0 || heads % tp == 0,
                  "TensorParallelShard: Tp must divide ModelConfig.heads (a rank owns whole "
                  "query heads)");
}
template <int tp, int kv_heads>
consteval void divides_kv_heads() {
    static_assert(tp <= 0 || kv_heads % tp == 0 || tp % kv_heads == 0,
                  "TensorParallelShard: Tp must divide ModelConfig.kv_heads (a rank owns whole "
                  "KV heads and the query heads that share them) or be a multiple of it (each "
                  "KV head replicated on Tp / kv_heads ranks)");
}
template <int tp, int ffn>
consteval void divides_ffn() {
    static_assert(tp <= 0 || ffn % tp == 0, "TensorParallelShard: Tp must divide ModelConfig.ffn");
}
template <int tp, int attention_output_columns_per_rank, int weight_block_elements>
consteval void attention_output_split_on_blocks() {
    static_assert(attention_output_columns_per_rank % weight_block_elements == 0,
                  "TensorParallelShard: a rank's input columns of the attention output "
                  "projection (ModelConfig.q_width() / Tp) must be whole blocks of "
                  "ModelConfig.weights");
}
template <int tp, int ffn_down_columns_per_rank, int weight_block_elements>
consteval void ffn_down_split_on_blocks() {
    static_assert(ffn_down_columns_per_rank % weight_block_elements == 0,
                  "TensorParallelShard: a rank's input columns of the FFN down projection "
                  "(ModelConfig.ffn / Tp) must be whole blocks of ModelConfig.weights");
}

template <ModelConfig Cfg, int Tp>
consteval bool check() {
    degree_positive<Tp>();
    divides_heads<Tp, Cfg.heads>();
    divides_kv_heads<Tp, Cfg.kv_heads>();
    divides_ffn<Tp, Cfg.ffn>();
    if constexpr (Tp > 0 && Cfg.heads % Tp == 0 && Cfg.ffn % Tp == 0) {
        constexpr int block = weight_encoding(Cfg.weights).block_elements;
        attention_output_split_on_blocks<Tp, Cfg.q_width() / Tp, block>();
        ffn_down_split_on_blocks<Tp, Cfg.ffn / Tp, block>();
    }
    return true;
}

}  // namespace shard_check

// How a projection is split across ranks: column-parallel keeps a rank's output rows (its
// output is a slice of the full output), row-parallel keeps a rank's input columns (its output
// is a partial sum of the full output, completed by an all-reduce).
enum class Split { column_parallel, row_parallel };

// The projections of a Llama layer, by role. A matrix has `rows` output features, each a
// contiguous run of `cols` input features (GGUF's layout).
enum class LlamaProjection { query, key, value, attention_output, ffn_gate, ffn_up, ffn_down };

constexpr Split split_of(LlamaProjection p) {
    return p == LlamaProjection::attention_output || p == LlamaProjection::ffn_down
               ? Split::row_parallel
               : Split::column_parallel;
}

template <ModelConfig Cfg, int Tp>
requires ModelShape<Cfg>
struct TensorParallelShard {
    static_assert(shard_check::check<Cfg, Tp>());

    static constexpr ModelConfig model = Cfg;
    static constexpr int degree = Tp;

    // Ranks holding a copy of each KV head: 1 when Tp divides kv_heads, else Tp / kv_heads.
    static constexpr int kv_replicas = Cfg.kv_heads >= Tp ? 1 : Tp / Cfg.kv_heads;
    static constexpr int heads = Cfg.heads / Tp;
    static constexpr int kv_heads = Cfg.kv_heads >= Tp ? Cfg.kv_heads / Tp : 1;
    // A split never puts one query head's KV on another rank: a rank's query heads are a whole
    // GQA group, or (replicated) a 1/kv_replicas share of one.
    static constexpr int group_size = heads / kv_heads;
    static constexpr int head_dim = Cfg.head_dim;
    static constexpr int ffn = Cfg.ffn / Tp;
    static constexpr int q_width = heads * head_dim;
    static constexpr int kv_width = kv_heads * head_dim;
    static constexpr int hidden = Cfg.hidden;        // activations between blocks stay replicated
    static constexpr int all_reduces_per_layer = 2;  // after attention output, after FFN down

    // The model one rank runs: its heads, KV heads and FFN slice, the full hidden size.
    static constexpr ModelConfig local = [] {
        ModelConfig c = Cfg;
        c.heads = heads;
        c.kv_heads = kv_heads;
        c.ffn = ffn;
        return c;
    }();

    static constexpr IndexRange heads_of(int rank) { return {checked(rank) * heads, heads}; }
    static constexpr IndexRange kv_heads_of(int rank) {
        return {checked(rank) / kv_replicas * kv_heads, kv_heads};
    }
    static constexpr IndexRange q_features_of(int rank) {
        return {checked(rank) * q_width, q_width};
    }
    static constexpr IndexRange kv_features_of(int rank) {
        return {checked(rank) / kv_replicas * kv_width, kv_width};
    }
    static constexpr IndexRange ffn_features_of(int rank) { return {checked(rank) * ffn, ffn}; }

    // Shape of the full matrix of projection p: rows (outputs) and cols (inputs).
    static constexpr int full_rows(LlamaProjection p) {
        switch (p) {
            case LlamaProjection::query:
                return Cfg.q_width();
            case LlamaProjection::key:
            case LlamaProjection::value:
                return Cfg.kv_width();
            case LlamaProjection::ffn_gate:
            case LlamaProjection::ffn_up:
                return Cfg.ffn;
            case LlamaProjection::attention_output:
            case LlamaProjection::ffn_down:
                break;
        }
        return Cfg.hidden;
    }
    static constexpr int full_cols(LlamaProjection p) {
        switch (p) {
            case LlamaProjection::attention_output:
                return Cfg.q_width();
            case LlamaProjection::ffn_down:
                return Cfg.ffn;
            default:
                break;
        }
        return Cfg.hidden;
    }

    // The rows (column-parallel) or columns (row-parallel) of projection p that rank owns.
    static constexpr IndexRange slice_of(LlamaProjection p, int rank) {
        switch (p) {
            case LlamaProjection::query:
            case LlamaProjection::attention_output:
                return q_features_of(rank);
            case LlamaProjection::key:
            case LlamaProjection::value:
                return kv_features_of(rank);
            case LlamaProjection::ffn_gate:
            case LlamaProjection::ffn_up:
            case LlamaProjection::ffn_down:
                break;
        }
        return ffn_features_of(rank);
    }

  private:
    static constexpr int checked(int rank) {
        if (rank < 0 || rank >= Tp) {
            throw std::out_of_range("TensorParallelShard: rank " + std::to_string(rank) +
                                    " outside [0, " + std::to_string(Tp) + ")");
        }
        return rank;
    }
};

// A weight matrix as stored (GGUF): `rows` output features, each a contiguous run of `cols`
// input features encoded as `type`.
struct EncodedMatrix {
    DType type = DType::f32;
    int rows = 0;
    int cols = 0;
    std::span<std::byte const> bytes;
};

// Bytes of `cols` consecutive elements of a row, which must be whole blocks.
inline std::size_t encoded_bytes(DType type, int cols) {
    WeightEncoding const encoding = weight_encoding(type);
    if (encoding.block_elements == 0) {
        throw std::invalid_argument("weight type " + std::string(name_of(type)) +
                                    " has no row encoding");
    }
    if (cols % encoding.block_elements != 0) {
        throw std::invalid_argument(std::to_string(cols) + " columns of " +
                                    std::string(name_of(type)) + " are not whole blocks of " +
                                    std::to_string(encoding.block_elements));
    }
    return static_cast<std::size_t>(cols / encoding.block_elements) * encoding.block_bytes;
}

namespace slice_detail {

inline std::size_t checked_row_bytes(EncodedMatrix const& m) {
    std::size_t const row_bytes = encoded_bytes(m.type, m.cols);
    if (m.rows < 0 || m.bytes.size() != row_bytes * static_cast<std::size_t>(m.rows)) {
        throw std::invalid_argument("matrix of " + std::to_string(m.rows) + " x " +
                                    std::to_string(m.cols) + " " + std::string(name_of(m.type)) +
                                    " must be " + std::to_string(row_bytes * m.rows) +
                                    " bytes, got " + std::to_string(m.bytes.size()));
    }
    return row_bytes;
}

inline void check_range(IndexRange range, int extent, char const* what) {
    if (range.first < 0 || range.count < 0 || range.end() > extent) {
        throw std::out_of_range(std::string(what) + " [" + std::to_string(range.first) + ", " +
                                std::to_string(range.end()) + ") outside [0, " +
                                std::to_string(extent) + ")");
    }
}

}  // namespace slice_detail

// Column-parallel shard: whole consecutive rows, so the shard is a view of the matrix (of its
// file mapping), no copy.
inline std::span<std::byte const> select_rows(EncodedMatrix const& m, IndexRange rows) {
    std::size_t const row_bytes = slice_detail::checked_row_bytes(m);
    slice_detail::check_range(rows, m.rows, "rows");
    return m.bytes.subspan(static_cast<std::size_t>(rows.first) * row_bytes,
                           static_cast<std::size_t>(rows.count) * row_bytes);
}

// Row-parallel shard: the same byte range of every row, gathered into a dense
// [m.rows, cols.count] matrix of the same encoding. The cut must fall between blocks, or a
// block's scale would be split between ranks.
inline void copy_columns(EncodedMatrix const& m, IndexRange cols, std::span<std::byte> out) {
    std::size_t const row_bytes = slice_detail::checked_row_bytes(m);
    slice_detail::check_range(cols, m.cols, "columns");
    std::size_t const skip = encoded_bytes(m.type, cols.first);
    std::size_t const keep = encoded_bytes(m.type, cols.count);
    if (out.size() != keep * static_cast<std::size_t>(m.rows)) {
        throw std::length_error("copy_columns: destination holds " + std::to_string(out.size()) +
                                " bytes, the shard is " +
                                std::to_string(keep * static_cast<std::size_t>(m.rows)));
    }
    for (int row = 0; row < m.rows; ++row) {
        auto const source = m.bytes.subspan(static_cast<std::size_t>(row) * row_bytes + skip, keep);
        std::copy(source.begin(), source.end(),
                  out.begin() + static_cast<std::ptrdiff_t>(row * keep));
    }
}

// Rank's shard of projection p, as the rank stores it: [rows, cols] of the local shape.
template <class Shard>
std::vector<std::byte> shard_weight(LlamaProjection p, EncodedMatrix const& full, int rank) {
    if (full.rows != Shard::full_rows(p) || full.cols != Shard::full_cols(p)) {
        throw std::invalid_argument("shard_weight: matrix is " + std::to_string(full.rows) + " x " +
                                    std::to_string(full.cols) + ", the projection is " +
                                    std::to_string(Shard::full_rows(p)) + " x " +
                                    std::to_string(Shard::full_cols(p)));
    }
    IndexRange const slice = Shard::slice_of(p, rank);
    if (split_of(p) == Split::column_parallel) {
        auto const rows = select_rows(full, slice);
        return {rows.begin(), rows.end()};
    }
    std::vector<std::byte> shard(encoded_bytes(full.type, slice.count) *
                                 static_cast<std::size_t>(full.rows));
    copy_columns(full, slice, shard);
    return shard;
}

}  // namespace tinfer::model
