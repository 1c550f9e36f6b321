#pragma once
// Speculative decoding: checking a drafter's proposed tokens against the target model.
//
// One round, for a sequence of L tokens (prompt + generated) whose KV cache holds the first
// L - 1 (the last sampled token has not been run yet):
//   1. a drafter proposes n <= gamma tokens d_0 .. d_{n-1} (drafters.hpp), each with the
//      distribution q_i it was drawn from (a point mass for deterministic drafters);
//   2. the target runs [token L-1, d_0, ..., d_{n-1}] at positions L-1 .. L-1+n in one forward
//      pass with all_logits, giving n + 1 rows: row i is the target's view of position L + i;
//   3. verify_drafts() keeps a prefix d_0 .. d_{a-1} and adds one token of the target's own
//      (the correction at the first rejection, or a bonus token when all n are accepted), so a
//      round appends a + 1 tokens, 1 <= a + 1 <= n + 1;
//   4. the caller truncates the target's KV cache to kv_length_after_round(L, verdict) = L + a
//      positions: the old last token and the a accepted drafts stay, the rejected drafts go, and
//      the new last token (not yet run) keeps the invariant "the cache holds all but the last".
//
// The rule (Leviathan, Kalman, Matias 2023; Chen et al. 2023). With p_i the target's filtered
// distribution at draft position i (sampling.hpp's penalties, bias, temperature, top-k, top-p,
// min-p, with the accepted drafts counted as generated output):
//   greedy (temperature 0): accept d_i while it equals the argmax of p_i; the next token is the
//     argmax at the first mismatch (or at position n). The output is exactly greedy decoding's.
//   sampling: accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection
//     draw from norm(max(0, p_i - q_i)) and stop; if all n are accepted draw a bonus token from
//     p_n. Every token so produced is distributed exactly as if sampled from the target alone,
//     whatever q is, as long as d_i really was drawn from q_i.
//
// Stream discipline. A draw that concerns the token which becomes the request's t-th generated
// token (t counted from 0, the `step` of sample_token) sits at RngPosition{seed, request id,
// step = t, draw_index}, with one index per role (SpeculativeDraw below):
//   target_token = 0: the token drawn from the target (residual or bonus). It is the index
//     sample_token uses, so a round with no drafts draws exactly the token sample_token would;
//   acceptance = 1: the uniform deciding whether draft t is accepted;
//   draft = 2: the drafter's own draw of draft t.
// Each token position is decided exactly once (accepted, corrected or bonus), so no acceptance
// or target draw is ever used twice. A draft draw can be reused: drafts past a rejection are
// discarded and the next round drafts that position again with the same numbers; that is
// harmless because a discarded draft never influenced a kept token. Tokens therefore depend
// only on the seed, the request id, the logits and the drafts, never on the batch or on how
// many rounds came before.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/philox.hpp>
#include <tinfer/kernels/sampling.hpp>

namespace tinfer::spec {

// The draw index of each role within a token's step; see the stream discipline above.
enum class SpeculativeDraw : std::uint32_t { target_token = 0, acceptance = 1, draft = 2 };

// One sequence as drafters and the verifier see it: prompt, then the tokens generated so far.
struct SequenceView {
    std::span<std::int32_t const> tokens;
    std::size_t prompt_length = 0;
    std::uint64_t request_id = 0;

