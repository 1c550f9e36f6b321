#pragma once
// Pipeline parallelism: the decoder layers cut into `Stages` contiguous stages of equal size, one
// per process. Stage s computes layers [s * L/S, (s+1) * L/S) and holds only those layers' KV
// cache (its local shape has L/S layers); stage 0 also embeds the tokens, the last stage applies
// the final norm and the LM head. Between stages only the residual stream crosses: `hidden`
// floats per token.
//
// Every rank runs its own Engine in lockstep, as under tensor parallelism: the same requests
// submitted in the same order, so every rank's scheduler and KV lifecycle make the same
// decisions and every rank's block tables name the same blocks, each rank's blocks holding its
// own layers. That is why fork, copy-on-write, preemption, swapping, prefix caching and
// truncation need nothing forwarded: each rank applies them to its own layers. Only the forward
// pass talks: stage s receives a micro-batch's hidden states from s-1, runs its layers, sends
// them to s+1; the last stage sends every rank the step's logits, so every rank samples the same
// tokens.
//
// Micro-batches: the step's rows are cut into up to `micro_batches` contiguous ranges (a chunk
// may be cut between micro-batches: its pieces run in order on every stage, so each piece finds
// the previous piece's KV, as chunked prefill does). Stage 0 computes micro-batch i+1 while stage
// 1 computes micro-batch i. With M micro-batches and S stages a step leaves each stage idle
// (S-1)/(M+S-1) of the time (distributed/scale_out_arithmetic.hpp); more micro-batches shrink
// the bubble but read every weight once per micro-batch.
//
// Not supported under a pipeline (a RequestError names it): forward over fewer than all layers
// (self-speculative drafting with the target's first layers) and attention-score accumulation
// (H2O-style eviction; each stage would only see its own layers' scores).
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/communicator.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/sequence_chunk.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::model {

// Named for the static_assert messages: the failing instantiation shows both values.
template <int Stages, int Layers>
inline constexpr bool stages_divide_layers = Stages >= 1 && Layers % Stages == 0;
// Every stage's layers must repeat stage 0's pattern of layer kinds, so one local shape (and one
// KV cache layout) serves every stage: with sliding layers, a stage's size must be a multiple of
// the period of global layers (Gemma 3: every 6th layer is global).
template <ModelConfig Cfg, int Stages>
constexpr bool layer_kinds_repeat_per_stage() {
    if (Stages < 1 || Cfg.layers % Stages != 0) return false;
    int const per_stage = Cfg.layers / Stages;
    for (int layer = 0; layer < Cfg.layers; ++layer)
        if (Cfg.layer_kind(layer) != Cfg.layer_kind(layer % per_stage)) return false;
    return true;
}

// Whether PipelineStages<Cfg, Stages> exists, for code choosing a stage count at run time.
template <ModelConfig Cfg, int Stages>
constexpr bool pipeline_fits() {
    return stages_divide_layers<Stages, Cfg.layers> && layer_kinds_repeat_per_stage<Cfg, Stages>();
}

// The layer arithmetic of a pipeline of Stages over Cfg.
template <ModelConfig Cfg, int Stages>
struct PipelineStages {
    static_assert(stages_divide_layers<Stages, Cfg.layers>,
                  "PipelineParallel: Stages must divide ModelConfig.layers (equal contiguous "
                  "stages)");
    static_assert(layer_kinds_repeat_per_stage<Cfg, Stages>(),
                  "PipelineParallel: every stage must repeat the first stage's layer kinds "
                  "(ModelConfig.layers / Stages a multiple of arch.global_every)");
    static constexpr int layers_per_stage = Cfg.layers / Stages;
    // One stage's shape: its layers only (its KV cache holds those), all else the model's.
    static constexpr ModelConfig local = [] {
        ModelConfig c = Cfg;
        c.layers = layers_per_stage;
        return c;
    }();
    static constexpr IndexRange layers_of(int stage) {
        return {stage * layers_per_stage, layers_per_stage};
    }
};

// One micro-batch of a step: pieces of the step's chunks, and for each logit row the pieces give
// (in order), the row of the step's logits it is, or -1 where the piece ends inside its chunk
// (a row the step does not want).
struct MicroBatch {
    std::vector<SequenceChunk> chunks;
    std::vector<int> step_logit_row;
};

// Cuts the step's rows into min(count, rows) contiguous ranges of rows/count (rounded) each.
inline std::vector<MicroBatch> split_into_micro_batches(std::span<SequenceChunk const> chunks,
                                                        int count) {
    if (count < 1) throw Error("split_into_micro_batches: count must be positive");
    std::size_t rows = 0;
    for (SequenceChunk const& c : chunks) rows += c.tokens.size();
    std::size_t const batches = std::min<std::size_t>(static_cast<std::size_t>(count), rows);
    std::vector<MicroBatch> out(batches);
    std::size_t chunk = 0, offset = 0;  // the next row: chunk's token `offset`
    int step_row = 0;                   // the step's logit row of chunk's first logit
    for (std::size_t b = 0; b < batches; ++b) {
        std::size_t const end = rows * (b + 1) / batches, begin = rows * b / batches;
        for (std::size_t left = end - begin; left > 0;) {
            SequenceChunk const& c = chunks[chunk];
            std::size_t const n = std::min(left, c.tokens.size() - offset);
            int const shift = static_cast<int>(offset);
            out[b].chunks.push_back({.slot = c.slot,
                                     .first_position = c.first_position + shift,
                                     .tokens = c.tokens.subspan(offset, n),
                                     .all_logits = c.all_logits,
                                     .first_cache_slot = c.first_cache_slot + shift});
            bool const ends_chunk = offset + n == c.tokens.size();
            if (c.all_logits) {
                for (std::size_t i = 0; i < n; ++i)
                    out[b].step_logit_row.push_back(step_row + shift + static_cast<int>(i));
            } else {
                out[b].step_logit_row.push_back(ends_chunk ? step_row : -1);
            }
            left -= n;
            offset += n;
            if (ends_chunk) {
                step_row += c.all_logits ? static_cast<int>(c.tokens.size()) : 1;
                ++chunk;
                offset = 0;
            }
        }
    }
    return out;
}

// Pipeline parallelism over `Stages` ranks of the communicator `Comm` (MpiCommunicator for host
// memory); rank r is stage r. The communicator must outlive the model.
template <int Stages, Communicator Comm>
class PipelineParallel {
  public:
    static constexpr int degree = Stages;
    static constexpr int pipeline_stages = Stages;
    template <ModelConfig Cfg>
    static constexpr ModelConfig local = PipelineStages<Cfg, Stages>::local;

    // micro_batches: how many pieces a step's rows are cut into (at most; never more than rows).
    explicit PipelineParallel(Comm& comm, int micro_batches = Stages)
        : comm_(&comm), micro_batches_(micro_batches) {
        if (comm.size() != Stages) {
            throw Error("PipelineParallel<" + std::to_string(Stages) + ">: the communicator has " +
                        std::to_string(comm.size()) + " ranks");
        }
        if (micro_batches < 1)
            throw Error("PipelineParallel: micro_batches must be positive, got " +
                        std::to_string(micro_batches));
    }

    int rank() const { return comm_->rank(); }
    int stage() const { return comm_->rank(); }
    bool first_stage() const { return stage() == 0; }
    bool last_stage() const { return stage() == Stages - 1; }
    int micro_batches() const { return micro_batches_; }

    // A stage computes whole layers: nothing to sum across ranks.
    static constexpr void all_reduce_sum(std::span<float>) {}
    // Forgets the other stages' layers (and, but on the last stage, the LM head), so nothing
    // reads or repacks them (int8 activations repack the matrices a model holds): the mapping
    // of a layer no stage here reads is never paged in. Nothing is copied.
    template <ModelConfig Cfg>
    ShardStorage shard(ModelWeights<Cfg>& weights) const {
        IndexRange const mine = PipelineStages<Cfg, Stages>::layers_of(stage());
        for (int layer = 0; layer < Cfg.layers; ++layer)
            if (layer < mine.first || layer >= mine.end())
                weights.layers[static_cast<std::size_t>(layer)] = LayerWeights{};
        if (!last_stage()) weights.output = {};
        return {};
    }

    void send_to_next_stage(std::span<float const> hidden) const {
        comm_->send(std::as_bytes(hidden), stage() + 1, hidden_tag);
    }
    void receive_from_previous_stage(std::span<float> hidden) const {
        comm_->recv(std::as_writable_bytes(hidden), stage() - 1, hidden_tag);
    }
    // The last stage's logits to every other stage.
    void share_logits(std::span<float> logits) const {
        if (last_stage()) {
            for (int to = 0; to < Stages - 1; ++to)
                comm_->send(std::as_bytes(logits), to, logits_tag);
        } else {
            comm_->recv(std::as_writable_bytes(logits), Stages - 1, logits_tag);
        }
    }

  private:
    static constexpr int hidden_tag = 0x5050;
    static constexpr int logits_tag = 0x5051;
    Comm* comm_;
    int micro_batches_;
};

static_assert(ParallelPolicy<PipelineParallel<1, SingleProcess>>);

}  // namespace tinfer::model
