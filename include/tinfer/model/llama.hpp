#pragma once
// Llama<Cfg>: the forward pass of a Llama-family decoder over a batch of sequences, each a
// prefill chunk (many tokens) or a decode (one token), all rows going through every matrix
// together (matrix x matrix), activations in float32 or (a compile-time precision policy) int8.
//
// Llama<Cfg, Parallel> runs one rank's part of a tensor-parallel model (model/parallel.hpp):
// its attention and FFN have the shape `local_config`, and the two row-parallel projections of
// each layer are completed by the policy's all-reduce. The default, NoParallel, is the whole
// model, and its hooks compile to nothing.
//
// Token eviction: a sequence's cache may have dropped tokens (kv::*::retain_slots), so a token's
// RoPE position and its cache slot differ. A chunk names both; keys carry the rotation of their
// original positions, and causal masking compares cache slots, which keep position order.
//
// Batch invariance: every kernel computes each token row with an arithmetic order fixed by the
// row's own data (kernels/linear.hpp, attention.hpp, rmsnorm.hpp explain how), and attention
// reads only the row's own sequence from the cache, so a sequence's logits are bitwise the same
// alone or in any batch, on any number of threads, and prefilled in one chunk or many.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
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
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/swiglu.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/model/attention_scores.hpp>
#include <tinfer/model/int8_weights.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/weights.hpp>
#include <tinfer/model/workspace.hpp>

namespace tinfer {

// One sequence's part of a forward step: `tokens` at positions first_position, first_position
// + 1, ... (their RoPE rotations), stored at cache slots first_cache_slot, first_cache_slot + 1,
// ...; the sequence's cache already holds slots 0 .. first_cache_slot - 1. Without eviction
// the two coincide, which is the default.
struct SequenceChunk {
    int slot = 0;
    int first_position = 0;
    std::span<std::int32_t const> tokens;
    bool all_logits = false;  // logits for every token (scoring), else for the last one only
    int first_cache_slot = first_position;
    // When not empty: forward adds, for every cache slot s, the attention probability the
    // chunk's tokens gave s, summed over layers and query heads (model/attention_scores.hpp),
    // for H2O-style eviction. Must hold first_cache_slot + tokens.size() slots. Under tensor
    // parallelism each rank adds its own heads' share.
    std::span<float> attention_scores = {};
};

template <ModelConfig Cfg, model::ParallelPolicy Parallel = model::NoParallel>
requires ModelShape<Cfg> && ModelShape<Parallel::template local<Cfg>>
class Llama {
  public:
    static constexpr ModelConfig config = Cfg;
    // The attention and FFN this process computes: Cfg, or one tensor-parallel rank's shard
    // (fewer heads, KV heads and FFN features; the same hidden size, layers and vocabulary).
    // The KV cache and the workspace are this shape's.
    static constexpr ModelConfig local_config = Parallel::template local<Cfg>;
    using Workspace = model::Workspace<local_config>;
    using Attention = model::AttentionFor<local_config>;

    // Checks the file against Cfg (tinfer::ConfigMismatch naming the field and both values) and
    // views its weights in place; `file` must outlive the model.
    static Llama bind(gguf::File const& file) requires std::default_initializable<Parallel> {
        return bind(file, Parallel{});
    }
    // As bind(file), then keeps this rank's shard of every layer (parallel.rank()).
    static Llama bind(gguf::File const& file, Parallel parallel) {
        return from_weights(model::ModelWeights<Cfg>::bind(file), std::move(parallel));
    }
    // A model over weights the caller bound (they view a file that must outlive the model), for
    // variants of a file's shape the file's hyperparameters would refuse, such as a sliding
    // window.
    static Llama from_weights(model::ModelWeights<Cfg> weights, Parallel parallel = {}) {
        model::ShardStorage storage = parallel.template shard<Cfg>(weights);
        return Llama(std::move(weights), std::move(parallel), std::move(storage));
    }

