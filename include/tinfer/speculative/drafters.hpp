#pragma once
// Drafters: where speculative decoding's proposed tokens come from.
//
// A drafter is a policy type satisfying `Drafter`: given a sequence and at most gamma, it fills
// a DraftProposal with up to gamma tokens, each with the distribution it was drawn from
// (speculative.hpp verifies them). Two families:
//   PromptLookupDrafter<max_ngram, min_ngram>: copies what followed an earlier occurrence of the
//     sequence's last n tokens (vLLM's "ngram" proposer, llama.cpp's lookup decoding). No model,
//     deterministic (each q a point mass); it pays off on inputs that repeat their context
//     (code editing, summaries, retrieval answers).
//   ModelDrafter<Model>: runs a small model autoregressively. `Model` only has to satisfy
//     DraftModel: extend the sequence by some tokens and return the logits of the next position,
//     and forget tokens past a length. Both usual sources fit behind it:
//       - a separate draft model of any compile-time config: Llama<DraftCfg> with a KV slot of
//         its own; append = one forward of the chunk {slot, first_position = length, tokens},
//         truncate = its cache's truncate(slot, length);
//       - self-speculation by layer skipping: the first k layers of the target itself, then its
//         final norm and LM head, with a KV store for those k layers only (the verification
//         pass writes the full model's cache separately).
//
// One ModelDrafter belongs to one sequence (it holds that sequence's draft KV state);
// PromptLookupDrafter holds nothing and serves any number of sequences.
//
// In the engine one drafter object serves every request. A drafter that keeps state per
// sequence (model_drafters.hpp: LayerSkipDrafter, DraftModelDrafter, a ModelDrafter per
// request) satisfies SequenceDrafter as well: the engine names each request by
// DraftRequest::sequence_id, tells it after every verification round which tokens the sequence
// kept (rollback: the draft state must drop everything past them), and when the sequence ends,
// is aborted or preempted (release: the state goes). A drafter that needs the target model
// (self-speculation) also has attach(target, threads), which the engine calls once, before any
// propose, with its own model.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/speculative/speculative.hpp>

namespace tinfer::spec {

// What a drafter is asked for: up to max_drafts tokens continuing `sequence`, drawn (where the
// drafter samples) under `params` at the stream positions of SpeculativeDraw::draft.
struct DraftRequest {
    SequenceView sequence;
    int max_drafts = 0;  // gamma
    kernels::SamplingParams const& params;
    // Who the sequence is, for drafters that keep state per sequence: the engine's request id.
    // Not a random stream's id (the draws use sequence.request_id).
    std::uint64_t sequence_id = 0;
};

template <class D>
concept Drafter = requires(D& drafter, DraftRequest const& request, DraftProposal& proposal) {
    { drafter.propose(request, proposal) } -> std::same_as<void>;
};

// A drafter with per-sequence state, and its lifecycle hooks:
//   rollback(id, tokens): after a verification round, `tokens` is the whole sequence as kept
//     (prompt, generated, the round's kept tokens); the draft state must keep nothing past the
//     longest prefix of it that it has run (the rejected drafts go);
//   release(id): the sequence ended, was aborted or preempted; an unknown id is ignored.
template <class D>
concept SequenceDrafter = Drafter<D> &&
    requires(D& drafter, std::uint64_t id, std::span<std::int32_t const> tokens) {
    drafter.rollback(id, tokens);
    drafter.release(id);
};

// A drafter that drafts with (part of) the target model: the engine calls attach once with its
// model and thread count before the first propose.
template <class D, class Model>
concept TargetAttachedDrafter = requires(D& drafter, Model const& target, int threads) {
    drafter.attach(target, threads);
};

// Prompt lookup. Searches the sequence for an earlier occurrence of its last n tokens, from
// n = max_ngram down to min_ngram, and takes the most recent occurrence of the longest n that
// occurs (recent text predicts the continuation best); the draft is what followed it. When the
// continuation runs into the end of the sequence, the draft keeps reading its own proposed
// tokens, i.e. it extends the repetition the match implies (after "a b c a b" with match "a b"
// at 0 it proposes "c a b c ..."), instead of stopping short.
// Cost: O(length * n) per n tried, no state, no allocation.
template <int max_ngram, int min_ngram = 1>
class PromptLookupDrafter {
    static_assert(min_ngram >= 1, "PromptLookupDrafter: min_ngram must be at least 1");
    static_assert(max_ngram >= min_ngram,
                  "PromptLookupDrafter: max_ngram must be at least min_ngram");

  public:
    static constexpr int longest_ngram = max_ngram;
    static constexpr int shortest_ngram = min_ngram;

