#pragma once
// Every buffer one forward pass needs, sized once for a maximum number of tokens per step, so
// the decode loop allocates nothing (but for the split-KV states, which grow with the context).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/linear.hpp>

namespace tinfer::model {

// The attention kernel of one kind of layer of Cfg (its window and query scale).
template <ModelConfig Cfg, LayerKind Kind = Cfg.layer_kind(0)>
using AttentionFor =
    kernels::Attention<Cfg.head_dim, Cfg.group_size(), Cfg.window_of(Kind), Cfg.query_scale_dim()>;

// Whether sliding layers rotate with a RoPE base of their own (Gemma 3), so a step needs a
// second table of angles.
template <ModelConfig Cfg>
inline constexpr bool has_sliding_rope_table =
    Cfg.has_layer_kind(LayerKind::sliding) && Cfg.has_layer_kind(LayerKind::global) &&
    Cfg.rope_base_of(LayerKind::sliding) != Cfg.rope_base_of(LayerKind::global);

// One task of a step's attention: a query block of one chunk for one KV head, or (split-KV
// decode) one segment of the keys of a one-query chunk.
struct AttentionTask {
    static constexpr int whole_block = -1;
    int chunk;
    int kv_head;
    int block;
    std::size_t first_row;          // the chunk's first row in the step's activations
    kernels::HeadSlice heads = {};  // the KV head's whole group of query heads, or a slice
    int segment = whole_block;      // kernels::AttentionKernel::attend_segment's segment
};

template <ModelConfig Cfg>
requires ModelShape<Cfg>
class Workspace {
  public:
    // max_tokens: most tokens (rows) one forward call takes, all chunks together; threads: the
    // OpenMP threads every kernel runs on.
    Workspace(int max_tokens, int threads) : max_tokens_(max_tokens), threads_(threads) {
        if (max_tokens <= 0) throw Error("Workspace: max_tokens must be positive");
        if (threads <= 0) throw Error("Workspace: threads must be positive");
        auto const rows = static_cast<std::size_t>(max_tokens);
        hidden.resize(rows * Cfg.hidden);
        normed.resize(rows * Cfg.hidden);
        q.resize(rows * Cfg.q_width());
        k.resize(rows * Cfg.kv_width());
        v.resize(rows * Cfg.kv_width());
        attended.resize(rows * Cfg.q_width());
        gate.resize(rows * Cfg.ffn);
        up.resize(rows * Cfg.ffn);
        rope.resize(rows * Cfg.head_dim);
        if constexpr (has_sliding_rope_table<Cfg>) rope_sliding.resize(rows * Cfg.head_dim);
        positions.resize(rows);
        slots.resize(rows);
        logit_rows.resize(rows);
        // At most one chunk per token, each split into query blocks per KV head; fewer tasks
        // than threads are split by query heads into under twice the threads.
        tasks.reserve(std::max(rows * Cfg.kv_heads, 2 * static_cast<std::size_t>(threads)));
        std::size_t const per_thread = std::max(
            {kernels::linear_scratch_floats(std::max(Cfg.hidden, Cfg.ffn)),
             kernels::linear_scratch_floats(Cfg.q_width()), AttentionFor<Cfg>::scratch_floats});
        scratch.resize(per_thread * static_cast<std::size_t>(threads));
        scratch_per_thread_ = per_thread;
        quantized_stride = kernels::int8_row_bytes(std::max({Cfg.hidden, Cfg.q_width(), Cfg.ffn}));
        quantized.resize(rows * quantized_stride);
        // Whole cache lines per thread (and a line to align the first), so that no two threads
        // write one line.
        normed_copies.resize(static_cast<std::size_t>(threads) * normed_copy_floats +
                             cache_line_bytes / sizeof(float));
        quantized_copies.resize(static_cast<std::size_t>(threads) * quantized_copy_bytes() +
                                cache_line_bytes);
    }

    int max_tokens() const { return max_tokens_; }
    int threads() const { return threads_; }
    // Thread `thread`'s share of `scratch`.
    float* thread_scratch(int thread) {
        return scratch.data() + scratch_per_thread_ * static_cast<std::size_t>(thread);
    }
    // Row `row` of the int8 activations (kernels::Int8Activations).
    std::byte* quantized_row(int row) {
        return quantized.data() + quantized_stride * static_cast<std::size_t>(row);
    }
    kernels::Int8Rows quantized_rows() const { return {quantized.data(), quantized_stride}; }
    // Thread `thread`'s own copy of a one-row step's normed row, and the int8 form of the row
    // its next product reads (the normed row, the attention output or the FFN's hidden row).
    float* normed_copy(int thread) {
        return cache_line_aligned(normed_copies.data()) +
               normed_copy_floats * static_cast<std::size_t>(thread);
    }
    std::byte* quantized_copy(int thread) {
        return cache_line_aligned(quantized_copies.data()) +
               quantized_copy_bytes() * static_cast<std::size_t>(thread);
    }

    // Activations, row-major over the step's tokens (chunks in order).
    std::vector<float> hidden;        // [tokens][hidden], the residual stream
    std::vector<float> normed;        // [tokens][hidden]
    std::vector<float> q;             // [tokens][heads * head_dim]
    std::vector<float> k;             // [tokens][kv_heads * head_dim]
    std::vector<float> v;             // [tokens][kv_heads * head_dim]
    std::vector<float> attended;      // [tokens][heads * head_dim]
    std::vector<float> gate;          // [tokens][ffn]
    std::vector<float> up;            // [tokens][ffn]
    std::vector<float> rope;          // [tokens][head_dim / 2][2]
    std::vector<float> rope_sliding;  // the same for sliding layers' base, where it differs
    std::vector<int> positions;       // [tokens]
    std::vector<int> slots;           // [tokens]
    std::vector<int> logit_rows;      // [logit rows]: the token row each logit row comes from
    std::vector<AttentionTask> tasks;
    bool wants_attention_scores = false;  // a chunk of the step asks for attention scores
    // Split-KV decode (tasks with a segment): the step's segments, each KV head's segment
    // states [kv_heads][segments][group][segment_state_floats], and per KV head the tasks
    // still to finish in the running layer (the last to finish folds the states). The states
    // grow with the context (plan_attention resizes them, capacity doubling: a few
    // allocations over a sequence, none once its longest context has been seen).
    int segments = 0;
    int segment_tasks_per_head = 0;
    std::vector<float> segment_states;
    std::vector<std::atomic<int>> segment_tasks_left =
        std::vector<std::atomic<int>>(static_cast<std::size_t>(Cfg.kv_heads));
    std::vector<float> scratch;  // [threads][per-thread kernel scratch]
    // The input of the next matrix product as int8 rows, when the precision policy quantizes
    // activations: [tokens][quantized_stride bytes], laid out by kernels::quantize_row_int8.
    std::vector<std::byte> quantized;
    std::size_t quantized_stride = 0;
    // Per thread, a normed row and a product's int8 input row (normed_copy, quantized_copy).
    std::vector<float> normed_copies;
    std::vector<std::byte> quantized_copies;

  private:
    // A thread's normed copy and int8 copy, in whole cache lines.
    static constexpr std::size_t normed_copy_floats =
        (Cfg.hidden * sizeof(float) + cache_line_bytes - 1) / cache_line_bytes * cache_line_bytes /
        sizeof(float);
    std::size_t quantized_copy_bytes() const {
        return (quantized_stride + cache_line_bytes - 1) / cache_line_bytes * cache_line_bytes;
    }

    std::size_t scratch_per_thread_ = 0;
    int max_tokens_;
    int threads_;
};

}  // namespace tinfer::model