    std::span<std::int32_t const> prompt() const { return tokens.first(prompt_length); }
    std::span<std::int32_t const> generated() const { return tokens.subspan(prompt_length); }
    // The step of the next token to be generated: how many have been generated before it.
    std::uint32_t next_step() const {
        return static_cast<std::uint32_t>(tokens.size() - prompt_length);
    }
};

// The uniform in [0, 1) for one role at one token step.
inline double speculative_uniform(kernels::SamplingParams const& params, std::uint64_t request_id,
                                  std::uint32_t step, SpeculativeDraw role) {
    PhiloxCounter const bits = philox_draw({.seed = params.seed,
                                            .request_id = request_id,
                                            .step = step,
                                            .draw_index = static_cast<std::uint32_t>(role)});
    return uniform_double(bits.words[0], bits.words[1]);
}

// A distribution over the vocabulary as non-negative weights and their sum, as sample_token
// forms it: probability(token) = weights[token] / total.
struct FilteredWeights {
    double total = 0;
    std::int32_t best = -1;  // the most likely token (ties to the lower id): the greedy choice
};

// Writes into `weights` ([vocab]) the distribution sample_token draws from for these logits,
// settings and history: zero outside the filtered set, exp((logit - max) / temperature) inside
// (bitwise the float weights sample_token uses, so a draw from them with the same uniform picks
// the same token). Temperature 0 gives the point mass on the greedy token.
inline FilteredWeights filtered_weights(std::span<float const> logits,
                                        kernels::SamplingParams const& params,
                                        kernels::TokenHistory history,
                                        kernels::SamplingWorkspace& workspace,
                                        std::span<double> weights) {
    std::int32_t const vocab = workspace.vocab();
    if (logits.size() != workspace.logits.size() || weights.size() != logits.size())
        throw Error("filtered_weights: logits has " + std::to_string(logits.size()) +
                    " entries and weights " + std::to_string(weights.size()) +
                    "; the workspace was made for vocab " + std::to_string(vocab));
    kernels::validate(params, vocab);
    constexpr float negative_infinity = -std::numeric_limits<float>::infinity();
    for (std::int32_t token = 0; token < vocab; ++token) {
        float const logit = logits[token];
        if (std::isnan(logit) || logit == std::numeric_limits<float>::infinity())
            throw Error("filtered_weights: logit of token " + std::to_string(token) +
                        " is NaN or +inf");
    }

    std::span<float> const processed(workspace.logits);
    std::ranges::copy(logits, processed.begin());
    kernels::apply_penalties_and_bias(processed, params, history, workspace);
    std::int32_t best = -1;
    for (std::int32_t token = 0; token < vocab; ++token)
        if (processed[token] > (best < 0 ? negative_infinity : processed[best])) best = token;
    if (best < 0)
        throw RequestError(
            "every token's logit is -inf after penalties and logit bias: "
            "nothing can be sampled");

    std::ranges::fill(weights, 0.0);
    if (params.temperature == 0) {
        weights[best] = 1;
        return {1, best};
    }

    // The sampler's own filters, so the kept set and its weights are the ones sample_token
    // draws from.
    std::int32_t const count = kernels::detail::select_candidates(params, best, workspace);
    float const* const float_weights = workspace.weights.data();
    std::int32_t const* const candidates = workspace.candidates.data();
    for (std::int32_t i = 0; i < count; ++i) weights[candidates[i]] = float_weights[candidates[i]];
    // Summed in token-id order, as sample_token sums, so the totals agree bitwise.
    double total = 0;
    for (double const weight : weights) total += weight;
    return {total, best};
}

// Inverse CDF in token-id order over weights given by `weight_of(token)` (summing to `total`),
// at the uniform u in [0, 1). u * total can round up to total: then the last token of positive
// weight is the answer, the limit of the rule as u approaches 1.
template <class WeightOf>
std::int32_t draw_by_weight(std::int32_t vocab, WeightOf const& weight_of, double total, double u) {
    double const target = u * total;
    double cumulative = 0;
    std::int32_t last_positive = -1;
    for (std::int32_t token = 0; token < vocab; ++token) {
        double const weight = weight_of(token);
        if (weight <= 0) continue;
        cumulative += weight;
        if (cumulative > target) return token;
        last_positive = token;
    }
    return last_positive;
}

// The draft distribution q of one proposed token: dense weights, or a point mass on `token`
// when `weights` is empty (a deterministic drafter).
struct DraftDistribution {
    std::int32_t token = 0;
    std::span<double const> weights;  // [vocab] or empty
    double total = 1;

    double probability(std::int32_t of) const {
        if (weights.empty()) return of == token ? 1.0 : 0.0;
        return weights[static_cast<std::size_t>(of)] / total;
    }
};

// What a drafter proposes: up to gamma tokens, each with the distribution it was drawn from.
// Reused across rounds (clear() keeps the capacity), so drafting allocates nothing once warm.
class DraftProposal {
  public:
    void clear() {
        tokens_.clear();
        row_offsets_.clear();
        totals_.clear();
        weights_.clear();
    }

    // A deterministic draft: q is the point mass on `token`.
    void add(std::int32_t token) {
        tokens_.push_back(token);
        row_offsets_.push_back(point_mass);
        totals_.push_back(1);
    }

