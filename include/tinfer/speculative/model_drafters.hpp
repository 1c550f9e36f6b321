#pragma once
// Model drafters for the engine: one object serving every request, with per-request draft state
// (a ModelDrafter, whose draft model is one sequence of a paged KV cache the drafter owns).
//
//   LayerSkipDrafter<Model, k>: self-speculation. The draft model is the first k layers of the
//     target itself, then its final norm and LM head (Llama::forward(..., layers = k)); the
//     engine hands it the target through attach(). Its KV cache holds those k layers only (a
//     PagedKvCache of the target's shape cut to k layers), apart from the target's cache: the
//     verification pass writes the target's cache, the drafter's own positions never enter it.
//   DraftModelDrafter<DraftModel>: a separate draft model of any compile-time config
//     (Llama<DraftCfg>) bound to a GGUF file the drafter owns, with a paged KV cache of its
//     shape. Its vocabulary must be the target's (checked at attach, at compile time).
//
// Both satisfy SequenceDrafter: the draft state of a request is created at its first propose,
// rolled back after every verification round to exactly the tokens the sequence kept (the
// rejected drafts leave no KV behind: the cache is truncated, their blocks go back to the pool),
// and freed on release. When the draft cache cannot hold a request's next tokens (too many
// requests at once for its budget) the drafter proposes nothing for it and frees its state: the
// request decodes without drafts that step and tries again at the next.
//
// Drafting runs the draft model one token at a time per request, outside the target's pass:
// requests are not batched together in the draft model (a cost that grows with the batch).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/speculative/drafters.hpp>

namespace tinfer::spec {

// Cfg with only its first `layers` layers: the shape of a layer-skipping draft's KV cache.
template <ModelConfig Cfg, int layers>
inline constexpr ModelConfig first_layers_of = [] {
    static_assert(layers >= 1 && layers <= Cfg.layers,
                  "first_layers_of: the draft layers must be in 1 .. Cfg.layers");
    ModelConfig c = Cfg;
    c.layers = layers;
    return c;
}();

namespace detail {

// Thrown by a draft sequence whose cache has no room for its next tokens; the pool catches it.
struct DraftCacheFull {};

// The machinery both drafters share: a model (owned or the target's), a paged KV cache of
// CacheCfg's shape, a workspace, and a ModelDrafter per live request.
template <class Model, ModelConfig CacheCfg, int BlockSize>
class DraftPool {
  public:
    using Cache = kv::PagedKvCache<CacheCfg, BlockSize>;
    static constexpr int draft_layers = CacheCfg.layers;

    DraftPool(std::size_t kv_budget_bytes, int max_rows)
        : shared_(std::make_unique<Shared>(kv_budget_bytes, max_rows)) {
        if (max_rows <= 0) throw Error("draft drafter: max_rows must be positive");
    }

    void propose(DraftRequest const& request, DraftProposal& proposal) {
        proposal.clear();
        if (!shared_->model)
            throw Error(
                "draft drafter: no model attached (an engine attaches its own model to "
                "a LayerSkipDrafter; its Model type must be the engine's)");
        if (!shared_->workspace) shared_->workspace.emplace(shared_->max_rows, 1);
        auto it = drafters_.find(request.sequence_id);
        if (it == drafters_.end()) it = drafters_.try_emplace(request.sequence_id, *shared_).first;
        try {
            it->second.propose(request, proposal);
        } catch (DraftCacheFull const&) {
            proposal.clear();
            drafters_.erase(it);
            ++refused_;
        }
    }

    void rollback(std::uint64_t id, std::span<std::int32_t const> tokens) {
        auto const it = drafters_.find(id);
        if (it != drafters_.end()) it->second.rollback(tokens);
    }

    void release(std::uint64_t id) { drafters_.erase(id); }

    // Observers, for tests and benchmarks.
    Cache const& cache() const { return shared_->cache; }
    int live_sequences() const { return static_cast<int>(drafters_.size()); }
    // The tokens the draft model holds KV for, for a request (empty when it holds none).
    std::span<std::int32_t const> draft_tokens(std::uint64_t id) const {
        auto const it = drafters_.find(id);
        if (it == drafters_.end()) return {};
        return it->second.tokens_run();
    }
    // Proposals dropped because the draft cache was full.
    long refused() const { return refused_; }

    // Draft passes with int8 activations (kernels::Int8Activations) or float32 (the default).
    // The engine sets this to its own EngineOptions::int8_activations.
    void set_int8_activations(bool on) { shared_->int8_activations = on; }

