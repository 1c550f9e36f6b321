#pragma once
// Llama<Cfg>: the forward pass of a Llama-family decoder over a batch of sequences, each a
// prefill chunk (many tokens) or a decode (one token), all rows going through every matrix
// together (matrix x matrix), activations in float32.
//
// Batch invariance: every kernel computes each token row with an arithmetic order fixed by the
// row's own data (kernels/linear.hpp, attention.hpp, rmsnorm.hpp explain how), and attention
// reads only the row's own sequence from the cache, so a sequence's logits are bitwise the same
// alone or in any batch, on any number of threads, and prefilled in one chunk or many.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include <omp.h>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/embedding.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/swiglu.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/model/weights.hpp>
#include <tinfer/model/workspace.hpp>

namespace tinfer {

// One sequence's part of a forward step: `tokens` at positions first_position, first_position
// + 1, ...; the cache slot already holds positions 0 .. first_position - 1.
struct SequenceChunk {
    int slot = 0;
    int first_position = 0;
    std::span<std::int32_t const> tokens;
    bool all_logits = false;  // logits for every token (scoring), else for the last one only
};

template <ModelConfig Cfg>
requires ModelShape<Cfg>
class Llama {
  public:
    static constexpr ModelConfig config = Cfg;
    using Workspace = model::Workspace<Cfg>;
    using Attention = model::AttentionFor<Cfg>;

    // Checks the file against Cfg (tinfer::ConfigMismatch naming the field and both values) and
    // views its weights in place; `file` must outlive the model.
    static Llama bind(gguf::File const& file) {
        return Llama(model::ModelWeights<Cfg>::bind(file));
    }

    model::ModelWeights<Cfg> const& weights() const { return weights_; }

    // Rows of logits forward writes for these chunks: one per chunk, or one per token with
    // all_logits.
    static std::size_t logit_rows(std::span<SequenceChunk const> chunks) {
        std::size_t rows = 0;
        for (SequenceChunk const& c : chunks) rows += c.all_logits ? c.tokens.size() : 1;
        return rows;
    }

    // Runs the chunks through the model, writing their keys and values into `cache` and their
    // logits, [logit_rows(chunks)][vocab] in chunk order, into `logits`.
    template <kv::KvStore Cache>
    void forward(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws,
                 std::span<float> logits) const {
        int const rows = prepare(chunks, ws, logits);
        int const threads = ws.threads();
        std::span<float> const scratch(ws.scratch);

        // Each chunk's token ids are gathered straight from its own span.
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            kernels::embedding_any(weights_.token_embedding, chunks[c].tokens,
                                   ws.hidden.data() + row * Cfg.hidden);
        }
        kernels::rope_table<Cfg.head_dim>(Cfg.rope_base, ws.positions.data(), rows, ws.rope.data());

        for (int layer = 0; layer < Cfg.layers; ++layer) {
            model::LayerWeights const& w = weights_.layers[static_cast<std::size_t>(layer)];
            kernels::rmsnorm<Cfg.hidden>(ws.hidden.data(), w.attention_norm.data(), norm_eps, rows,
                                         ws.normed.data(), threads);
            kernels::linear<Cfg.weights>(w.q, ws.normed.data(), rows, ws.q.data(), threads,
                                         scratch);
            kernels::linear<Cfg.weights>(w.k, ws.normed.data(), rows, ws.k.data(), threads,
                                         scratch);
            kernels::linear<Cfg.weights>(w.v, ws.normed.data(), rows, ws.v.data(), threads,
                                         scratch);
            kernels::apply_rope<Cfg.head_dim>(ws.q.data(), rows, Cfg.heads, Cfg.q_width(),
                                              ws.rope.data(), threads);
            kernels::apply_rope<Cfg.head_dim>(ws.k.data(), rows, Cfg.kv_heads, Cfg.kv_width(),
                                              ws.rope.data(), threads);
            for (int row = 0; row < rows; ++row) {
                cache.write(ws.slots[row], layer, ws.positions[row],
                            ws.k.data() + static_cast<std::size_t>(row) * Cfg.kv_width(),
                            ws.v.data() + static_cast<std::size_t>(row) * Cfg.kv_width());
            }
            attend(chunks, std::as_const(cache), layer, ws);
            kernels::linear<Cfg.weights>(w.output, ws.attended.data(), rows, ws.normed.data(),
                                         threads, scratch);
            add_into(ws.hidden.data(), ws.normed.data(),
                     static_cast<std::size_t>(rows) * Cfg.hidden, threads);

            kernels::rmsnorm<Cfg.hidden>(ws.hidden.data(), w.ffn_norm.data(), norm_eps, rows,
                                         ws.normed.data(), threads);
            kernels::linear<Cfg.weights>(w.gate, ws.normed.data(), rows, ws.gate.data(), threads,
                                         scratch);
            kernels::linear<Cfg.weights>(w.up, ws.normed.data(), rows, ws.up.data(), threads,
                                         scratch);
            kernels::swiglu(ws.gate.data(), ws.up.data(), static_cast<std::size_t>(rows) * Cfg.ffn,
                            ws.gate.data(), threads);
            kernels::linear<Cfg.weights>(w.down, ws.gate.data(), rows, ws.normed.data(), threads,
                                         scratch);
            add_into(ws.hidden.data(), ws.normed.data(),
                     static_cast<std::size_t>(rows) * Cfg.hidden, threads);
        }

