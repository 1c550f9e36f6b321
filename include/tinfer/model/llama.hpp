#pragma once
// Llama<Cfg>: the forward pass of a Llama-family decoder over a batch of sequences, each a
// prefill chunk (many tokens) or a decode (one token), all rows going through every matrix
// together (matrix x matrix), activations in float32 or (a compile-time precision policy) int8.
//
// One template for every architecture Cfg.arch describes (Llama, Qwen2, Gemma 3): the layer is
// model/decoder_layer.hpp over the CPU's ops (model/host_ops.hpp), instantiated once per kind
// of layer the shape has (LayerPlan: global, and sliding where some layer slides), and each
// layer runs the plan of its kind. SmolLM2 and Gemma 3 are two presets of this one class.
//
// Llama<Cfg, Parallel> runs one rank's part of a tensor-parallel model (model/parallel.hpp):
// its attention and FFN have the shape `local_config`, and the two row-parallel projections of
// each layer are completed by the policy's all-reduce. The default, NoParallel, is the whole
// model, and its hooks compile to nothing. Llama<Cfg, PipelineParallel<S, Comm>> runs one
// stage's contiguous layers, the step's rows in micro-batches (model/pipeline_parallel.hpp).
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
#include <tinfer/core/sequence_chunk.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/embedding.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/swiglu.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/model/attention_scores.hpp>
#include <tinfer/model/decoder_layer.hpp>
#include <tinfer/model/host_ops.hpp>
#include <tinfer/model/int8_weights.hpp>
#include <tinfer/model/layer_plan.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/model/weights.hpp>
#include <tinfer/model/workspace.hpp>

namespace tinfer::model {

template <ModelConfig Cfg, model::ParallelPolicy Parallel = model::NoParallel>
requires ModelShape<Cfg> && ModelShape<Parallel::template local<Cfg>>
class Llama {
  public:
    static constexpr ModelConfig config = Cfg;
    using ParallelPolicy = Parallel;
    // The attention and FFN this process computes: Cfg, or one tensor-parallel rank's shard
    // (fewer heads, KV heads and FFN features; the same hidden size, layers and vocabulary).
    // The KV cache and the workspace are this shape's.
    static constexpr ModelConfig local_config = Parallel::template local<Cfg>;
    using Workspace = model::Workspace<local_config>;
    // The layer plans: at most two instantiations of the decoder layer.
    using GlobalLayer = model::LayerPlan<local_config, LayerKind::global>;
    using SlidingLayer = model::LayerPlan<local_config, LayerKind::sliding>;
    using FirstLayer = model::LayerPlan<local_config, Cfg.layer_kind(0)>;
    using Attention = typename FirstLayer::Attention;

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
    // Readies what forward passes under Precision read now, not in the first of them: under
    // Int8Activations, the int8 strips (a repack of about the file's size, onto fresh huge
    // pages: 0.1-0.8 s, which would otherwise land in the first request's TTFT).
    template <class Precision>
    void prepare() const {
        (void)weights_for<Precision>();
    }
    Parallel const& parallel() const { return parallel_; }

    // Rows of logits forward writes for these chunks: one per chunk, or one per token with
    // all_logits.
    static std::size_t logit_rows(std::span<SequenceChunk const> chunks) {
        std::size_t rows = 0;
        for (SequenceChunk const& c : chunks) rows += c.all_logits ? c.tokens.size() : 1;
        return rows;
    }

