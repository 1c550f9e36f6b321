#pragma once
// Back-of-envelope figures for scaling a model out, from its ModelConfig alone: how many bytes
// a prefill->decode hand-off ships and how long a link takes, how much a tensor-parallel step
// all-reduces, and what a pipeline-parallel step sends across each stage boundary and how much
// of it a stage idles (the bubble). docs/scale-out.md's tables are this header's output (tests/dist
// checks).
//
// Transfer times count bandwidth only (bytes / bytes-per-second): no latency, no protocol
// overhead, no overlap with compute. They are lower bounds.
#include <string_view>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/dtype.hpp>

namespace tinfer::distributed {

inline constexpr double bits_per_byte = 8;

// A point-to-point link, by its bandwidth in one direction.
struct Link {
    std::string_view name;
    double bytes_per_second = 0;
};

// 100 Gb/s Ethernet (or a 100G RoCE NIC): 100e9 bits per second each way.
inline constexpr Link ethernet_100g{"100 Gb/s Ethernet", 100e9 / bits_per_byte};
// NVLink 4 on H100 SXM: 18 links x 50 GB/s = 900 GB/s bidirectional, 450 GB/s each way.
inline constexpr double nvlink4_links = 18;
inline constexpr double nvlink4_bytes_per_link_bidirectional = 50e9;
inline constexpr Link nvlink_h100{"NVLink 4 (H100 SXM)",
                                  nvlink4_links* nvlink4_bytes_per_link_bidirectional / 2};

// The KV dtype is the cache's choice, not the shape's: published figures quote fp16.
inline constexpr DType quoted_kv = DType::f16;

constexpr double kv_bytes_per_request(ModelConfig const& c, int context_tokens,
                                      DType kv = quoted_kv) {
    return c.kv_bytes(context_tokens, kv);
}

constexpr double kv_bytes_per_batch(ModelConfig const& c, int context_tokens, int batch,
                                    DType kv = quoted_kv) {
    return kv_bytes_per_request(c, context_tokens, kv) * batch;
}

constexpr double transfer_seconds(double bytes, Link const& link) {
    return bytes / link.bytes_per_second;
}

// Megatron TP all-reduces the block's output twice per layer (after attention's output
// projection and after the FFN down projection), `hidden` activations each time.
inline constexpr int tp_all_reduces_per_layer = 2;

constexpr double tp_all_reduce_bytes_per_token(ModelConfig const& c, DType activations) {
    return static_cast<double>(tp_all_reduces_per_layer) * c.layers * c.hidden *
           (bits_per_element(activations) / bits_per_byte);
}

// A ring all-reduce of n bytes over p ranks is a reduce-scatter then an all-gather, each
// moving (p-1)/p of the data through every rank: 2(p-1)/p * n bytes sent per rank.
constexpr double ring_all_reduce_fraction(int ranks) {
    return 2.0 * (ranks - 1) / ranks;
}

constexpr double ring_all_reduce_bytes_per_rank(double bytes, int ranks) {
    return bytes * ring_all_reduce_fraction(ranks);
}

// One decode step of `batch` sequences (one token each): bytes each rank sends for TP, and the
// bandwidth-only time that takes on `link`.
constexpr double tp_bytes_per_rank_per_step(ModelConfig const& c, DType activations, int ranks,
                                            int batch) {
    return ring_all_reduce_bytes_per_rank(tp_all_reduce_bytes_per_token(c, activations) * batch,
                                          ranks);
}

constexpr double tp_seconds_per_step(ModelConfig const& c, DType activations, int ranks, int batch,
                                     Link const& link) {
    return transfer_seconds(tp_bytes_per_rank_per_step(c, activations, ranks, batch), link);
}

// Pipeline parallelism (model/pipeline_parallel.hpp): a token's residual stream, `hidden`
// activations, crosses each stage boundary once per forward pass, forward only (inference has
// no backward pass). S stages have S - 1 boundaries, each its own link.
constexpr double pp_bytes_per_boundary_per_token(ModelConfig const& c, DType activations) {
    return static_cast<double>(c.hidden) * (bits_per_element(activations) / bits_per_byte);
}

// One decode step of `batch` sequences: bytes over each boundary, and their bandwidth-only time.
constexpr double pp_bytes_per_boundary_per_step(ModelConfig const& c, DType activations,
                                                int batch) {
    return pp_bytes_per_boundary_per_token(c, activations) * batch;
}

constexpr double pp_seconds_per_boundary_per_step(ModelConfig const& c, DType activations,
                                                  int batch, Link const& link) {
    return transfer_seconds(pp_bytes_per_boundary_per_step(c, activations, batch), link);
}

// The bubble (GPipe's): a step of M micro-batches through S stages of equal time t takes
// (M + S - 1) t, in which each stage works M t, so it idles (S - 1) / (M + S - 1) of the step.
constexpr double pipeline_bubble_fraction(int stages, int micro_batches) {
    return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

// The weights of one decoder layer's matrices (Q, K, V, output; gate, up, down), in elements;
// the norms' vectors (2 x hidden) are left out.
constexpr double layer_matrix_elements(ModelConfig const& c) {
    double const h = c.hidden;
    return h * (c.q_width() + 2.0 * c.kv_width()) + static_cast<double>(c.q_width()) * h +
           3.0 * h * c.ffn;
}

// A stage's decoder-layer weights in the preset's weight dtype (stage 0 also holds the
// embedding, the last stage the LM head: vocab x hidden each).
constexpr double pp_layer_weight_bytes_per_stage(ModelConfig const& c, int stages) {
    return layer_matrix_elements(c) * (static_cast<double>(c.layers) / stages) *
           (bits_per_element(c.weights) / bits_per_byte);
}

}  // namespace tinfer::distributed
