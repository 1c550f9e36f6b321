#pragma once
// The request model of the whole library: what a caller asks for (GenerationRequest), what it
// hears back per token (TokenEvent) and at the end (Completion), and the one set of limits every
// entry point checks a request against (RequestLimits): the engine's submit() and adopt() (the
// decode role of prefill/decode disaggregation), and through them the server and the CLIs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/engine/stop_conditions.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/sched/request.hpp>
#include <tinfer/speculative/speculative.hpp>
#include <tinfer/tokenizer/chat_template.hpp>

namespace tinfer {

// One request. The prompt is `prompt_tokens` if given, else `messages` rendered with the
// model's chat template (with the generation prompt), else `prompt` as plain text.
struct GenerationRequest {
    std::string prompt;
    std::vector<tok::ChatMessage> messages;
    std::vector<std::int32_t> prompt_tokens;
    int max_tokens = 128;  // generated tokens, the first (sampled after the prompt) included
    std::vector<std::string> stop;
    std::vector<std::int32_t> stop_token_ids;
    bool ignore_eos = false;
    kernels::SamplingParams sampling;
    // The seed stream: choice i samples with seed + i (written into sampling.seed). Absent,
    // sampling.seed is the seed when it is not 0; with neither chosen the engine draws a fresh
    // random seed at submit, so identical unseeded requests do not sample identically.
    std::optional<std::uint64_t> seed;
    // Choices: n samples of the one prompt. The prompt is prefilled once; after its pass each
    // choice samples its first token from the same logits and the other n - 1 fork its KV
    // copy-on-write, holding blocks of their own only from the prompt's partly filled last
    // block on. Events and completions carry the choice index.
    int n = 1;
    int priority = 0;
    std::uint32_t tenant = 0;
    // γ: draft tokens verified per decode step; 0 decodes one token per step. Greedy output is
    // unchanged by it; sampled output keeps its distribution (not its exact tokens). Needs
    // sampling.logprobs off: verification does not compute the log-probabilities.
    int draft_tokens = 0;
    // Structured output: every generated token continues a sentence of this grammar (bound to
    // the model's vocabulary: grammar::constrain(grammar, grammar::Vocabulary::of(tokenizer,
    // vocab))), and the output ends with an end token once the sentence is complete. Tokens
    // that cannot continue it are masked before sampling (before penalties, temperature,
    // top-k/top-p/min-p), so logprobs are those of the constrained distribution.
    std::shared_ptr<grammar::Constraint const> grammar;
};

inline StopConditions stop_conditions_of(GenerationRequest const& request) {
    return {.max_new_tokens = request.max_tokens,
            .stop_token_ids = request.stop_token_ids,
            .stop_strings = request.stop,
            .ignore_eos = request.ignore_eos};
}

// KV positions a request ever writes: the prompt, then every generated token but the last
// (whose KV no later step reads).
inline std::int64_t kv_positions_of(std::size_t prompt_tokens, int max_tokens) {
    return static_cast<std::int64_t>(prompt_tokens) + max_tokens - 1;
}

// What a request's callback receives, once per generated token; the last event has `finish`.
// A request that ends without a token (aborted, or refused after it was queued) gets one
// event with token -1, `finish` set and, when it was refused, `error`.
struct TokenEvent {
    sched::RequestId id{};  // the id submit() returned, for every choice of the request
    int choice = 0;         // which of the request's n choices this token belongs to
    std::int32_t token = -1;
    std::string text;  // newly visible text; may be empty (a partial character, a stop string)
    std::optional<float> logprob;
    std::vector<kernels::TokenLogprob> top_logprobs;
    std::optional<FinishReason> finish;
    std::string error;
    spec::SpeculationStats speculation;  // the request's totals, on the event with `finish`
};

using TokenCallback = std::function<void(TokenEvent const&)>;

// A finished request, however it was served.
struct Completion {
    sched::RequestId id{};
    int choice = 0;
    std::vector<std::int32_t> prompt_tokens;
    std::vector<std::int32_t> tokens;
    std::string text;
    FinishReason finish = FinishReason::aborted;
    std::string error;
    spec::SpeculationStats speculation;  // zero for a request without draft_tokens
};

// What a request is checked against, wherever it enters. Every field comes from the model and
// the cache the request would run on.
struct RequestLimits {
    int vocab = 0;
    int max_context = 0;  // the model's context: prompt + max_tokens
    // The most positions one request can ever hold in the whole KV cache (0: no cache limit).
    std::int64_t max_cached_tokens = 0;
    // Draft tokens per round: at most this; 0 with `speculation_refusal` set: none at all.
    int max_draft_tokens = 0;
    std::string speculation_refusal;  // why drafts are not allowed here, when they are not
    std::string grammar_refusal;      // why structured output is not, when it is not
    bool has_tokenizer = true;        // stop strings need one
    // Choices per request (GenerationRequest::n): the n run together on the prompt's KV, so at
    // most the sequences the scheduler runs at once (Engine::limits() sets it so); the default 1
    // is for limits built without an engine.
    int max_choices = 1;
};

// The seed of choice 0 of a request (GenerationRequest::seed's rule); `fresh` is called for a
// request that chose none.
template <class FreshSeed>
std::uint64_t base_seed_of(GenerationRequest const& request, FreshSeed&& fresh) {
    if (request.seed) return *request.seed;
    if (request.sampling.seed != 0) return request.sampling.seed;
    return fresh();
}

// Raises tinfer::RequestError, naming the field, for a request that can never be served;
// `prompt` is the request's prompt as token ids.
inline void validate_request(GenerationRequest const& request, std::span<std::int32_t const> prompt,
                             RequestLimits const& limits) {
    if (prompt.empty()) throw RequestError("the prompt is empty");
    for (std::int32_t const t : prompt)
        if (t < 0 || t >= limits.vocab)
            throw RequestError("prompt token " + std::to_string(t) +
                               " is outside the vocabulary of " + std::to_string(limits.vocab));
    if (request.n < 1 || request.n > limits.max_choices)
        throw RequestError("n must be in [1, " + std::to_string(limits.max_choices) + "], got " +
                           std::to_string(request.n));
    if (request.max_tokens < 1)
        throw RequestError("max_tokens must be at least 1, got " +
                           std::to_string(request.max_tokens));
    std::int64_t const total = static_cast<std::int64_t>(prompt.size()) + request.max_tokens;
    if (total > limits.max_context)
        throw RequestError("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                           std::to_string(request.max_tokens) + ") exceeds the context of " +
                           std::to_string(limits.max_context) + " tokens");
    if (limits.max_cached_tokens > 0 && total > limits.max_cached_tokens)
        throw RequestError("prompt + max_tokens = " + std::to_string(total) +
                           " tokens needs more KV blocks than the whole cache holds (" +
                           std::to_string(limits.max_cached_tokens) + " tokens)");
    kernels::validate(request.sampling, limits.vocab);
    if (request.draft_tokens != 0 && !limits.speculation_refusal.empty())
        throw RequestError("draft_tokens must be 0 here: " + limits.speculation_refusal);
    if (request.draft_tokens < 0 || request.draft_tokens > limits.max_draft_tokens)
        throw RequestError("draft_tokens must be in [0, " +
                           std::to_string(limits.max_draft_tokens) + "], got " +
                           std::to_string(request.draft_tokens));
    if (request.draft_tokens > 0 &&
        (request.sampling.logprobs || request.sampling.top_logprobs > 0))
        throw RequestError(
            "draft_tokens needs sampling.logprobs and top_logprobs off: verification does not "
            "compute log-probabilities");
    if (!limits.has_tokenizer && !request.stop.empty())
        throw RequestError("stop strings need a tokenizer, and this worker has none");
    for (std::int32_t const t : request.stop_token_ids)
        if (t >= limits.vocab)
            throw RequestError("stop token id " + std::to_string(t) +
                               " is outside the vocabulary of " + std::to_string(limits.vocab));
    if (request.grammar) {
        if (!limits.grammar_refusal.empty())
            throw RequestError("grammar is not supported here: " + limits.grammar_refusal);
        if (request.ignore_eos)
            throw RequestError(
                "grammar and ignore_eos cannot be combined: a complete output ends with an end "
                "token");
        // An entry point without a tokenizer has no vocabulary to bind a grammar to.
        if (!limits.has_tokenizer)
            throw RequestError(
                "grammar is not applied by this worker (it samples without the "
                "engine's step runner)");
        if (!request.grammar->grammar || !request.grammar->vocabulary)
            throw RequestError("grammar: the constraint has no grammar or no vocabulary");
        if (request.grammar->vocabulary->size() < limits.vocab)
            throw RequestError("grammar: bound to a vocabulary of " +
                               std::to_string(request.grammar->vocabulary->size()) +
                               " tokens, the model has " + std::to_string(limits.vocab));
        if (request.grammar->vocabulary->end_tokens().empty())
            throw RequestError("grammar: the vocabulary has no end token to finish an output with");
    }
    validate(stop_conditions_of(request));
}

}  // namespace tinfer