    // A sampled draft: q(x) = weights[x] / total, and `token` was drawn from it.
    void add(std::int32_t token, std::span<double const> weights, double total) {
        if (!(total > 0) || token < 0 || static_cast<std::size_t>(token) >= weights.size() ||
            !(weights[static_cast<std::size_t>(token)] > 0))
            throw Error("DraftProposal::add: token " + std::to_string(token) +
                        " has no weight in its own draft distribution");
        tokens_.push_back(token);
        row_offsets_.push_back(static_cast<std::ptrdiff_t>(weights_.size()));
        totals_.push_back(total);
        weights_.insert(weights_.end(), weights.begin(), weights.end());
        vocab_ = weights.size();
    }

    // Keeps the first `count` drafts (a grammar rejected the one after them).
    void truncate(int count) {
        auto const kept = static_cast<std::size_t>(std::clamp(count, 0, size()));
        tokens_.resize(kept);
        row_offsets_.resize(kept);
        totals_.resize(kept);
    }

    int size() const { return static_cast<int>(tokens_.size()); }
    bool empty() const { return tokens_.empty(); }
    std::span<std::int32_t const> tokens() const { return tokens_; }

    DraftDistribution distribution(int index) const {
        auto const i = static_cast<std::size_t>(index);
        if (row_offsets_[i] == point_mass) return {tokens_[i], {}, 1};
        return {tokens_[i],
                std::span<double const>(weights_).subspan(static_cast<std::size_t>(row_offsets_[i]),
                                                          vocab_),
                totals_[i]};
    }

  private:
    static constexpr std::ptrdiff_t point_mass = -1;
    std::vector<std::int32_t> tokens_;
    std::vector<std::ptrdiff_t> row_offsets_;  // into weights_, or point_mass
    std::vector<double> totals_;
    std::vector<double> weights_;  // [sampled drafts, vocab]
    std::size_t vocab_ = 0;
};

// The outcome of one round: drafts [0, accepted_drafts) are kept, then next_token.
struct Verdict {
    int accepted_drafts = 0;
    std::int32_t next_token = -1;

    int token_count() const { return accepted_drafts + 1; }
    friend bool operator==(Verdict const&, Verdict const&) = default;
};

// KV positions of the target to keep after a round on a sequence of `length_before` tokens
// whose cache held length_before - 1 of them: everything up to and including the last accepted
// draft. Pass it to the cache's truncate(); the new last token (next_token) is run next round.
inline int kv_length_after_round(int length_before, Verdict const& verdict) {
    return length_before + verdict.accepted_drafts;
}

// Appends the round's tokens (accepted drafts, then next_token) to `tokens`.
inline void append_round_tokens(std::vector<std::int32_t>& tokens, DraftProposal const& proposal,
                                Verdict const& verdict) {
    auto const drafts = proposal.tokens().first(static_cast<std::size_t>(verdict.accepted_drafts));
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    tokens.push_back(verdict.next_token);
}

// Scratch for verify_drafts; one per thread, reused for every round.
struct SpeculativeWorkspace {
    explicit SpeculativeWorkspace(std::int32_t vocab)
        : sampling(vocab), target_weights(static_cast<std::size_t>(vocab)) {}

    std::int32_t vocab() const { return sampling.vocab(); }