    // This rank's weights (the whole model's without parallelism).
    model::ModelWeights<Cfg> const& weights() const { return weights_; }
    Parallel const& parallel() const { return parallel_; }

    // Rows of logits forward writes for these chunks: one per chunk, or one per token with
    // all_logits.
    static std::size_t logit_rows(std::span<SequenceChunk const> chunks) {
        std::size_t rows = 0;
        for (SequenceChunk const& c : chunks) rows += c.all_logits ? c.tokens.size() : 1;
        return rows;
    }

    // Runs the chunks through the model, writing their keys and values into `cache` and their
    // logits, [logit_rows(chunks)][vocab] in chunk order, into `logits`.
    //
    // layers < Cfg.layers runs only the first `layers` decoder layers, then the final norm and
    // the LM head: the draft model of self-speculative decoding (LayerSkip, Draft & Verify).
    // Only those layers' KV is written; a later full forward over the same positions rewrites
    // it with the same values (the first layers see the same inputs) and fills the rest.
    //
    // Precision: precision::Float32Activations (default) multiplies float32 activations with the
    // exactly decoded weights; precision::Int8Activations quantizes each matrix's input to int8
    // per block of 32 (kernels/int8_activations.hpp) for integer dot products where the weights
    // are Q4_0/Q4_1/Q8_0, as llama.cpp does: faster, and within the accuracy docs/performance.md
    // reports against the float64 reference.
    //
    // One OpenMP team runs the whole pass: the kernels share their loops over it (work-sharing
    // constructs, no fork/join per operation), and the steps that touch shared state (cache
    // writes, attention scores, tensor-parallel all-reduce) run on one thread between barriers.
    template <class Precision = precision::Float32Activations, kv::KvStore Cache>
    requires precision::ActivationPrecision<Precision>
    void forward(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws,
                 std::span<float> logits, int layers = Cfg.layers) const {
        if (layers < 1 || layers > Cfg.layers) {
            throw RequestError("forward over " + std::to_string(layers) +
                               " layers; the model has 1.." + std::to_string(Cfg.layers));
        }
        int const rows = prepare(chunks, ws, logits);

        // Each chunk's token ids are gathered straight from its own span.
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            kernels::embedding_any(weights_.token_embedding, chunks[c].tokens,
                                   ws.hidden.data() + row * Cfg.hidden);
        }
        kernels::rope_table<Cfg.head_dim>(Cfg.rope_base, ws.positions.data(), rows, ws.rope.data());
        plan_attention(chunks, ws);

        // Parallel regions cannot throw: a failing step records its exception, every thread
        // sees it after the step's barrier and leaves, and it is rethrown here.
        std::exception_ptr failure;
        model::ModelWeights<Cfg> const& weights = weights_for<Precision>();
#pragma omp parallel num_threads(ws.threads())
        {
            float* const scratch = ws.thread_scratch(omp_get_thread_num());
            for (int layer = 0; layer < layers && !failure; ++layer)
                run_layer<Precision>(weights.layers[static_cast<std::size_t>(layer)], layer, chunks,
                                     cache, ws, rows, scratch, failure);
            if (!failure) run_output<Precision>(weights, chunks, ws, logits, scratch);
        }
        if (failure) std::rethrow_exception(failure);
    }

  private:
    static constexpr float norm_eps = static_cast<float>(Cfg.norm_eps);