  protected:
    struct Shared {
        Shared(std::size_t kv_budget_bytes, int rows) : cache(kv_budget_bytes), max_rows(rows) {}
        std::optional<gguf::File> file;  // DraftModelDrafter's: the weights are views into it
        std::optional<Model> owned;
        Model const* model = nullptr;
        Cache cache;
        int max_rows;
        std::optional<typename Model::Workspace> workspace;
        bool int8_activations = false;
    };

    // One request's draft model (a DraftModel): a sequence of the shared cache.
    class Sequence {
      public:
        explicit Sequence(Shared& shared)
            : shared_(&shared),
              seq_(shared.cache.admit(static_cast<int>(std::min<std::int64_t>(
                  Model::config.max_context, shared.cache.capacity_tokens())))) {}
        Sequence(Sequence const&) = delete;
        Sequence& operator=(Sequence const&) = delete;
        ~Sequence() { shared_->cache.release(seq_); }

        std::int32_t vocab() const { return Model::config.vocab; }

        void append(std::span<std::int32_t const> tokens, std::span<float> next_logits) {
            int const end = length_ + static_cast<int>(tokens.size());
            if (end > Model::config.max_context || !shared_->cache.reserve(seq_, end))
                throw DraftCacheFull{};
            auto& ws = *shared_->workspace;
            while (!tokens.empty()) {
                auto const n =
                    std::min<std::size_t>(tokens.size(), static_cast<std::size_t>(ws.max_tokens()));
                SequenceChunk const chunk{
                    .slot = seq_, .first_position = length_, .tokens = tokens.first(n)};
                std::span<SequenceChunk const> const chunks(&chunk, 1);
                if (shared_->int8_activations) {
                    shared_->model->template forward<kernels::Int8Activations>(
                        chunks, shared_->cache, ws, next_logits, draft_layers);
                } else {
                    shared_->model->forward(chunks, shared_->cache, ws, next_logits, draft_layers);
                }
                length_ += static_cast<int>(n);
                tokens = tokens.subspan(n);
            }
        }

        void truncate(int length) {
            shared_->cache.truncate(seq_, length);
            length_ = std::min(length_, length);
        }

      private:
        Shared* shared_;
        int seq_;
        int length_ = 0;
    };

    // Behind a pointer: the drafters' sequences point at it, and the pool moves into the engine.
    std::unique_ptr<Shared> shared_;
    std::unordered_map<std::uint64_t, ModelDrafter<Sequence>> drafters_;
    long refused_ = 0;

    void set_threads(int threads) {
        if (threads <= 0) throw Error("draft drafter: threads must be positive");
        if (!drafters_.empty())
            throw Error("draft drafter: attach before the first request, not during one");
        shared_->workspace.emplace(shared_->max_rows, threads);
    }
};

}  // namespace detail

// Self-speculation by layer skipping: the first `DraftLayers` layers of the engine's own model
// draft. `kv_budget_bytes` is the draft cache's (its blocks hold DraftLayers layers); `max_rows`
// the most tokens one draft forward runs (a longer catch-up, the prompt's first, is split).
template <class Model, int DraftLayers, int BlockSize = 16>
class LayerSkipDrafter
    : public detail::DraftPool<Model, first_layers_of<Model::config, DraftLayers>, BlockSize> {
    using Base = detail::DraftPool<Model, first_layers_of<Model::config, DraftLayers>, BlockSize>;

  public:
    static constexpr int layers = DraftLayers;

    explicit LayerSkipDrafter(std::size_t kv_budget_bytes = std::size_t{32} << 20,
                              int max_rows = 128)
        : Base(kv_budget_bytes, max_rows) {}

    // The engine's model: the drafter keeps a pointer to it (the engine outlives its drafter).
    void attach(Model const& target, int threads) {
        this->set_threads(threads);
        this->shared_->model = &target;
    }
};

// A separate draft model: DraftModel (a Llama<DraftCfg>) bound to `file`, all its layers.
template <class DraftModel, int BlockSize = 16>
class DraftModelDrafter : public detail::DraftPool<DraftModel, DraftModel::config, BlockSize> {
    using Base = detail::DraftPool<DraftModel, DraftModel::config, BlockSize>;

  public:
    explicit DraftModelDrafter(gguf::File file, std::size_t kv_budget_bytes = std::size_t{64} << 20,
                               int max_rows = 128)
        : Base(kv_budget_bytes, max_rows) {
        auto& shared = *this->shared_;
        shared.file.emplace(std::move(file));
        shared.owned.emplace(DraftModel::bind(*shared.file));
        shared.model = &*shared.owned;
    }

    // The engine calls this with its model: only the vocabulary has to agree.
    template <class Target>
    void attach(Target const&, int threads) {
        static_assert(Target::config.vocab == DraftModel::config.vocab,
                      "DraftModelDrafter: the draft model's vocab must be the target's");
        this->set_threads(threads);
    }
};

}  // namespace tinfer::spec