    // Runs the chunks through the model, writing their keys and values into `cache` and their
    // logits, [logit_rows(chunks)][vocab] in chunk order, into `logits`. An empty `logits`
    // skips the final norm and the LM head (only the KV is written: a prefill chunk whose
    // logits nobody reads, or a benchmark timing the layers alone); not under pipeline
    // parallelism.
    //
    // layers < Cfg.layers runs only the first `layers` decoder layers, then the final norm and
    // the LM head: the draft model of self-speculative decoding (LayerSkip, Draft & Verify).
    // Only those layers' KV is written; a later full forward over the same positions rewrites
    // it with the same values (the first layers see the same inputs) and fills the rest.
    //
    // Precision: kernels::Float32Activations (default) multiplies float32 activations with the
    // exactly decoded weights; kernels::Int8Activations quantizes each matrix's input to int8
    // per block of 32 (kernels/int8_activations.hpp) for integer dot products where the weights
    // are Q4_0/Q4_1/Q8_0, as llama.cpp does: faster, and within the accuracy docs/performance.md
    // reports against the float64 reference.
    //
    // One OpenMP team runs the whole pass: the kernels share their loops over it (work-sharing
    // constructs, no fork/join per operation), and the steps that touch shared state (cache
    // writes, attention scores, tensor-parallel all-reduce) run on one thread between barriers.
    //
    // Shapes: how the layer hands Cfg's dimensions to its kernels (core/extent.hpp). The
    // default generates them for the shape; DynamicShapes runs the same source with every
    // dimension a run-time value, the same logits bitwise (tests/model/architecture_test.cpp),
    // for bench/specialization's end-to-end comparison. The KV cache's own codecs and the
    // attention scores of H2O eviction stay as the cache and the layer plan compile them.
    template <class Precision = kernels::Float32Activations, ShapePolicy Shapes = StaticShapes,
              kv::KvStore Cache>
    requires kernels::ActivationPrecision<Precision>
    void forward(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws,
                 std::span<float> logits, int layers = Cfg.layers) const {
        if (layers < 1 || layers > Cfg.layers) {
            throw RequestError("forward over " + std::to_string(layers) +
                               " layers; the model has 1.." + std::to_string(Cfg.layers));
        }
        if constexpr (model::is_pipeline_parallel<Parallel>) {
            forward_pipelined<Precision, Shapes>(chunks, cache, ws, logits, layers);
        } else {
            int const rows = prepare(chunks, ws, logits, /*logits_optional=*/true);
            embed(chunks, ws, rows);
            run_layers<Precision, Shapes>(chunks, cache, ws, rows, {0, layers}, logits);
        }
    }

  private:
    // The step's token embeddings into ws.hidden, scaled where the architecture scales them.
    void embed(std::span<SequenceChunk const> chunks, Workspace& ws, int rows) const {
        // Each chunk's token ids are gathered straight from its own span.
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            kernels::embedding_any(weights_.token_embedding, chunks[c].tokens,
                                   ws.hidden.data() + row * Cfg.hidden);
        }
        if constexpr (Cfg.arch.scale_embedding) {
            // llama.cpp's float sqrt(hidden) (Hugging Face rounds it to bf16).
            constexpr float scale = static_cast<float>(kernels::constexpr_sqrt(Cfg.hidden));
            std::size_t const n = static_cast<std::size_t>(rows) * Cfg.hidden;
            for (std::size_t i = 0; i < n; ++i) ws.hidden[i] *= scale;
        }
    }

    // Runs decoder layers [layers.first, layers.end()) over ws.hidden (the chunks' rows laid
    // out by prepare), then, unless `logits` is empty, the final norm and the LM head. The cache
    // holds this process's layers from layers.first on (a pipeline stage's own).
    template <class Precision, class Shapes, kv::KvStore Cache>
    void run_layers(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws, int rows,
                    model::IndexRange layers, std::span<float> logits) const {
        // ws.rope: the global layers' angles, or the one kind's; sliding layers with a base of
        // their own read ws.rope_sliding.
        constexpr LayerKind main_kind =
            model::uses_two_layer_kinds<Cfg> ? LayerKind::global : Cfg.layer_kind(0);
        // The angle table takes head_dim at run time: static it measured 0.93-1.01x the dynamic
        // form's time on every shape (docs/specialization.md), so one instantiation serves all.
        DynamicExtent const head_dim{Cfg.head_dim};
        kernels::rope_table(head_dim, Cfg.rope_base_of(main_kind), ws.positions.data(), rows,
                            ws.rope.data());
        if constexpr (model::has_sliding_rope_table<local_config>) {
            kernels::rope_table(head_dim, Cfg.rope_base_of(LayerKind::sliding), ws.positions.data(),
                                rows, ws.rope_sliding.data());
        }
        plan_attention(chunks, ws);

        // Parallel regions cannot throw: a failing step records its exception, every thread
        // sees it after the step's barrier and leaves, and it is rethrown here.
        std::exception_ptr failure;
        model::ModelWeights<Cfg> const& weights = weights_for<Precision>();
        int const out_rows = static_cast<int>(logit_rows(chunks));
#pragma omp parallel num_threads(ws.threads())
        {
            model::HostOps<Cfg, Parallel, Precision, Cache, Shapes> ops(
                parallel_, chunks, cache, ws, rows, ws.thread_scratch(omp_get_thread_num()),
                failure);
            model::run_decoder_stack<Cfg, local_config>(ops, weights.layers, layers.first,
                                                        layers.end());
            if (!ops.failed() && !logits.empty()) ops.logits(weights, out_rows, logits);
        }
        if (failure) std::rethrow_exception(failure);
    }

