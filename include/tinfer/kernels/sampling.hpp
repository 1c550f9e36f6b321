#pragma once
// Choosing the next token from one sequence's logits, on the host.
//
// Order of operations:
//   1. penalties on the model's logits: repetition (prompt + output tokens), then frequency and
//      presence (output tokens only);
//   2. logit bias. vLLM adds the bias before the penalties; we add it after, so a bias is exactly
//      the shift it names (the two orders differ only where both touch one token);
//   3. temperature (0 selects greedy decoding: argmax of 1-2, ties to the lowest token id);
//   4. top-k, then top-p on the distribution renormalised over the top-k survivors, then min-p:
//      Hugging Face's warper order. Min-p compares with the most likely token, which every
//      filter keeps, so it gives the same set before or after the others.
// Ranking (top-k, top-p, greedy) is by processed logit, ties to the lower token id, so exactly
// top_k tokens survive top-k and the result never depends on how a selection algorithm orders
// equal keys.
//
// Reported log-probabilities come from the raw model distribution, log_softmax(logits) before
// penalties, bias, temperature and filters (vLLM's default "raw_logprobs"): they say what the
// model thinks of a token whatever the sampling settings, and are defined under greedy decoding.
//
// One call costs O(vocab) time on average (top-k: O(vocab log top_k) at worst) plus
// O(vocab log top_logprobs) for the reported alternatives, and allocates nothing: scratch lives in
// a SamplingWorkspace made once per vocab. The draw uses one Philox block at (seed, request id,
// step), so the token depends on nothing but the logits, the settings and that position.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/host_device.hpp>
#include <tinfer/core/philox.hpp>
#include <tinfer/core/sampling_exp.hpp>

namespace tinfer::kernels {

// Index of the first largest value of `x` above -infinity, or -1 if there is none (empty, or
// every value -inf): greedy decoding's choice, ties to the lowest id. A block of 64 takes its
// maximum in a loop that vectorizes, and only a block whose maximum beats the best so far is
// searched for the first index holding it; a scalar running argmax over a 262,144-token
// vocabulary cost 0.2 ms, 2% of a Gemma 3 decode step. NaN is the caller's to refuse first.
inline std::int32_t first_argmax(std::span<float const> x) {
    constexpr std::size_t block = 64;
    float best_value = -std::numeric_limits<float>::infinity();
    std::int32_t best = -1;
    for (std::size_t start = 0; start < x.size(); start += block) {
        std::size_t const end = std::min(x.size(), start + block);
        float block_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : block_max)
        for (std::size_t i = start; i < end; ++i)
            block_max = x[i] > block_max ? x[i] : block_max;  // std::max's form does not vectorize
        if (!(block_max > best_value)) continue;
        best_value = block_max;
        std::size_t i = start;
        while (!(x[i] == block_max)) ++i;  // -0 == +0: the first of the two, as a scan's `>`
        best = static_cast<std::int32_t>(i);
    }
    return best;
}

// Most alternatives one token may report (the limit of OpenAI's API and vLLM's default).
inline constexpr int max_top_logprobs = 20;

struct SamplingParams {
    float temperature = 1;         // 0: greedy
    int top_k = 0;                 // 0: off
    float top_p = 1;               // 1: off
    float min_p = 0;               // 0: off
    float repetition_penalty = 1;  // 1: off; > 1 discourages tokens of prompt and output
    float presence_penalty = 0;    // subtracted once from each token already generated
    float frequency_penalty = 0;   // subtracted once per earlier generation of the token
    std::vector<std::pair<std::int32_t, float>> logit_bias;  // (token, added logit); -inf bans
    std::uint64_t seed = 0;
    bool logprobs = false;  // report the chosen token's log-probability (costs vocab exps)
    int top_logprobs = 0;   // alternatives to report, 0 .. max_top_logprobs; implies logprobs
};

