#pragma once
// HostOps: the CPU's set of ops the decoder layer (model/decoder_layer.hpp) is written over.
// One object per thread of the forward pass's OpenMP team: every thread calls every op, the
// ops share their loops over the team (work-sharing constructs), and each op ends where its
// result is complete for the whole step (an implicit or explicit barrier), so the next op may
// read any row. Steps that touch shared state (cache writes, attention scores, the
// tensor-parallel all-reduce) run on one thread between barriers; their exceptions are kept in
// `failure` (a parallel region cannot throw) and the op returns false on every thread.
//
// Weight types are per matrix: each product dispatches on the matrix's own type to the kernel
// instantiated for it, once per matrix and step, never inside a kernel's loops.
//
// Dimensions reach the kernels through `Shapes` (core/extent.hpp): StaticShapes hands them as
// the shape's constants, as every model runs; DynamicShapes as run-time values from the same
// source, the whole-model twin bench/specialization times against it.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <exception>
#include <span>
#include <utility>

#include <omp.h>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/sequence_chunk.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/model/attention_scores.hpp>
#include <tinfer/model/decoder_layer.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/weights.hpp>
#include <tinfer/model/workspace.hpp>

namespace tinfer::model {

template <ModelConfig Cfg, ParallelPolicy Parallel, class Precision, class Cache,
          ShapePolicy Shapes = StaticShapes>
class HostOps {
  public:
    static constexpr ModelConfig local = Parallel::template local<Cfg>;
    using Workspace = model::Workspace<local>;
    static constexpr bool int8_precision =
        std::same_as<Precision, tinfer::kernels::Int8Activations>;
    static constexpr float norm_eps = static_cast<float>(Cfg.norm_eps);

    HostOps(Parallel const& parallel, std::span<SequenceChunk const> chunks, Cache& cache,
            Workspace& ws, int rows, float* scratch, std::exception_ptr& failure)
        : parallel_(parallel),
          chunks_(chunks),
          cache_(cache),
          ws_(ws),
          rows_(rows),
          scratch_(scratch),
          failure_(failure),
          thread_(omp_get_thread_num()) {}

    bool failed() const { return static_cast<bool>(failure_); }

    // The dimensions the ops hand to the kernels, static or dynamic as Shapes makes them.
    static auto hidden() { return Shapes::template extent<Cfg.hidden>(); }
    static auto head_dim() { return Shapes::template extent<Cfg.head_dim>(); }
    static auto heads() { return Shapes::template extent<local.heads>(); }
    static auto kv_heads() { return Shapes::template extent<local.kv_heads>(); }
    static auto q_width() { return Shapes::template extent<local.q_width()>(); }
    static auto kv_width() { return Shapes::template extent<local.kv_width()>(); }
    static auto ffn() { return Shapes::template extent<local.ffn>(); }
    static auto vocab() { return Shapes::template extent<Cfg.vocab>(); }

    // ws.normed = rmsnorm(ws.hidden) row by row, quantized too under int8 activations. A
    // one-row step (decode) has every thread normalize the row into its own copy instead, and
    // skips the barrier: one thread normalizing while the others waited took 1.1-1.4 us of
    // SmolLM2's 60 us two-thread layer, twice a layer; the copies gained 0.4-0.8% a token.
    void normalize(std::span<float const> weight) {
        auto const hidden = this->hidden();
        if (normalizes_own_copy()) {
            // ws.hidden is complete: the op that last wrote it ended with a barrier.
            float* out = ws_.normed_copy(thread_);
            kernels::rmsnorm_row(hidden, ws_.hidden.data(), weight.data(), norm_eps, out);
            if constexpr (int8_precision)
                kernels::quantize_row_int8(out, hidden, ws_.quantized_copy(thread_));
            return;
        }
#pragma omp for schedule(static)
        for (int row = 0; row < rows_; ++row) {
            float* out = ws_.normed.data() + static_cast<std::size_t>(row) * hidden;
            kernels::rmsnorm_row(hidden, ws_.hidden.data() + static_cast<std::size_t>(row) * hidden,
                                 weight.data(), norm_eps, out);
            if constexpr (int8_precision)
                kernels::quantize_row_int8(out, hidden, ws_.quantized_row(row));
        }
    }