    void propose(DraftRequest const& request, DraftProposal& proposal) const {
        proposal.clear();
        std::span<std::int32_t const> const tokens = request.sequence.tokens;
        std::size_t const length = tokens.size();
        if (request.max_drafts <= 0) return;
        for (int n = max_ngram; n >= min_ngram; --n) {
            auto const ngram = static_cast<std::size_t>(n);
            // An earlier occurrence needs at least one token after it, besides the suffix itself.
            if (length < ngram + 1) continue;
            std::span<std::int32_t const> const suffix = tokens.last(ngram);
            for (std::size_t start = length - ngram; start-- > 0;) {
                if (!std::ranges::equal(tokens.subspan(start, ngram), suffix)) continue;
                std::size_t const source = start + ngram;  // where the continuation starts
                for (int i = 0; i < request.max_drafts; ++i) {
                    std::size_t const at = source + static_cast<std::size_t>(i);
                    proposal.add(at < length ? tokens[at] : proposal.tokens()[at - length]);
                }
                return;
            }
        }
    }
};

// The draft model interface. `append` runs `tokens` at positions length() .. and writes the
// logits of the position after the last into `next_logits` ([vocab]); `truncate(length)` forgets
// every position from `length` on.
template <class M>
concept DraftModel = requires(M& model, M const& view, std::span<std::int32_t const> tokens,
                              std::span<float> next_logits, int length) {
    { view.vocab() } -> std::convertible_to<std::int32_t>;
    model.append(tokens, next_logits);
    model.truncate(length);
};

// Drafts autoregressively with a DraftModel: at temperature 0 each draft is the draft model's
// greedy token (q a point mass); otherwise it is drawn from the draft model's distribution
// filtered by the request's own settings (penalties on the same history, temperature, top-k,
// top-p, min-p), which is q. Before drafting it brings the model in line with the sequence:
// it keeps the longest prefix the model has already run (so rejected drafts are dropped and
// accepted ones not run again) and runs the rest in one append. The last draft is not run: it
// is run next round only if it was accepted.
template <DraftModel Model>
class ModelDrafter {
  public:
    template <class... Args>
    explicit ModelDrafter(Args&&... args)
        : model_(std::forward<Args>(args)...),
          logits_(static_cast<std::size_t>(vocab())),
          weights_(static_cast<std::size_t>(vocab())),
          sampling_(vocab()) {}

    std::int32_t vocab() const { return static_cast<std::int32_t>(model_.vocab()); }
    Model& model() { return model_; }
    Model const& model() const { return model_; }
    // The tokens the draft model holds state for.
    std::span<std::int32_t const> tokens_run() const { return run_; }

    // Starts over, for a new sequence.
    void reset() {
        model_.truncate(0);
        run_.clear();
    }

    // The sequence now reads `tokens` (a verification round kept some drafts and rejected the
    // rest): the draft model forgets every position past the longest prefix of `tokens` it has
    // run, so it holds exactly the accepted tokens it has seen and nothing rejected.
    void rollback(std::span<std::int32_t const> tokens) {
        auto const common =
            static_cast<std::size_t>(std::ranges::mismatch(run_, tokens).in1 - run_.begin());
        if (common == run_.size()) return;
        model_.truncate(static_cast<int>(common));
        run_.resize(common);
    }

    void propose(DraftRequest const& request, DraftProposal& proposal) {
        proposal.clear();
        std::span<std::int32_t const> const tokens = request.sequence.tokens;
        if (request.max_drafts <= 0 || tokens.empty()) return;

        auto const common =
            static_cast<std::size_t>(std::ranges::mismatch(run_, tokens).in1 - run_.begin());
        // The logits after the last token are needed again: run it again.
        std::size_t const keep = common == tokens.size() ? common - 1 : common;
        if (keep < run_.size()) {
            model_.truncate(static_cast<int>(keep));
            run_.resize(keep);
        }
        run(tokens.subspan(keep));

        auto const generated = request.sequence.generated();
        output_.assign(generated.begin(), generated.end());
        std::uint32_t const first_step = request.sequence.next_step();
        kernels::SamplingParams const& params = request.params;
        for (int i = 0; i < request.max_drafts; ++i) {
            kernels::TokenHistory const history{request.sequence.prompt(), output_};
            FilteredWeights const q =
                filtered_weights(logits_, params, history, sampling_, weights_);
            std::int32_t token = q.best;
            if (params.temperature == 0) {
                proposal.add(token);
            } else {
                double const u = speculative_uniform(params, request.sequence.request_id,
                                                     first_step + static_cast<std::uint32_t>(i),
                                                     SpeculativeDraw::draft);
                token = draw_by_weight(
                    vocab(), [&](std::int32_t t) { return weights_[static_cast<std::size_t>(t)]; },
                    q.total, u);
                proposal.add(token, weights_, q.total);
            }
            if (i + 1 == request.max_drafts) break;
            std::int32_t const next[] = {token};
            run(next);
            output_.push_back(token);
        }
    }

  private:
    void run(std::span<std::int32_t const> tokens) {
        model_.append(tokens, std::span<float>(logits_));
        run_.insert(run_.end(), tokens.begin(), tokens.end());
    }

    Model model_;
    std::vector<std::int32_t> run_;  // tokens the model holds state for
    std::vector<float> logits_;      // [vocab] the model's next-position logits
    std::vector<double> weights_;    // [vocab] q
    kernels::SamplingWorkspace sampling_;
    std::vector<std::int32_t> output_;  // generated tokens then drafts: penalty history
};

}  // namespace tinfer::spec
