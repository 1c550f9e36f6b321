// Slicing stored (possibly block-quantized) weight matrices for a rank: column-parallel keeps
// whole rows, row-parallel keeps the same whole blocks of every row. Checked by decoding: a
// shard must decode to exactly the corresponding part of the decoded full matrix.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::model;

namespace {

template <class Block>
std::vector<std::byte> quantize_matrix(std::vector<float> const& values) {
    std::vector<std::byte> bytes(values.size() / Block::elements * sizeof(Block));
    for (std::size_t b = 0; b < values.size() / Block::elements; ++b) {
        Block block;
        quant::quantize_block(values.data() + b * Block::elements, block);
        std::memcpy(bytes.data() + b * sizeof(Block), &block, sizeof(Block));
    }
    return bytes;
}

template <class Block>
std::vector<float> dequantize_matrix(std::span<std::byte const> bytes) {
    std::vector<float> values(bytes.size() / sizeof(Block) * Block::elements);
    testing::poison(std::span<float>(values));
    for (std::size_t b = 0; b < bytes.size() / sizeof(Block); ++b) {
        Block block;
        std::memcpy(&block, bytes.data() + b * sizeof(Block), sizeof(Block));
        quant::dequantize_block(block, values.data() + b * Block::elements);
    }
    return values;
}

std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
    std::vector<std::byte> bytes(n);
    for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
    return bytes;
}

// Every slice of a quantized matrix that falls on block boundaries decodes to the same
// numbers as the decoded full matrix's slice: bitwise, since the blocks are copied unchanged.
template <DType Type, class Block>
void slices_decode_like_the_full_matrix(std::uint64_t seed) {
    auto rng = testing::seeded_rng(seed);
    int const rows = 24, cols = 8 * Block::elements;
    auto const values = testing::random_floats(rng, static_cast<std::size_t>(rows) * cols);
    auto const stored = quantize_matrix<Block>(values);
    auto const decoded = dequantize_matrix<Block>(stored);
    EncodedMatrix const m{Type, rows, cols, stored};

    IndexRange const row_range{5, 11};
    auto const row_shard = dequantize_matrix<Block>(select_rows(m, row_range));
    BOOST_REQUIRE_EQUAL(row_shard.size(), static_cast<std::size_t>(row_range.count) * cols);
    for (int r = 0; r < row_range.count; ++r) {
        for (int c = 0; c < cols; ++c) {
            BOOST_TEST(row_shard[r * cols + c] == decoded[(row_range.first + r) * cols + c]);
        }
    }

    IndexRange const column_range{3 * Block::elements, 4 * Block::elements};
    std::vector<std::byte> column_bytes(encoded_bytes(Type, column_range.count) * rows);
    copy_columns(m, column_range, column_bytes);
    auto const column_shard = dequantize_matrix<Block>(column_bytes);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < column_range.count; ++c) {
            BOOST_TEST(column_shard[r * column_range.count + c] ==
                       decoded[r * cols + column_range.first + c]);
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_slicing)

BOOST_AUTO_TEST_CASE(encodings_match_the_block_structs) {
    static_assert(weight_encoding(DType::f32).block_bytes == 4);
    static_assert(weight_encoding(DType::bf16).block_elements == 1);
    static_assert(weight_encoding(DType::q4_1).block_elements == 32);
    static_assert(weight_encoding(DType::q4_1).block_bytes == 20);
    static_assert(weight_encoding(DType::q8_0).block_bytes == 34);
    static_assert(weight_encoding(DType::q4_k).block_elements == 256);
    static_assert(weight_encoding(DType::q6_k).block_bytes == 210);
    // Consistent with the bits-per-element table the rest of tinfer sizes memory with.
    for (DType const t :
         {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
          DType::q8_0, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k}) {
        WeightEncoding const e = weight_encoding(t);
        BOOST_TEST(e.block_bytes * 8.0 / e.block_elements == bits_per_element(t), name_of(t));
    }
}

