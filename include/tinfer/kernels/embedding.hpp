#pragma once
// Token embedding: gathers rows of the embedding table (any weight encoding, decoded exactly:
// every GGUF encoding's values are representable in float) into float activations.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

namespace tinfer::kernels {

// out: [tokens][table.cols]. A token id outside the table raises tinfer::RequestError.
template <DType T>
void embedding(WeightMatrix const& table, std::span<std::int32_t const> tokens, float* out) {
    check_weight_matrix<T>(table, "embedding table");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= table.rows) {
            throw RequestError("token id " + std::to_string(tokens[i]) + " at index " +
                               std::to_string(i) + " is outside the vocabulary [0, " +
                               std::to_string(table.rows) + ")");
        }
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        dequantize_row<T>(row_pointer<T>(table, tokens[i]), table.cols, out + i * table.cols);
    }
}

inline void embedding_any(WeightMatrix const& table, std::span<std::int32_t const> tokens,
                          float* out) {
    dispatch_weight_type(table.type, [&]<DType T>() { embedding<T>(table, tokens, out); });
}

}  // namespace tinfer::kernels