    // One pipeline stage's part of the step (model/pipeline_parallel.hpp): the rows in
    // micro-batches, each received from the previous stage (or embedded), run through this
    // stage's layers and sent on (or, on the last stage, turned into logits); then every stage
    // gets the last stage's logits.
    template <class Precision, class Shapes, kv::KvStore Cache>
    void forward_pipelined(std::span<SequenceChunk const> chunks, Cache& cache, Workspace& ws,
                           std::span<float> logits, int layers) const {
        if (layers != Cfg.layers) {
            throw RequestError("a forward over the first " + std::to_string(layers) +
                               " layers (self-speculative drafting) is not supported under "
                               "pipeline parallelism: the layers live on different stages");
        }
        for (SequenceChunk const& c : chunks) {
            if (!c.attention_scores.empty()) {
                throw RequestError(
                    "attention scores (H2O-style eviction) are not supported under "
                    "pipeline parallelism: each stage sees only its own layers");
            }
        }
        prepare(chunks, ws, logits);  // the whole step's checks, as one process makes them
        model::IndexRange const mine =
            model::PipelineStages<Cfg, Parallel::pipeline_stages>::layers_of(parallel_.stage());
        std::vector<float> piece_logits;
        for (model::MicroBatch const& batch :
             model::split_into_micro_batches(chunks, parallel_.micro_batches())) {
            int const rows = lay_out_rows(batch.chunks, ws);
            std::span<float> const hidden(ws.hidden.data(),
                                          static_cast<std::size_t>(rows) * Cfg.hidden);
            if (parallel_.first_stage()) {
                embed(batch.chunks, ws, rows);
            } else {
                parallel_.receive_from_previous_stage(hidden);
            }
            if (!parallel_.last_stage()) {
                run_layers<Precision, Shapes>(batch.chunks, cache, ws, rows, mine, {});
                parallel_.send_to_next_stage(hidden);
                continue;
            }
            // The rows go straight to the step's logits where they are consecutive rows of
            // them (a decode batch), else through piece_logits.
            std::vector<int> const& to = batch.step_logit_row;
            bool const direct =
                to.front() >= 0 && std::adjacent_find(to.begin(), to.end(), [](int a, int b) {
                                       return b != a + 1;
                                   }) == to.end();
            std::size_t const floats = to.size() * static_cast<std::size_t>(Cfg.vocab);
            if (direct) {
                run_layers<Precision, Shapes>(
                    batch.chunks, cache, ws, rows, mine,
                    logits.subspan(static_cast<std::size_t>(to.front()) * Cfg.vocab, floats));
                continue;
            }
            piece_logits.resize(floats);
            run_layers<Precision, Shapes>(batch.chunks, cache, ws, rows, mine, piece_logits);
            for (std::size_t i = 0; i < to.size(); ++i) {
                if (to[i] < 0) continue;
                std::copy_n(piece_logits.begin() + static_cast<std::ptrdiff_t>(i * Cfg.vocab),
                            Cfg.vocab,
                            logits.begin() + static_cast<std::ptrdiff_t>(to[i]) * Cfg.vocab);
            }
        }
        parallel_.share_logits(
            logits.first(logit_rows(chunks) * static_cast<std::size_t>(Cfg.vocab)));
    }

    Llama(model::ModelWeights<Cfg> weights, Parallel parallel, model::ShardStorage storage)
        : weights_(std::move(weights)),
          parallel_(std::move(parallel)),
          shard_storage_(std::move(storage)) {}

    // Checks the request and lays out the step's rows: position, slot, and which rows give logits.
    int prepare(std::span<SequenceChunk const> chunks, Workspace& ws, std::span<float> logits,
                bool logits_optional = false) const {
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
        if (logits.size() < needed && !(logits_optional && logits.empty())) {
            throw RequestError("logits hold " + std::to_string(logits.size()) +
                               " floats, the step writes " + std::to_string(needed));
        }
        return lay_out_rows(chunks, ws);
    }