    // q, k, v = normed . W^T for the step's rows: under int8 activations, with the three
    // matrices of one type, their strips shared over the team as one list
    // (kernels::stacked_linear_team), else matrix after matrix.
    void project_qkv(LayerWeights const& w) {
        bool stacked = false;
        if (w.q.type == w.k.type && w.k.type == w.v.type) {
            kernels::dispatch_weight_type(w.q.type, [&]<DType W>() {
                if constexpr (int8_precision && kernels::has_int8_dot(W)) {
                    kernels::StackedOutput const outputs[] = {
                        {&w.q, ws_.q.data(), static_cast<std::size_t>(q_width())},
                        {&w.k, ws_.k.data(), static_cast<std::size_t>(kv_width())},
                        {&w.v, ws_.v.data(), static_cast<std::size_t>(kv_width())}};
                    kernels::stacked_linear_team<W>(hidden(), outputs, int8_rows(), rows_,
                                                    kernels::Store::assign, scratch_);
                    stacked = true;
                }
            });
        }
        if (!stacked) {
            project(w.q, Activations::normed, ws_.q.data(), q_width(), kernels::Store::assign);
            project(w.k, Activations::normed, ws_.k.data(), kv_width(), kernels::Store::assign);
            project(w.v, Activations::normed, ws_.v.data(), kv_width(), kernels::Store::assign);
        }
#pragma omp barrier
    }

    // Per row: the biases (qkv_bias), RMSNorm over each head of Q and K (qk_norm), then RoPE
    // with the layer kind's base and the architecture's pairing. A one-row step leaves its row
    // to attend, whose one thread writes the cache: the loop here put the row on one thread too
    // and ended in a barrier, one of seven a decode layer waited at (about 1 us each on the Zen
    // 3 guest). Two threads, steps alternated token by token in one run, 30 runs of 128 tokens:
    // SmolLM2 0.995 of the time (median; the barrier it saves), Gemma 3 1.000 (its per-head
    // norms then run on the one thread too).
    template <class Plan>
    void position_queries_and_keys(LayerWeights const& w) {
        if (positions_in_attend()) {
            positioned_layer_ = &w;
            return;
        }
#pragma omp for schedule(static)
        for (int row = 0; row < rows_; ++row) position_row<Plan>(w, row);
    }

    // Asks for the cached keys and values this thread's attention tasks of `layer` will read
    // (round robin: those attend gives it), up to kv_prefetch_bytes, in a one-sequence decode
    // step (warms_attention), before the layer's Q, K and V products. Attention otherwise
    // waited on them one short run after another: SmolLM2, two threads, 128 tokens from an
    // empty cache, a thread's attention tasks took 5-6 us of a 64 us layer, 3.1-3.3 us after.
    // The prefetches themselves wait for the memory (3-6 us a layer), so a step gains less:
    // decode steps with and without, interleaved token by token in one run (Zen 4 guest;
    // SmolLM2 and Gemma 3, one and two threads): at tg128 faster in 7 of 8 pairs by up to 1.0%
    // (0.4% slower in the eighth), at tg512 by 0.6-2.5% in all 4. A hint only: a view that
    // cannot be had here (attend says why) is skipped.
    template <class Plan>
    void prefetch_attention(int layer) {
        if (!warms_attention()) return;
        auto const attention = attention_kernel<Plan>();
        TaskShare const mine = warmed_tasks();
        int budget = static_cast<int>(kv_prefetch_bytes / (2 * sizeof(float) * Cfg.head_dim));
        try {
            for (int t = mine.first; t < mine.end && budget > 0; ++t) {
                AttentionTask const task = ws_.tasks[static_cast<std::size_t>(t)];
                SequenceChunk const& chunk = chunks_[static_cast<std::size_t>(task.chunk)];
                auto const view = std::as_const(cache_).view(chunk.slot, layer);
                kernels::AttentionChunk const queries = chunk_of(chunk, task.first_row);
                budget -=
                    task.segment == AttentionTask::whole_block
                        ? attention.prefetch_block(view, task.kv_head, queries, task.block, budget)
                        : attention.prefetch_segment(view, task.kv_head, queries, task.segment,
                                                     budget);
            }
        } catch (...) {
        }
    }