namespace detail {
template <class Value>
[[noreturn]] void reject_sampling_param(char const* field, Value const& value,
                                        std::string const& requirement) {
    std::ostringstream message;
    message << "SamplingParams." << field << " must be " << requirement << "; got " << value;
    throw RequestError(message.str());
}
}  // namespace detail

// Raises tinfer::RequestError naming the first field that makes no sense for this vocabulary.
inline void validate(SamplingParams const& params, std::int32_t vocab) {
    if (!(std::isfinite(params.temperature) && params.temperature >= 0))
        detail::reject_sampling_param("temperature", params.temperature,
                                      "finite and >= 0 (0 selects greedy decoding)");
    if (params.top_k < 0)
        detail::reject_sampling_param("top_k", params.top_k, ">= 0 (0 turns top-k off)");
    if (!(params.top_p > 0 && params.top_p <= 1))
        detail::reject_sampling_param("top_p", params.top_p, "in (0, 1] (1 turns top-p off)");
    if (!(params.min_p >= 0 && params.min_p <= 1))
        detail::reject_sampling_param("min_p", params.min_p, "in [0, 1] (0 turns min-p off)");
    if (!(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0))
        detail::reject_sampling_param("repetition_penalty", params.repetition_penalty,
                                      "finite and > 0 (1 turns it off)");
    if (!std::isfinite(params.presence_penalty))
        detail::reject_sampling_param("presence_penalty", params.presence_penalty, "finite");
    if (!std::isfinite(params.frequency_penalty))
        detail::reject_sampling_param("frequency_penalty", params.frequency_penalty, "finite");
    for (auto const& [token, bias] : params.logit_bias) {
        if (token < 0 || token >= vocab)
            detail::reject_sampling_param(
                "logit_bias token", token,
                "a token id in [0, vocab = " + std::to_string(vocab) + ")");
        bool const bans_token = bias == -std::numeric_limits<float>::infinity();
        if (!(std::isfinite(bias) || bans_token))
            detail::reject_sampling_param("logit_bias value", bias, "finite, or -inf to ban");
    }
    if (params.top_logprobs < 0 || params.top_logprobs > max_top_logprobs)
        detail::reject_sampling_param("top_logprobs", params.top_logprobs,
                                      "in [0, " + std::to_string(max_top_logprobs) + "]");
}

// The tokens penalties look at.
struct TokenHistory {
    std::span<std::int32_t const> prompt;
    std::span<std::int32_t const> output;  // tokens generated so far
};

struct TokenLogprob {
    std::int32_t token;
    float logprob;
    friend bool operator==(TokenLogprob const&, TokenLogprob const&) = default;
};

struct SampledToken {
    std::int32_t token;
    std::optional<float> logprob;  // raw model log-probability of `token`, when asked for
    // The top_logprobs most likely tokens of the raw distribution, most likely first (ties to
    // the lower id). Points into the workspace: valid until its next use.
    std::span<TokenLogprob const> top_logprobs;
};

// Scratch for one sampling call at a time; make one per thread and reuse it for every token.
// `output_counts` and `marks` are all zero between calls; the other buffers hold nothing.
struct SamplingWorkspace {
    explicit SamplingWorkspace(std::int32_t vocab)
        : logits(static_cast<std::size_t>(vocab)),
          weights(static_cast<std::size_t>(vocab)),
          candidates(static_cast<std::size_t>(vocab)),
          output_counts(static_cast<std::size_t>(vocab)),
          marks(static_cast<std::size_t>(vocab)),
          top_ids(max_top_logprobs),
          top_logprobs(max_top_logprobs) {
        if (vocab <= 0) throw Error("SamplingWorkspace: vocab must be positive");
    }

    std::int32_t vocab() const { return static_cast<std::int32_t>(logits.size()); }