    kernels::SamplingWorkspace sampling;
    std::vector<double> target_weights;  // [vocab] p at the position being checked
    std::vector<std::int32_t> output;    // generated tokens, then the drafts: penalty history
};

// Decides one round. `target_logits` holds proposal.size() + 1 rows of vocab logits, row i
// computed after the sequence and drafts [0, i). Costs one filtered distribution per position
// looked at (O(vocab) each, plus penalties over the history) and allocates nothing once warm.
inline Verdict verify_drafts(SequenceView const& sequence, DraftProposal const& proposal,
                             std::span<float const> target_logits,
                             kernels::SamplingParams const& params,
                             SpeculativeWorkspace& workspace) {
    std::int32_t const vocab = workspace.vocab();
    auto const row_size = static_cast<std::size_t>(vocab);
    int const drafts = proposal.size();
    if (target_logits.size() != (static_cast<std::size_t>(drafts) + 1) * row_size)
        throw Error("verify_drafts: " + std::to_string(drafts) + " drafts need " +
                    std::to_string(drafts + 1) + " rows of " + std::to_string(vocab) +
                    " logits; got " + std::to_string(target_logits.size()) + " values");
    for (int i = 0; i < drafts; ++i) {
        DraftDistribution const q = proposal.distribution(i);
        if (q.token < 0 || q.token >= vocab)
            throw Error("verify_drafts: draft token " + std::to_string(q.token) +
                        " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        // A draft model must share the target's vocabulary for p / q to compare like with like.
        if (!q.weights.empty() && q.weights.size() != row_size)
            throw Error("verify_drafts: draft distribution over " +
                        std::to_string(q.weights.size()) + " tokens, the target has " +
                        std::to_string(vocab));
    }

    auto const generated = sequence.generated();
    workspace.output.assign(generated.begin(), generated.end());
    workspace.output.insert(workspace.output.end(), proposal.tokens().begin(),
                            proposal.tokens().end());
    std::uint32_t const first_step = sequence.next_step();
    std::span<double> const p(workspace.target_weights);

    auto const target_at = [&](int position) {
        kernels::TokenHistory const history{
            sequence.prompt(), std::span<std::int32_t const>(workspace.output)
                                   .first(generated.size() + static_cast<std::size_t>(position))};
        return filtered_weights(
            target_logits.subspan(static_cast<std::size_t>(position) * row_size, row_size), params,
            history, workspace.sampling, p);
    };
    auto const uniform = [&](int position, SpeculativeDraw role) {
        return speculative_uniform(params, sequence.request_id,
                                   first_step + static_cast<std::uint32_t>(position), role);
    };

    for (int i = 0; i < drafts; ++i) {
        FilteredWeights const target = target_at(i);
        std::int32_t const draft = proposal.tokens()[static_cast<std::size_t>(i)];
        if (params.temperature == 0) {
            if (draft == target.best) continue;
            return {i, target.best};
        }
        DraftDistribution const q = proposal.distribution(i);
        double const p_draft = p[static_cast<std::size_t>(draft)] / target.total;
        // u < p/q without dividing: q = 0 (a draft its drafter could not have drawn) is then
        // accepted exactly when the target allows the token at all.
        if (uniform(i, SpeculativeDraw::acceptance) * q.probability(draft) < p_draft) continue;

        auto const residual = [&](std::int32_t token) {
            return std::max(
                0.0, p[static_cast<std::size_t>(token)] / target.total - q.probability(token));
        };
        double residual_total = 0;
        for (std::int32_t token = 0; token < vocab; ++token) residual_total += residual(token);
        double const u = uniform(i, SpeculativeDraw::target_token);
        // A rejection needs p(d) < q(d), so some token has p > q and the residual has mass;
        // only rounding can empty it, when p and q agree to the last bit: draw from p then.
        if (!(residual_total > 0))
            return {i, draw_by_weight(
                           vocab, [&](std::int32_t t) { return p[static_cast<std::size_t>(t)]; },
                           target.total, u)};
        return {i, draw_by_weight(vocab, residual, residual_total, u)};
    }

    FilteredWeights const bonus = target_at(drafts);
    if (params.temperature == 0) return {drafts, bonus.best};
    return {drafts, draw_by_weight(
                        vocab, [&](std::int32_t t) { return p[static_cast<std::size_t>(t)]; },
                        bonus.total, uniform(drafts, SpeculativeDraw::target_token))};
}

// Running totals over rounds of one request or of the engine.
struct SpeculationStats {
    long rounds = 0;            // target forward passes spent verifying
    long drafted = 0;           // draft tokens proposed
    long accepted = 0;          // draft tokens kept
    long tokens_generated = 0;  // tokens appended (accepted drafts + one per round)

    void record(int proposed, Verdict const& verdict) {
        ++rounds;
        drafted += proposed;
        accepted += verdict.accepted_drafts;
        tokens_generated += verdict.token_count();
    }
    // Share of drafts accepted; 0 before any draft.
    double acceptance_rate() const {
        return drafted == 0 ? 0.0 : static_cast<double>(accepted) / static_cast<double>(drafted);
    }
    // The speed-up's upper bound: tokens per target pass (1 without speculation).
    double tokens_per_target_pass() const {
        return rounds == 0 ? 0.0
                           : static_cast<double>(tokens_generated) / static_cast<double>(rounds);
    }
};

}  // namespace tinfer::spec