        // Only the rows that produce logits go through the final norm and the vocabulary matrix.
        int const out_rows = static_cast<int>(logit_rows(chunks));
        for (int i = 0; i < out_rows; ++i) {
            std::copy_n(ws.hidden.data() + static_cast<std::size_t>(ws.logit_rows[i]) * Cfg.hidden,
                        Cfg.hidden, ws.normed.data() + static_cast<std::size_t>(i) * Cfg.hidden);
        }
        kernels::rmsnorm<Cfg.hidden>(ws.normed.data(), weights_.output_norm.data(), norm_eps,
                                     out_rows, ws.normed.data(), threads);
        kernels::linear_any(weights_.output, ws.normed.data(), out_rows, logits.data(), threads,
                            scratch);
    }

  private:
    static constexpr float norm_eps = static_cast<float>(Cfg.norm_eps);

    explicit Llama(model::ModelWeights<Cfg> weights) : weights_(std::move(weights)) {}

    // Checks the request and lays out the step's rows: position, slot, and which rows give logits.
    int prepare(std::span<SequenceChunk const> chunks, Workspace& ws,
                std::span<float> logits) const {
        std::size_t rows = 0;
        for (std::size_t c = 0; c < chunks.size(); ++c) {
            SequenceChunk const& chunk = chunks[c];
            // Built only on the error path: a decode step allocates nothing.
            auto const where = [&] {
                return "chunk " + std::to_string(c) + " (slot " + std::to_string(chunk.slot) + ")";
            };
            if (chunk.tokens.empty()) throw RequestError(where() + " has no tokens");
            if (chunk.first_position < 0 ||
                chunk.first_position + static_cast<std::int64_t>(chunk.tokens.size()) >
                    Cfg.max_context) {
                throw RequestError(
                    where() + " covers positions " + std::to_string(chunk.first_position) + ".." +
                    std::to_string(chunk.first_position +
                                   static_cast<std::int64_t>(chunk.tokens.size()) - 1) +
                    ", outside the model's context of " + std::to_string(Cfg.max_context));
            }
            for (std::size_t other = 0; other < c; ++other) {
                if (chunks[other].slot == chunk.slot) {
                    throw RequestError(where() + " shares its slot with chunk " +
                                       std::to_string(other));
                }
            }
            rows += chunk.tokens.size();
        }
        if (rows > static_cast<std::size_t>(ws.max_tokens())) {
            throw RequestError("the step has " + std::to_string(rows) +
                               " tokens, the workspace holds " + std::to_string(ws.max_tokens()));
        }
        std::size_t const needed = logit_rows(chunks) * static_cast<std::size_t>(Cfg.vocab);
        if (logits.size() < needed) {
            throw RequestError("logits hold " + std::to_string(logits.size()) +
                               " floats, the step writes " + std::to_string(needed));
        }
        std::size_t row = 0, out = 0;
        for (SequenceChunk const& chunk : chunks) {
            int const n = static_cast<int>(chunk.tokens.size());
            for (int i = 0; i < n; ++i, ++row) {
                ws.positions[row] = chunk.first_position + i;
                ws.slots[row] = chunk.slot;
                if (chunk.all_logits || i == n - 1) ws.logit_rows[out++] = static_cast<int>(row);
            }
        }
        return static_cast<int>(rows);
    }

    // Attention of every chunk at `layer`, its tasks (chunk, KV head, query block) spread over
    // the threads; each task's result depends only on its own queries and cache.
    template <class Cache>
    void attend(std::span<SequenceChunk const> chunks, Cache const& cache, int layer,
                Workspace& ws) const {
        ws.tasks.clear();
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            auto const view = cache.view(chunks[c].slot, layer);
            Attention::check_cached(view, chunk_of(chunks[c], row, ws));
            int const blocks = Attention::blocks(static_cast<int>(chunks[c].tokens.size()));
            for (int head = 0; head < Cfg.kv_heads; ++head)
                for (int block = 0; block < blocks; ++block)
                    ws.tasks.push_back({static_cast<int>(c), head, block, row});
        }
        int const task_count = static_cast<int>(ws.tasks.size());
        float* const scratch = ws.scratch.data();
        std::size_t const per_thread = ws.scratch.size() / static_cast<std::size_t>(ws.threads());
#pragma omp parallel for num_threads(ws.threads()) schedule(dynamic, 1)
        for (int t = 0; t < task_count; ++t) {
            model::AttentionTask const task = ws.tasks[static_cast<std::size_t>(t)];
            SequenceChunk const& chunk = chunks[static_cast<std::size_t>(task.chunk)];
            Attention::attend_block(
                cache.view(chunk.slot, layer), task.kv_head, chunk_of(chunk, task.first_row, ws),
                task.block, scratch + per_thread * static_cast<std::size_t>(omp_get_thread_num()));
        }
    }

    static kernels::AttentionChunk chunk_of(SequenceChunk const& chunk, std::size_t row,
                                            Workspace& ws) {
        return {chunk.first_position,
                static_cast<int>(chunk.tokens.size()),
                ws.q.data() + row * Cfg.q_width(),
                static_cast<std::size_t>(Cfg.q_width()),
                ws.attended.data() + row * Cfg.q_width(),
                static_cast<std::size_t>(Cfg.q_width())};
    }

    // The residual connection: hidden += delta.
    static void add_into(float* hidden, float const* delta, std::size_t n, int threads) {
        constexpr std::size_t parallel_from = 16 * 1024;
#pragma omp parallel for simd num_threads(threads) schedule(static) if (n >= parallel_from)
        for (std::size_t i = 0; i < n; ++i) hidden[i] += delta[i];
    }

    model::ModelWeights<Cfg> weights_;
};

}  // namespace tinfer