    // Writes the step's keys and values into the cache, then attends: ws.attended.
    template <class Plan>
    bool attend(int layer) {
        using Attention = typename Plan::Attention;
        int const kv_width = this->kv_width();
#pragma omp single
        {
            try {
                if (positions_in_attend()) position_row<Plan>(*positioned_layer_, 0);
                for (std::size_t c = 0, row = 0; c < chunks_.size(); ++c) {
                    int const n = static_cast<int>(chunks_[c].tokens.size());
                    for (int i = 0; i < n; ++i, ++row) {
                        cache_.write(chunks_[c].slot, layer, chunks_[c].first_cache_slot + i,
                                     ws_.k.data() + row * kv_width, ws_.v.data() + row * kv_width);
                    }
                }
                for (std::size_t c = 0, row = 0; c < chunks_.size();
                     row += chunks_[c].tokens.size(), ++c) {
                    Attention::check_cached(std::as_const(cache_).view(chunks_[c].slot, layer),
                                            chunk_of(chunks_[c], row));
                }
            } catch (...) {
                failure_ = std::current_exception();
            }
        }
        if (failed()) return false;
        Cache const& cache = cache_;
        auto const attention = attention_kernel<Plan>();
        int const task_count = static_cast<int>(ws_.tasks.size());
        auto const run_task = [&](int t) {
            AttentionTask const task = ws_.tasks[static_cast<std::size_t>(t)];
            SequenceChunk const& chunk = chunks_[static_cast<std::size_t>(task.chunk)];
            kernels::AttentionChunk const queries = chunk_of(chunk, task.first_row);
            if (task.segment == AttentionTask::whole_block) {
                attention.attend_block(cache.view(chunk.slot, layer), task.kv_head, queries,
                                       task.block, scratch_, task.heads);
                return;
            }
            // Split-KV: this segment's states; the KV head's last task to finish folds them all
            // (the acquire-release count makes the others' states visible to it) and re-arms the
            // count for the next layer, which starts after the barrier that ends this loop.
            std::size_t const per_segment =
                static_cast<std::size_t>(local.group_size()) * attention.segment_state_floats();
            float* const head_states =
                ws_.segment_states.data() +
                static_cast<std::size_t>(task.kv_head) * ws_.segments * per_segment;
            attention.attend_segment(cache.view(chunk.slot, layer), task.kv_head, queries,
                                     task.segment, scratch_,
                                     head_states + task.segment * per_segment, task.heads);
            std::atomic<int>& left = ws_.segment_tasks_left[static_cast<std::size_t>(task.kv_head)];
            if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                attention.merge_segments(head_states, ws_.segments, task.kv_head, queries);
                left.store(ws_.segment_tasks_per_head, std::memory_order_relaxed);
            }
        };
        if (warms_attention()) {
            // Each thread the tasks prefetch_attention warmed on it.
            TaskShare const mine = warmed_tasks();
            for (int t = mine.first; t < mine.end; ++t) run_task(t);
#pragma omp barrier
        } else {
            // Tasks of unequal cost (query blocks further into a causal prefill, sequences of
            // different lengths in a batch): first come, first served.
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < task_count; ++t) run_task(t);
        }
        if (ws_.wants_attention_scores) {
#pragma omp single
            {
                try {
                    add_attention_scores<Plan>(layer);
                } catch (...) {
                    failure_ = std::current_exception();
                }
            }
            if (failed()) return false;
        }
        return true;
    }

    // hidden += x . W^T, or hidden += rmsnorm(x . W^T) with sandwich norms; a row-parallel
    // matrix's partial products are summed across ranks first.
    template <class Plan>
    bool add_to_residual(kernels::WeightMatrix const& w, Activations input,
                         std::span<float const> post_norm) {
        if (int8_precision && kernels::has_int8_dot(w.type)) quantize_input(input);
        auto const hidden = this->hidden();
        if constexpr (!sums_partial_products<Parallel> && !Plan::post_norms) {
            project(w, input, ws_.hidden.data(), hidden, kernels::Store::accumulate);
#pragma omp barrier
            return true;
        } else {
            project(w, input, ws_.normed.data(), hidden, kernels::Store::assign);
#pragma omp barrier
            if constexpr (sums_partial_products<Parallel>) {
#pragma omp single
                {
                    try {
                        parallel_.all_reduce_sum(
                            std::span(ws_.normed.data(), static_cast<std::size_t>(rows_) * hidden));
                    } catch (...) {
                        failure_ = std::current_exception();
                    }
                }
                if (failed()) return false;
            }
#pragma omp for schedule(static)
            for (int row = 0; row < rows_; ++row) {
                float* partial = ws_.normed.data() + static_cast<std::size_t>(row) * hidden;
                float* residual = ws_.hidden.data() + static_cast<std::size_t>(row) * hidden;
                if constexpr (Plan::post_norms)
                    kernels::rmsnorm_row(hidden, partial, post_norm.data(), norm_eps, partial);
                add_vector(residual, partial, hidden);
            }
            (void)post_norm;
            return true;
        }
    }

    // ws.gate = act(normed . G^T) * (normed . U^T): one fused kernel where both matrices share
    // a type, else two products and the activation.
    template <class Plan>
    void gated_ffn(kernels::WeightMatrix const& gate, kernels::WeightMatrix const& up) {
        using Gate = typename Plan::Gate;
        int const ffn = this->ffn();
        // The input width: static on the int8 strips (under StaticShapes), whose static form
        // measured 1.07-1.08x at SmolLM2's 128-token prefill on the AMD machine (0.93-1.01x on
        // the Intel one); at run time on the float rows, 1.01-1.05x AMD, 1.04-1.10x Intel at
        // 128 tokens (bench/specialization, docs/specialization.md).
        if (gate.type == up.type) {
            kernels::dispatch_weight_type(gate.type, [&]<DType W>() {
                if constexpr (int8_precision && kernels::has_int8_dot(W)) {
                    kernels::gated_linear_team<W, kernels::Isa::native, Gate>(
                        hidden(), gate, up, int8_rows(), rows_, ws_.gate.data(), ffn, scratch_);
                } else {
                    kernels::gated_linear_team<W, kernels::Isa::native, Gate>(
                        gate, up,
                        kernels::FloatRows{normed_rows(), static_cast<std::size_t>(hidden())},
                        rows_, ws_.gate.data(), ffn, scratch_);
                }
            });
#pragma omp barrier
        } else {
            project(gate, Activations::normed, ws_.gate.data(), ffn, kernels::Store::assign);
            project(up, Activations::normed, ws_.up.data(), ffn, kernels::Store::assign);
#pragma omp barrier
            std::size_t const n = static_cast<std::size_t>(rows_) * ffn;
#pragma omp for simd schedule(static)
            for (std::size_t i = 0; i < n; ++i) ws_.gate[i] = Gate::apply(ws_.gate[i]) * ws_.up[i];
        }
    }

    // The final norm, the LM head and soft-capping, for the rows that produce logits only.
    void logits(ModelWeights<Cfg> const& weights, int out_rows, std::span<float> logits) {
        kernels::WeightMatrix const& head = weights.output;
        bool const quantized = int8_precision && kernels::has_int8_dot(head.type);
        auto const hidden = this->hidden();
        int const vocab = this->vocab();
#pragma omp for schedule(static)
        for (int i = 0; i < out_rows; ++i) {
            float* out = ws_.normed.data() + static_cast<std::size_t>(i) * hidden;
            kernels::rmsnorm_row(
                hidden, ws_.hidden.data() + static_cast<std::size_t>(ws_.logit_rows[i]) * hidden,
                weights.output_norm.data(), norm_eps, out);
            if (quantized) kernels::quantize_row_int8(out, hidden, ws_.quantized_row(i));
        }
        kernels::dispatch_weight_type(head.type, [&]<DType W>() {
            if constexpr (int8_precision && kernels::has_int8_dot(W)) {
                kernels::linear_team<W>(head, ws_.quantized_rows(), out_rows, logits.data(), vocab,
                                        kernels::Store::assign, scratch_);
            } else {
                kernels::linear_team<W>(
                    head, kernels::FloatRows{ws_.normed.data(), static_cast<std::size_t>(hidden)},
                    out_rows, logits.data(), vocab, kernels::Store::assign, scratch_);
            }
        });
        if constexpr (Cfg.arch.final_logit_softcap > 0) {
            constexpr float cap = static_cast<float>(Cfg.arch.final_logit_softcap);
#pragma omp barrier
            std::size_t const n = static_cast<std::size_t>(out_rows) * vocab;
#pragma omp for schedule(static)
            for (std::size_t i = 0; i < n; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
        }
    }

  private:
    // A thread's most prefetched KV bytes per layer: a quarter of a 1 MiB L2 (Zen 4; Intel's
    // since Ice Lake hold 1.25-2 MiB), so they stay there while the Q, K and V products (0.35 MB
    // SmolLM2, 0.68 MB Gemma 3 270M) stream past; past it the hardware prefetchers follow on.
    static constexpr std::size_t kv_prefetch_bytes = std::size_t{256} << 10;

    // Plan::Attention's kernel under StaticShapes; its dynamic twin's blocks, tiles and scratch
    // are the same sizes (the same formulas of the same values), so the tasks and the workspace
    // planned from Plan::Attention serve both.
    template <class Plan>
    static auto attention_kernel() {
        return kernels::AttentionKernel(head_dim(), Shapes::template extent<local.group_size()>(),
                                        Shapes::template extent<Plan::window>(),
                                        Shapes::template extent<local.query_scale_dim()>());
    }

    // Whether this step warms its attention's keys and values (prefetch_attention): a decode
    // step of one sequence, the latency path. A batched decode step's threads read long runs
    // of many sequences, which the hardware prefetchers stream once started, so warming a part
    // of them only put a wait in front (interleaved step by step, batched_bench at B = 4, 16,
    // 32: 0.2-1.2% slower in 5 of 6); and its tasks differ in length under continuous batching,
    // which first come, first served balances.
    bool warms_attention() const {
        return rows_ == 1 && chunks_.size() == 1;
    }
    // Such a step's attention tasks on this thread: a contiguous share, so that a thread given
    // several segments of a KV head (split-KV) reads one run of keys, which the hardware
    // prefetchers follow, rather than every other segment (SmolLM2 at tg1024 was 4% slower
    // split than whole, round robin).
    struct TaskShare {
        int first, end;
    };
    TaskShare warmed_tasks() const {
        int const tasks = static_cast<int>(ws_.tasks.size());
        int const me = omp_get_thread_num(), team = omp_get_num_threads();
        return {me * tasks / team, (me + 1) * tasks / team};
    }

    // Whether a one-row step's RoPE waits for attend (position_queries_and_keys).
    bool positions_in_attend() const {
        return rows_ == 1;
    }
    template <class Plan>
    void position_row(LayerWeights const& w, int row) {
        int const q_width = this->q_width(), kv_width = this->kv_width();
        auto const head_dim = this->head_dim();
        auto const heads = this->heads(), kv_heads = this->kv_heads();
        float* q = ws_.q.data() + static_cast<std::size_t>(row) * q_width;
        float* k = ws_.k.data() + static_cast<std::size_t>(row) * kv_width;
        if constexpr (Plan::qkv_bias) {
            float* v = ws_.v.data() + static_cast<std::size_t>(row) * kv_width;
            add_vector(q, w.q_bias.data(), q_width);
            add_vector(k, w.k_bias.data(), kv_width);
            add_vector(v, w.v_bias.data(), kv_width);
        }
        if constexpr (Plan::qk_norm) {
            for (int h = 0; h < heads; ++h)
                kernels::rmsnorm_row(head_dim, q + h * head_dim, w.q_norm.data(), norm_eps,
                                     q + h * head_dim);
            for (int h = 0; h < kv_heads; ++h)
                kernels::rmsnorm_row(head_dim, k + h * head_dim, w.k_norm.data(), norm_eps,
                                     k + h * head_dim);
        }
        float const* table = rope_table<Plan>() + static_cast<std::size_t>(row) * head_dim;
        kernels::apply_rope_row<Plan::rope_pairing>(head_dim, q, heads, table);
        kernels::apply_rope_row<Plan::rope_pairing>(head_dim, k, kv_heads, table);
    }

    // Whether normalize writes this thread's own copy of the row (a one-row step) rather than
    // the workspace's shared rows; the products that read the normed rows read the same place.
    bool normalizes_own_copy() const {
        return rows_ == 1;
    }
    float const* normed_rows() const {
        return normalizes_own_copy() ? ws_.normed_copy(thread_) : ws_.normed.data();
    }
    // The int8 rows a product reads, whichever input: this thread's copy in a one-row step
    // (normalize and quantize_input write it), else the workspace's rows.
    kernels::Int8Rows int8_rows() const {
        return normalizes_own_copy()
                   ? kernels::Int8Rows{ws_.quantized_copy(thread_), ws_.quantized_stride}
                   : ws_.quantized_rows();
    }

    // The rows a product reads, float or (int8 precision, int8-capable matrix) quantized.
    std::pair<float const*, int> input_of(Activations input) const {
        switch (input) {
            case Activations::normed:
                return {normed_rows(), hidden()};
            case Activations::attended:
                return {ws_.attended.data(), q_width()};
            case Activations::ffn_hidden:
                return {ws_.gate.data(), ffn()};
        }
        return {nullptr, 0};
    }

    // The int8 rows of an input that is not the normed residual (normalize quantizes that). A
    // one-row step has every thread quantize the row into its own copy, as normalize does, and
    // skips the barrier: one thread quantizing while the others waited at the loop's end cost
    // the attention output and the FFN's hidden row a barrier each a layer.
    void quantize_input(Activations input) {
        auto const [x, width] = input_of(input);
        if (normalizes_own_copy()) {
            // The input is complete: the op that wrote it (attend, gated_ffn) ended with a barrier.
            kernels::quantize_row_int8(x, width, ws_.quantized_copy(thread_));
            return;
        }
#pragma omp for schedule(static)
        for (int row = 0; row < rows_; ++row)
            kernels::quantize_row_int8(x + static_cast<std::size_t>(row) * width, width,
                                       ws_.quantized_row(row));
    }

    // y = x . W^T (or +=) over the team with the kernel of W's own type; no barrier. The input
    // width at run time: the static form measured 1.00-1.04x on the int8 strips (the default
    // precision) on both machines; on the float rows 0.96-1.04x (AMD) but 1.09-1.11x at 128
    // tokens (Intel), left dynamic: three widths per weight type (docs/specialization.md).
    void project(kernels::WeightMatrix const& w, Activations input, float* y, std::size_t y_stride,
                 kernels::Store store) {
        auto const [x, width] = input_of(input);
        kernels::dispatch_weight_type(w.type, [&]<DType W>() {
            if constexpr (int8_precision && kernels::has_int8_dot(W)) {
                kernels::linear_team<W>(w, int8_rows(), rows_, y, y_stride, store, scratch_);
            } else {
                kernels::linear_team<W>(w, kernels::FloatRows{x, static_cast<std::size_t>(width)},
                                        rows_, y, y_stride, store, scratch_);
            }
        });
    }

    static void add_vector(float* x, float const* addend, int n) {
#pragma omp simd
        for (int i = 0; i < n; ++i) x[i] += addend[i];
    }

    template <class Plan>
    float const* rope_table() const {
        if constexpr (Plan::kind == LayerKind::sliding && has_sliding_rope_table<local>) {
            return ws_.rope_sliding.data();
        } else {
            return ws_.rope.data();
        }
    }

    // Adds the attention probabilities of `layer` of the chunks that ask for them.
    template <class Plan>
    void add_attention_scores(int layer) {
        Cache const& cache = cache_;
        for (std::size_t c = 0, row = 0; c < chunks_.size(); row += chunks_[c].tokens.size(), ++c) {
            if (chunks_[c].attention_scores.empty()) continue;
            add_attention_probabilities<Cfg.head_dim, Cfg.group_size(), Plan::window,
                                        Cfg.query_scale_dim()>(
                cache.view(chunks_[c].slot, layer), local.kv_heads, chunk_of(chunks_[c], row),
                chunks_[c].attention_scores);
        }
    }

    // Attention masks by cache slot: a query sees the slots up to its own.
    kernels::AttentionChunk chunk_of(SequenceChunk const& chunk, std::size_t row) const {
        std::size_t const q_width = static_cast<int>(this->q_width());
        return {chunk.first_cache_slot,
                static_cast<int>(chunk.tokens.size()),
                ws_.q.data() + row * q_width,
                q_width,
                ws_.attended.data() + row * q_width,
                q_width};
    }

    Parallel const& parallel_;
    std::span<SequenceChunk const> chunks_;
    Cache& cache_;
    Workspace& ws_;
    int rows_;
    float* scratch_;
    std::exception_ptr& failure_;
    int thread_;
    LayerWeights const* positioned_layer_ = nullptr;  // the layer whose row attend positions
};

}  // namespace tinfer::model