    std::vector<float> logits;                // [vocab] after penalties and bias
    std::vector<float> weights;               // [vocab] exp((logit - max) / temperature)
    std::vector<std::int32_t> candidates;     // [vocab] token ids still in the running
    std::vector<std::int32_t> output_counts;  // [vocab] generations of each token so far
    std::vector<std::uint8_t> marks;          // [vocab] token already visited / kept
    std::vector<std::int32_t> top_ids;        // [max_top_logprobs]
    std::vector<TokenLogprob> top_logprobs;   // [max_top_logprobs]
};

namespace detail {

// The sampler's two refusals, shared with the device sampler (kernels/cuda/sampling.cuh) so a
// bad row fails the same way on both backends.
inline Error nonfinite_logit_error(std::int32_t token) {
    return Error("sample_token: logit of token " + std::to_string(token) + " is NaN or +inf");
}
inline RequestError all_logits_masked_error() {
    return RequestError(
        "every token's logit is -inf after penalties and logit bias: nothing can be sampled");
}

inline void check_history_tokens(std::span<std::int32_t const> tokens, std::int32_t vocab,
                                 char const* which) {
    for (std::int32_t const token : tokens) {
        if (token < 0 || token >= vocab) {
            throw RequestError(std::string("sampling history: ") + which + " token " +
                               std::to_string(token) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
        }
    }
}

// Ranks a before b: larger logit first, ties to the lower token id (a strict total order).
struct RanksBefore {
    float const* logits;
    bool operator()(std::int32_t a, std::int32_t b) const {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    }
};

// Top-p by mass-guided quickselect: reorders candidates[0, count) so that its first L entries
// are the L highest-ranked tokens, where L is the smallest count whose weight reaches
// `target_mass`, and returns L. A token is thus kept when the mass ranked strictly above it is
// below the target. Expected O(count), no sort.
inline std::int32_t top_p_prefix(std::int32_t* candidates, std::int32_t count, float const* weights,
                                 RanksBefore ranks_before, double target_mass) {
    std::int32_t low = 0;
    std::int32_t high = count;
    double mass_before_low = 0;  // weight of candidates[0, low), all ranked above [low, high)
    while (low < high) {
        if (high - low == 1) return low + 1;
        // Median of three keeps ranked (sorted) input from degrading to quadratic time.
        std::int32_t const middle = low + (high - low) / 2;
        std::int32_t sample[] = {candidates[low], candidates[middle], candidates[high - 1]};
        std::sort(std::begin(sample), std::end(sample), ranks_before);
        std::int32_t const pivot = sample[1];
        std::int32_t* const split =
            std::partition(candidates + low, candidates + high,
                           [&](std::int32_t token) { return ranks_before(token, pivot); });
        std::iter_swap(split, std::find(split, candidates + high, pivot));
        std::int32_t const pivot_at = static_cast<std::int32_t>(split - candidates);
        double mass_above_pivot = 0;
        for (std::int32_t i = low; i < pivot_at; ++i) mass_above_pivot += weights[candidates[i]];
        if (mass_before_low + mass_above_pivot >= target_mass) {
            high = pivot_at;
        } else if (mass_before_low + mass_above_pivot + weights[pivot] >= target_mass) {
            return pivot_at + 1;
        } else {
            mass_before_low += mass_above_pivot + weights[pivot];
            low = pivot_at + 1;
        }
    }
    return count;  // rounding left the target just out of reach: keep everything
}

// Applies temperature, top-k, top-p and min-p to workspace.logits (already penalised and
// biased, largest finite entry at `best`): the kept tokens are workspace.candidates[0, count),
// in no particular order, with their unnormalised weights in workspace.weights. Every consumer
// of the filtered distribution (the sampler, speculative verification) goes through here, so
// they agree on it exactly.
// `vocab_extent` is workspace.vocab() as an extent (core/extent.hpp), static or dynamic from
// this one source; bench/specialization measures both.
inline std::int32_t select_candidates(Extent auto vocab_extent, SamplingParams const& params,
                                      std::int32_t best, SamplingWorkspace& workspace) {
    std::int32_t const vocab = static_cast<int>(vocab_extent);
    float const* const logits = workspace.logits.data();
    float* const weights = workspace.weights.data();
    std::int32_t* const candidates = workspace.candidates.data();
    float const max_logit = logits[best];

    RanksBefore const ranks_before{logits};
    // Subtracting the max before dividing keeps every exponent <= 0 even for tiny temperatures;
    // the best token's weight is exactly 1, which min-p relies on.
    // sampling_weight: the device sampler's function too, so both weigh every token bitwise
    // alike (std::exp and CUDA's expf differ in the last bit for some inputs).
    auto const weight_of = [&](std::int32_t token) {
        return sampling_weight(logits[token], max_logit, params.temperature);
    };

    std::int32_t count = 0;
    if (params.top_k > 0 && params.top_k < vocab) {
        // Top-k by a bounded heap whose front is the worst survivor: one comparison for most
        // tokens, O(vocab log k) at worst, and only k exponentials.
        for (std::int32_t token = 0; token < vocab; ++token) {
            if (count < params.top_k) {
                candidates[count++] = token;
                std::push_heap(candidates, candidates + count, ranks_before);
            } else if (ranks_before(token, candidates[0])) {
                std::pop_heap(candidates, candidates + count, ranks_before);
                candidates[count - 1] = token;
                std::push_heap(candidates, candidates + count, ranks_before);
            }
        }
        for (std::int32_t i = 0; i < count; ++i) weights[candidates[i]] = weight_of(candidates[i]);
    } else {
        for (std::int32_t token = 0; token < vocab; ++token) {
            float const weight = weight_of(token);
            weights[token] = weight;
            if (weight > 0) candidates[count++] = token;
        }
    }

    if (params.top_p < 1) {
        double total = 0;
        for (std::int32_t i = 0; i < count; ++i) total += weights[candidates[i]];
        // The tokens lighter than (1 - top_p) * total / count weigh less than 1 - top_p
        // together, so the heavier ones (a prefix of the ranking) already reach top_p: the
        // cut-off lies among them and the light tail can be dropped before the selection.
        double const light = (1 - static_cast<double>(params.top_p)) * total / count;
        count = static_cast<std::int32_t>(
            std::partition(candidates, candidates + count,
                           [&](std::int32_t token) { return weights[token] >= light; }) -
            candidates);
        count = top_p_prefix(candidates, count, weights, ranks_before, params.top_p * total);
    }
    if (params.min_p > 0) {
        count = static_cast<std::int32_t>(
            std::partition(candidates, candidates + count,
                           [&](std::int32_t token) { return weights[token] >= params.min_p; }) -
            candidates);
    }
    return count;
}

inline std::int32_t select_candidates(SamplingParams const& params, std::int32_t best,
                                      SamplingWorkspace& workspace) {
    return select_candidates(DynamicExtent{workspace.vocab()}, params, best, workspace);
}

// Draws from the filtered distribution of select_candidates.
inline std::int32_t draw_filtered(Extent auto vocab_extent, SamplingParams const& params,
                                  std::int32_t best, std::uint64_t request_id, std::uint32_t step,
                                  SamplingWorkspace& workspace) {
    std::int32_t const vocab = static_cast<int>(vocab_extent);
    std::int32_t const count = select_candidates(vocab_extent, params, best, workspace);
    float const* const weights = workspace.weights.data();
    std::int32_t const* const candidates = workspace.candidates.data();

    // Inverse CDF in token-id order, so the token does not depend on how the filters above
    // permuted the candidates. Double accumulation keeps a rare token's interval its true width.
    std::uint8_t* const kept = workspace.marks.data();
    for (std::int32_t i = 0; i < count; ++i) kept[candidates[i]] = 1;
    double total = 0;
    for (std::int32_t token = 0; token < vocab; ++token)
        if (kept[token]) total += weights[token];
    PhiloxCounter const bits =
        philox_draw({.seed = params.seed, .request_id = request_id, .step = step, .draw_index = 0});
    double const target = uniform_double(bits.words[0], bits.words[1]) * total;
    std::int32_t chosen = -1;
    double cumulative = 0;
    for (std::int32_t token = 0; token < vocab; ++token) {
        if (!kept[token]) continue;
        kept[token] = 0;
        if (chosen >= 0 || weights[token] == 0) continue;
        cumulative += weights[token];
        if (cumulative > target) chosen = token;
    }
    // u * total can round up to total itself; the best token is always kept and has weight 1.
    return chosen >= 0 ? chosen : best;
}

}  // namespace detail

// What the device sampler (kernels/cuda/sampling.cuh) writes in place of a token for a row this
// sampler refuses: -1 - t when token t is the lowest id whose logit is NaN or +inf (the token
// the host names), all_logits_masked when every logit is -inf. Drawn tokens are >= 0. The codes
// live here, beside the refusals they stand for, so the host can decode them and the CPU tests
// check the round trip.
inline constexpr std::int32_t all_logits_masked = std::numeric_limits<std::int32_t>::min();
TINFER_HOST_DEVICE constexpr std::int32_t nonfinite_logit_code(std::int32_t token) {
    return -1 - token;
}

// Throws what sample_token throws for the first refused row of tokens the device sampler wrote
// (copied to the host); returns quietly when every row drew a token.
inline void check_sampled_tokens(std::span<std::int32_t const> tokens) {
    for (std::int32_t const token : tokens) {
        if (token >= 0) continue;
        if (token == all_logits_masked) throw detail::all_logits_masked_error();
        throw detail::nonfinite_logit_error(-1 - token);
    }
}

// Applies repetition, frequency and presence penalties, then logit bias, to `logits` in place.
//   repetition (prompt + output tokens, once per distinct token): positive logits are divided
//     by the penalty and negative ones multiplied, so a penalty > 1 always lowers the logit;
//   frequency and presence (output tokens, OpenAI's definition):
//     logit -= frequency_penalty * count + presence_penalty * (count > 0);
//   bias: each (token, value) entry adds value; repeated entries add up.
inline void apply_penalties_and_bias(std::span<float> logits, SamplingParams const& params,
                                     TokenHistory history, SamplingWorkspace& workspace) {
    std::int32_t const vocab = workspace.vocab();
    if (logits.size() != workspace.logits.size())
        throw Error("apply_penalties_and_bias: logits has " + std::to_string(logits.size()) +
                    " entries, the workspace was made for vocab " + std::to_string(vocab));
    detail::check_history_tokens(history.prompt, vocab, "prompt");
    detail::check_history_tokens(history.output, vocab, "output");

    bool const penalises = params.repetition_penalty != 1 || params.presence_penalty != 0 ||
                           params.frequency_penalty != 0;
    if (penalises) {
        auto& counts = workspace.output_counts;
        auto& visited = workspace.marks;
        for (std::int32_t const token : history.output) ++counts[token];
        auto const penalise_once = [&](std::int32_t token) {
            if (visited[token]) return;
            visited[token] = 1;
            float& logit = logits[token];
            if (params.repetition_penalty != 1) {
                logit = logit > 0 ? logit / params.repetition_penalty
                                  : logit * params.repetition_penalty;
            }
            if (std::int32_t const count = counts[token]; count > 0)
                logit -=
                    params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
        };
        // Only output tokens are seen by frequency and presence: prompt tokens have count 0.
        bool const repetition = params.repetition_penalty != 1;
        if (repetition) std::ranges::for_each(history.prompt, penalise_once);
        std::ranges::for_each(history.output, penalise_once);
        // Restore the all-zero state by touching only what was set: O(history), not O(vocab).
        if (repetition)
            for (std::int32_t const token : history.prompt) visited[token] = 0;
        for (std::int32_t const token : history.output) {
            visited[token] = 0;
            counts[token] = 0;
        }
    }
    for (auto const& [token, bias] : params.logit_bias) logits[token] += bias;
}

// Samples the next token of request `request_id` after `step` generated tokens. `vocab_extent`
// is the vocabulary as a static or dynamic extent (core/extent.hpp); the overload without it
// takes the workspace's at run time.
inline SampledToken sample_token(Extent auto vocab_extent, std::span<float const> logits,
                                 SamplingParams const& params, TokenHistory history,
                                 std::uint64_t request_id, std::uint32_t step,
                                 SamplingWorkspace& workspace) {
    std::int32_t const vocab = static_cast<int>(vocab_extent);
    if (logits.size() != workspace.logits.size() || vocab != workspace.vocab())
        throw Error("sample_token: logits has " + std::to_string(logits.size()) +
                    " entries and the vocabulary " + std::to_string(vocab) +
                    ", the workspace was made for vocab " + std::to_string(workspace.vocab()));
    validate(params, vocab);
    constexpr float negative_infinity = -std::numeric_limits<float>::infinity();

    // One pass that vectorizes (the check is a flag, the refusal's token found only when set).
    constexpr float infinity = std::numeric_limits<float>::infinity();
    float raw_max = negative_infinity;
    int nonfinite = 0;  // an int: `||` is a branch, `|` vectorizes
#pragma omp simd reduction(max : raw_max) reduction(| : nonfinite)
    for (std::int32_t token = 0; token < vocab; ++token) {
        float const logit = logits[token];
        nonfinite |= !(logit < infinity);  // NaN or +inf
        raw_max = logit > raw_max ? logit : raw_max;
    }
    if (nonfinite) {
        for (std::int32_t token = 0; token < vocab; ++token)
            if (!(logits[token] < infinity)) throw detail::nonfinite_logit_error(token);
    }

    std::span<float> const processed(workspace.logits);
    std::ranges::copy(logits, processed.begin());
    apply_penalties_and_bias(processed, params, history, workspace);
    std::int32_t const best = first_argmax(processed);
    if (best < 0) throw detail::all_logits_masked_error();

    std::int32_t const token =
        params.temperature == 0
            ? best
            : detail::draw_filtered(vocab_extent, params, best, request_id, step, workspace);

    if (!params.logprobs && params.top_logprobs == 0) return {token, std::nullopt, {}};

    // Raw log-softmax: log p = logit - (max + log sum exp(logit - max)).
    double log_normalizer = negative_infinity;
    if (raw_max != negative_infinity) {
        double sum = 0;
        for (float const logit : logits) sum += std::exp(logit - raw_max);
        log_normalizer = raw_max + std::log(sum);
    }
    auto const raw_logprob = [&](std::int32_t id) {
        if (log_normalizer == negative_infinity) return negative_infinity;
        return static_cast<float>(static_cast<double>(logits[id]) - log_normalizer);
    };

    std::span<std::int32_t> const top_room(workspace.top_ids.data(),
                                           static_cast<std::size_t>(params.top_logprobs));
    auto const sorted = std::ranges::partial_sort_copy(
        std::views::iota(std::int32_t{0}, vocab), top_room, detail::RanksBefore{logits.data()});
    std::span<std::int32_t const> const top_ids(top_room.begin(), sorted.out);
    std::span<TokenLogprob> const top(workspace.top_logprobs.data(), top_ids.size());
    std::ranges::transform(top_ids, top.begin(), [&](std::int32_t id) {
        return TokenLogprob{id, raw_logprob(id)};
    });
    return {token, raw_logprob(token), top};
}

inline SampledToken sample_token(std::span<float const> logits, SamplingParams const& params,
                                 TokenHistory history, std::uint64_t request_id, std::uint32_t step,
                                 SamplingWorkspace& workspace) {
    return sample_token(DynamicExtent{workspace.vocab()}, logits, params, history, request_id, step,
                        workspace);
}

}  // namespace tinfer::kernels