BOOST_AUTO_TEST_CASE(q8_0_slices_decode_like_the_full_matrix) {
    slices_decode_like_the_full_matrix<DType::q8_0, quant::BlockQ8_0>(2001);
}

BOOST_AUTO_TEST_CASE(q4_1_slices_decode_like_the_full_matrix) {
    slices_decode_like_the_full_matrix<DType::q4_1, quant::BlockQ4_1>(2002);
}

// SmolLM2's real projection shapes in Q4_1 over 3 ranks: the shards of all ranks put back
// together (rows concatenated, or each row's column pieces concatenated) are the matrix.
BOOST_AUTO_TEST_CASE(smollm2_shards_reassemble_every_projection) {
    using Shard = TensorParallelShard<presets::smollm2_135m, 3>;
    constexpr DType type = presets::smollm2_135m.weights;
    auto rng = testing::seeded_rng(2003);
    for (auto const p : {LlamaProjection::query, LlamaProjection::key, LlamaProjection::value,
                         LlamaProjection::attention_output, LlamaProjection::ffn_gate,
                         LlamaProjection::ffn_up, LlamaProjection::ffn_down}) {
        int const rows = Shard::full_rows(p), cols = Shard::full_cols(p);
        std::size_t const row_bytes = encoded_bytes(type, cols);
        auto const stored = random_bytes(rng, row_bytes * rows);
        EncodedMatrix const full{type, rows, cols, stored};
        std::vector<std::byte> reassembled;
        std::vector<std::vector<std::byte>> shards;
        for (int rank = 0; rank < Shard::degree; ++rank) {
            shards.push_back(shard_weight<Shard>(p, full, rank));
        }
        if (split_of(p) == Split::column_parallel) {
            for (auto const& s : shards) reassembled.insert(reassembled.end(), s.begin(), s.end());
        } else {
            for (int row = 0; row < rows; ++row) {
                for (auto const& s : shards) {
                    std::size_t const piece = s.size() / rows;
                    auto const start = s.begin() + static_cast<std::ptrdiff_t>(row * piece);
                    reassembled.insert(reassembled.end(), start,
                                       start + static_cast<std::ptrdiff_t>(piece));
                }
            }
        }
        BOOST_TEST((reassembled == stored), "projection " << static_cast<int>(p));
    }
}

BOOST_AUTO_TEST_CASE(cuts_inside_a_block_and_bad_sizes_are_refused) {
    auto rng = testing::seeded_rng(2004);
    int const rows = 4, cols = 128;
    auto const stored = random_bytes(rng, encoded_bytes(DType::q8_0, cols) * rows);
    EncodedMatrix const m{DType::q8_0, rows, cols, stored};
    std::vector<std::byte> out(encoded_bytes(DType::q8_0, 32) * rows);
    BOOST_CHECK_NO_THROW(copy_columns(m, {32, 32}, out));
    BOOST_CHECK_THROW(copy_columns(m, {16, 32}, out), std::invalid_argument);  // starts mid-block
    BOOST_CHECK_THROW(copy_columns(m, {64, 96}, out), std::out_of_range);      // past the row
    std::vector<std::byte> short_out(out.size() - 1);
    BOOST_CHECK_THROW(copy_columns(m, {32, 32}, short_out), std::length_error);
    BOOST_CHECK_THROW(select_rows(m, {3, 2}), std::out_of_range);
    EncodedMatrix const truncated{DType::q8_0, rows, cols,
                                  std::span<std::byte const>(stored).first(stored.size() - 1)};
    BOOST_CHECK_THROW(select_rows(truncated, {0, 1}), std::invalid_argument);
    using Shard = TensorParallelShard<presets::smollm2_135m, 3>;
    BOOST_CHECK_THROW(shard_weight<Shard>(LlamaProjection::ffn_down, m, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