    // Each row's position and slot, and which rows give logits; returns the row count.
    static int lay_out_rows(std::span<SequenceChunk const> chunks, Workspace& ws) {
        std::size_t row = 0, out = 0;
        for (SequenceChunk const& chunk : chunks) {
            int const n = static_cast<int>(chunk.tokens.size());
            for (int i = 0; i < n; ++i, ++row) {
                ws.positions[row] = chunk.first_position + i;
                ws.slots[row] = chunk.slot;
                if (chunk.all_logits || i == n - 1) ws.logit_rows[out++] = static_cast<int>(row);
            }
        }
        return static_cast<int>(row);
    }

    // The step's attention tasks (chunk, KV head, query block): the same for every layer.
    // A decode step of one sequence on several threads splits each KV head's keys into segments
    // instead (split-KV: the same bits, kernels::AttentionKernel::attend_segment), so that its
    // threads share one long run of keys rather than each reading a whole KV head. Fewer tasks
    // than threads (a decode step of a model with one or two KV heads, at short contexts) leave
    // threads idle at the layer's one serial stretch; each task's group of query heads is then
    // split into slices, the same bits (kernels::HeadSlice), each slice reading the KV tiles
    // again.
    static void plan_attention(std::span<SequenceChunk const> chunks, Workspace& ws) {
        ws.tasks.clear();
        ws.wants_attention_scores = false;
        ws.segments = 0;
        for (std::size_t c = 0, row = 0; c < chunks.size(); row += chunks[c].tokens.size(), ++c) {
            int const blocks = Attention::blocks(static_cast<int>(chunks[c].tokens.size()));
            for (int head = 0; head < local_config.kv_heads; ++head)
                for (int block = 0; block < blocks; ++block)
                    ws.tasks.push_back({static_cast<int>(c), head, block, row});
            ws.wants_attention_scores |= !chunks[c].attention_scores.empty();
        }
        if (chunks.size() == 1 && chunks[0].tokens.size() == 1 && ws.threads() > 1) {
            // Segments of cache slots, which attention indexes (fewer than the positions once
            // eviction has dropped tokens).
            int const segments = Attention::kernel.segments(chunks[0].first_cache_slot);
            if (segments > 1) {
                ws.segments = segments;
                ws.tasks.clear();
                for (int head = 0; head < local_config.kv_heads; ++head)
                    for (int s = 0; s < segments; ++s) ws.tasks.push_back({0, head, 0, 0, {}, s});
            }
        }
        int const tasks = static_cast<int>(ws.tasks.size());
        int const slices =
            tasks > 0 ? std::min(local_config.group_size(), (ws.threads() + tasks - 1) / tasks) : 1;
        if (ws.segments > 0) {
            ws.segment_tasks_per_head = ws.segments * std::max(1, slices);
            ws.segment_states.resize(static_cast<std::size_t>(local_config.kv_heads) * ws.segments *
                                     local_config.group_size() *
                                     Attention::kernel.segment_state_floats());
            for (int head = 0; head < local_config.kv_heads; ++head)
                ws.segment_tasks_left[static_cast<std::size_t>(head)].store(
                    ws.segment_tasks_per_head, std::memory_order_relaxed);
        }
        if (slices <= 1) return;
        for (int t = 0; t < tasks; ++t) {
            AttentionTask const whole = ws.tasks[static_cast<std::size_t>(t)];
            for (int s = 0; s < slices; ++s) {
                // Slice s of the group: heads [s * group / slices, (s + 1) * group / slices).
                int const first = s * local_config.group_size() / slices;
                int const end = (s + 1) * local_config.group_size() / slices;
                AttentionTask part = whole;
                part.heads = {first, end - first};
                if (s == 0) {
                    ws.tasks[static_cast<std::size_t>(t)] = part;
                } else {
                    ws.tasks.push_back(part);
                }
            }
        }
    }

    // The weights a forward pass under Precision reads: the file's layout, or (int8
    // activations) the int8 strips, repacked by prepare() or on the first such pass.
    template <class Precision>
    model::ModelWeights<Cfg> const& weights_for() const {
        if constexpr (std::same_as<Precision, kernels::Int8Activations>) {
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

}  // namespace tinfer::model