    Llama(model::ModelWeights<Cfg> weights, Parallel parallel, model::ShardStorage storage)
        : weights_(std::move(weights)),
          parallel_(std::move(parallel)),
          shard_storage_(std::move(storage)) {}

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
            if (chunk.first_cache_slot < 0) {
                throw RequestError(where() + " starts at cache slot " +
                                   std::to_string(chunk.first_cache_slot));
            }
            if (!chunk.attention_scores.empty() &&
                chunk.attention_scores.size() < chunk.first_cache_slot + chunk.tokens.size()) {
                throw RequestError(where() + " asks for attention scores of " +
                                   std::to_string(chunk.first_cache_slot + chunk.tokens.size()) +
                                   " cache slots into " +
                                   std::to_string(chunk.attention_scores.size()));
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

    // Whether the int8 path applies to a matrix of encoding `type` under `Precision`.
    template <class Precision>
    static constexpr bool quantizes(DType type) {
        return std::same_as<Precision, precision::Int8Activations> && kernels::has_int8_dot(type);
    }

    // Rows [0, rows) of x [rows][width] to int8 rows of the workspace (every team thread).
    template <int width>
    static void quantize_rows(float const* x, int rows, Workspace& ws) {
#pragma omp for schedule(static)
        for (int row = 0; row < rows; ++row)
            kernels::quantize_row_int8(x + static_cast<std::size_t>(row) * width, width,
                                       ws.quantized_row(row));
    }

    // ws.normed = rmsnorm(ws.hidden) row by row, quantized too where the next matrices want it.
    template <class Precision>
    static void normalize(float const* weight, int rows, Workspace& ws) {
#pragma omp for schedule(static)
        for (int row = 0; row < rows; ++row) {
            float* out = ws.normed.data() + static_cast<std::size_t>(row) * Cfg.hidden;
            kernels::rmsnorm_row<Cfg.hidden>(
                ws.hidden.data() + static_cast<std::size_t>(row) * Cfg.hidden, weight, norm_eps,
                out);
            if constexpr (quantizes<Precision>(Cfg.weights))
                kernels::quantize_row_int8(out, Cfg.hidden, ws.quantized_row(row));
        }
    }

    // y = x . W^T (or +=) over the team, x float [rows][width] or its int8 rows; no barrier.
    template <class Precision, int width>
    static void project(kernels::WeightMatrix const& w, float const* x, int rows, float* y,
                        std::size_t y_stride, kernels::Store store, Workspace& ws, float* scratch) {
        if constexpr (quantizes<Precision>(Cfg.weights)) {
            kernels::linear_team<Cfg.weights>(w, ws.quantized_rows(), rows, y, y_stride, store,
                                              scratch);
        } else {
            kernels::linear_team<Cfg.weights>(w, kernels::FloatRows{x, width}, rows, y, y_stride,
                                              store, scratch);
        }
    }

    // hidden += x . W^T for a row-parallel matrix (attention output, FFN down), completed
    // across ranks by the parallel policy's all-reduce first when there is one.
    template <class Precision, int width>
    void add_projection(kernels::WeightMatrix const& w, float const* x, int rows, Workspace& ws,
                        float* scratch, std::exception_ptr& failure) const {
        if constexpr (std::same_as<Parallel, model::NoParallel>) {
            project<Precision, width>(w, x, rows, ws.hidden.data(), Cfg.hidden,
                                      kernels::Store::accumulate, ws, scratch);
#pragma omp barrier
        } else {
            project<Precision, width>(w, x, rows, ws.normed.data(), Cfg.hidden,
                                      kernels::Store::assign, ws, scratch);
#pragma omp barrier
#pragma omp single
            {
                try {
                    parallel_.all_reduce_sum(
                        std::span(ws.normed.data(), static_cast<std::size_t>(rows) * Cfg.hidden));
                } catch (...) {
                    failure = std::current_exception();
                }
            }
            if (failure) return;
            std::size_t const n = static_cast<std::size_t>(rows) * Cfg.hidden;
#pragma omp for simd schedule(static)
            for (std::size_t i = 0; i < n; ++i) ws.hidden[i] += ws.normed[i];
        }
    }

    // One decoder layer, run by every thread of the team.
    template <class Precision, class Cache>
    void run_layer(model::LayerWeights const& w, int layer, std::span<SequenceChunk const> chunks,
                   Cache& cache, Workspace& ws, int rows, float* scratch,
                   std::exception_ptr& failure) const {
        constexpr int q_width = local_config.q_width(), kv_width = local_config.kv_width();
        constexpr int ffn = local_config.ffn;
        normalize<Precision>(w.attention_norm.data(), rows, ws);
        project<Precision, Cfg.hidden>(w.q, ws.normed.data(), rows, ws.q.data(), q_width,
                                       kernels::Store::assign, ws, scratch);
        project<Precision, Cfg.hidden>(w.k, ws.normed.data(), rows, ws.k.data(), kv_width,
                                       kernels::Store::assign, ws, scratch);
        project<Precision, Cfg.hidden>(w.v, ws.normed.data(), rows, ws.v.data(), kv_width,
                                       kernels::Store::assign, ws, scratch);
#pragma omp barrier
#pragma omp for schedule(static)
        for (int row = 0; row < rows; ++row) {
            float const* table = ws.rope.data() + static_cast<std::size_t>(row) * Cfg.head_dim;
            kernels::apply_rope_row<Cfg.head_dim>(
                ws.q.data() + static_cast<std::size_t>(row) * q_width, local_config.heads, table);
            kernels::apply_rope_row<Cfg.head_dim>(
                ws.k.data() + static_cast<std::size_t>(row) * kv_width, local_config.kv_heads,
                table);
        }
#pragma omp single
        {
            try {
                for (std::size_t c = 0, row = 0; c < chunks.size(); ++c) {
                    int const n = static_cast<int>(chunks[c].tokens.size());
                    for (int i = 0; i < n; ++i, ++row) {
                        cache.write(chunks[c].slot, layer, chunks[c].first_cache_slot + i,
                                    ws.k.data() + row * kv_width, ws.v.data() + row * kv_width);
                    }
                }
                for (std::size_t c = 0, row = 0; c < chunks.size();
                     row += chunks[c].tokens.size(), ++c) {
                    Attention::check_cached(std::as_const(cache).view(chunks[c].slot, layer),
                                            chunk_of(chunks[c], row, ws));
                }
            } catch (...) {
                failure = std::current_exception();
            }
        }
        if (failure) return;
        attend(chunks, std::as_const(cache), layer, ws, scratch);
        if (ws.wants_attention_scores) {
#pragma omp single
            {
                try {
                    add_attention_scores(chunks, std::as_const(cache), layer, ws);
                } catch (...) {
                    failure = std::current_exception();
                }
            }
            if (failure) return;
        }
        if constexpr (quantizes<Precision>(Cfg.weights))
            quantize_rows<q_width>(ws.attended.data(), rows, ws);
        add_projection<Precision, q_width>(w.output, ws.attended.data(), rows, ws, scratch,
                                           failure);
        if (failure) return;

        normalize<Precision>(w.ffn_norm.data(), rows, ws);
        if constexpr (quantizes<Precision>(Cfg.weights)) {
            kernels::gated_linear_team<Cfg.weights>(w.gate, w.up, ws.quantized_rows(), rows,
                                                    ws.gate.data(), ffn, scratch);
#pragma omp barrier
            quantize_rows<ffn>(ws.gate.data(), rows, ws);
        } else {
            kernels::gated_linear_team<Cfg.weights>(
                w.gate, w.up, kernels::FloatRows{ws.normed.data(), Cfg.hidden}, rows,
                ws.gate.data(), ffn, scratch);
#pragma omp barrier
        }
        add_projection<Precision, ffn>(w.down, ws.gate.data(), rows, ws, scratch, failure);
    }

    // The final norm and the vocabulary matrix, for the rows that produce logits only.
    template <class Precision>
    void run_output(model::ModelWeights<Cfg> const& weights, std::span<SequenceChunk const> chunks,
                    Workspace& ws, std::span<float> logits, float* scratch) const {
        int const out_rows = static_cast<int>(logit_rows(chunks));
        kernels::WeightMatrix const& head = weights.output;
        bool const quantized = quantizes<Precision>(head.type);
#pragma omp for schedule(static)
        for (int i = 0; i < out_rows; ++i) {
            float* out = ws.normed.data() + static_cast<std::size_t>(i) * Cfg.hidden;
            kernels::rmsnorm_row<Cfg.hidden>(
                ws.hidden.data() + static_cast<std::size_t>(ws.logit_rows[i]) * Cfg.hidden,
                weights.output_norm.data(), norm_eps, out);
            if (quantized) kernels::quantize_row_int8(out, Cfg.hidden, ws.quantized_row(i));
        }
        kernels::dispatch_weight_type(head.type, [&]<DType W>() {
            if constexpr (quantizes<Precision>(W)) {
                kernels::linear_team<W>(head, ws.quantized_rows(), out_rows, logits.data(),
                                        Cfg.vocab, kernels::Store::assign, scratch);
            } else {
                kernels::linear_team<W>(head, kernels::FloatRows{ws.normed.data(), Cfg.hidden},
                                        out_rows, logits.data(), Cfg.vocab, kernels::Store::assign,
                                        scratch);
            }
        });
    }

    // The step's attention tasks (chunk, KV head, query block): the same for every layer.
    static void plan_attention(std::span<SequenceChunk const> chunks, Workspace& ws) {
        ws.tasks.clear();
        ws.wants_attention_scores = false;
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            int const blocks = Attention::blocks(static_cast<int>(chunks[c].tokens.size()));
            for (int head = 0; head < local_config.kv_heads; ++head)
                for (int block = 0; block < blocks; ++block)
                    ws.tasks.push_back({static_cast<int>(c), head, block, row});
            ws.wants_attention_scores |= !chunks[c].attention_scores.empty();
        }
    }

    // Attention of every chunk at `layer`, its tasks spread over the team; each task's result
    // depends only on its own queries and cache.
    template <class Cache>
    void attend(std::span<SequenceChunk const> chunks, Cache const& cache, int layer, Workspace& ws,
                float* scratch) const {
        int const task_count = static_cast<int>(ws.tasks.size());
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < task_count; ++t) {
            model::AttentionTask const task = ws.tasks[static_cast<std::size_t>(t)];
            SequenceChunk const& chunk = chunks[static_cast<std::size_t>(task.chunk)];
            Attention::attend_block(cache.view(chunk.slot, layer), task.kv_head,
                                    chunk_of(chunk, task.first_row, ws), task.block, scratch);
        }
    }

    // Adds the attention probabilities of `layer` of the chunks that ask for them.
    template <class Cache>
    void add_attention_scores(std::span<SequenceChunk const> chunks, Cache const& cache, int layer,
                              Workspace& ws) const {
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            if (chunks[c].attention_scores.empty()) continue;
            model::add_attention_probabilities<Cfg.head_dim, Cfg.group_size(), Cfg.sliding_window>(
                cache.view(chunks[c].slot, layer), local_config.kv_heads,
                chunk_of(chunks[c], row, ws), chunks[c].attention_scores);
        }
    }

    // Attention masks by cache slot: a query sees the slots up to its own.
    static kernels::AttentionChunk chunk_of(SequenceChunk const& chunk, std::size_t row,
                                            Workspace& ws) {
        return {chunk.first_cache_slot,
                static_cast<int>(chunk.tokens.size()),
                ws.q.data() + row * local_config.q_width(),
                static_cast<std::size_t>(local_config.q_width()),
                ws.attended.data() + row * local_config.q_width(),
                static_cast<std::size_t>(local_config.q_width())};
    }

    // The weights a forward pass under Precision reads: the file's layout, or (int8
    // activations) the int8 strips, repacked on the first such pass.
    template <class Precision>
    model::ModelWeights<Cfg> const& weights_for() const {
        if constexpr (std::same_as<Precision, precision::Int8Activations>) {
            return int8_weights_.get(weights_);
        } else {
            return weights_;
        }
    }

    model::ModelWeights<Cfg> weights_;
    [[no_unique_address]] Parallel parallel_;
    model::ShardStorage shard_storage_;  // row-parallel shards the weights point into
    model::LazyInt8Weights<Cfg> int8_weights_;
};

}  // namespace tinfer
