#pragma once
// When a request stops generating, and which of its text may be streamed out.
//
// Token-level conditions (the model's end-of-generation tokens: EOS and end-of-turn tokens such
// as Gemma's <end_of_turn>; stop token ids; max_new_tokens) are checked on each sampled id;
// the stopping token's own text is never emitted. Stop strings are matched on the decoded text:
// a StopStringMatcher is fed each token's text and hands back only what can no longer turn out
// to be part of a stop string, so a stop string split over several tokens is never emitted, nor
// is anything after it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>

namespace tinfer {

enum class FinishReason { stop_token, stop_string, length, aborted };

// The name OpenAI-style APIs report, with the token and string cases told apart.
constexpr std::string_view name_of(FinishReason reason) {
    switch (reason) {
        case FinishReason::stop_token:
            return "stop_token";
        case FinishReason::stop_string:
            return "stop_string";
        case FinishReason::length:
            return "length";
        case FinishReason::aborted:
            return "aborted";
    }
    return "unknown";
}

struct StopConditions {
    int max_new_tokens = 0;
    std::vector<std::int32_t> stop_token_ids;  // stop on any of these, in addition to EOS
    std::vector<std::string> stop_strings;
    bool ignore_eos = false;  // go on past EOS and every other end-of-generation token
};

// Raises tinfer::RequestError on conditions that cannot be honoured.
inline void validate(StopConditions const& conditions) {
    if (conditions.max_new_tokens <= 0)
        throw RequestError("StopConditions.max_new_tokens must be positive; got " +
                           std::to_string(conditions.max_new_tokens));
    for (std::int32_t const token : conditions.stop_token_ids)
        if (token < 0)
            throw RequestError("StopConditions.stop_token_ids holds a negative id " +
                               std::to_string(token));
    for (std::string const& stop : conditions.stop_strings)
        if (stop.empty())
            throw RequestError(
                "StopConditions.stop_strings holds an empty string, which would "
                "match before any text");
}

// The reason to stop after `token`, the `tokens_generated`-th generated token (counting it), or
// nothing to go on. `end_of_generation` holds the model's EOS and end-of-turn tokens
// (Tokenizer::end_of_generation); each finishes like EOS. A stop token wins over the length
// limit when both apply.
inline std::optional<FinishReason> token_finish_reason(
    StopConditions const& conditions, std::int32_t token,
    std::span<std::int32_t const> end_of_generation, int tokens_generated) {
    if (!conditions.ignore_eos &&
        std::ranges::find(end_of_generation, token) != end_of_generation.end())
        return FinishReason::stop_token;
    if (std::ranges::find(conditions.stop_token_ids, token) != conditions.stop_token_ids.end())
        return FinishReason::stop_token;
    if (tokens_generated >= conditions.max_new_tokens) return FinishReason::length;
    return std::nullopt;
}

// Streams decoded text while watching for stop strings. Holds back the longest suffix of the
// text seen so far that is a proper prefix of some stop string (at most the longest stop string
// minus one byte); everything before it is safe to emit. On a match, emits the text before the
// first stop string to complete and stops for good.
class StopStringMatcher {
  public:
    struct Fed {
        std::string text;  // safe to emit now
        bool stopped;      // a stop string matched: generation ends, `text` is the last piece
    };

    explicit StopStringMatcher(std::vector<std::string> stop_strings)
        : stop_strings_(std::move(stop_strings)) {
        for (std::string const& stop : stop_strings_)
            if (stop.empty())
                throw RequestError("StopStringMatcher: stop strings must not be empty");
    }

    Fed feed(std::string_view piece) {
        if (stopped_) return {{}, true};
        held_.append(piece);
        // Generation ends where the first stop string is complete, so the match that ends
        // earliest wins; of those ending together, the longest (it starts earliest). This does
        // not depend on how the text was cut into pieces.
        std::size_t match_start = std::string::npos;
        std::size_t match_end = std::string::npos;
        for (std::string const& stop : stop_strings_) {
            std::size_t const start = held_.find(stop);
            if (start == std::string::npos) continue;
            std::size_t const end = start + stop.size();
            if (end < match_end || (end == match_end && start < match_start)) {
                match_start = start;
                match_end = end;
            }
        }
        if (match_start != std::string::npos) {
            stopped_ = true;
            std::string text = held_.substr(0, match_start);
            held_.clear();
            return {std::move(text), true};
        }
        std::size_t const keep = longest_partial_match();
        std::string text = held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return {std::move(text), false};
    }

    // At the end of generation for any other reason, the held-back text is ordinary output.
    std::string flush() {
        if (stopped_) return {};
        return std::exchange(held_, {});
    }

    bool stopped() const { return stopped_; }

  private:
    // Length of the longest suffix of held_ that is a proper prefix of a stop string.
    std::size_t longest_partial_match() const {
        std::size_t longest = 0;
        std::string_view const held = held_;
        for (std::string_view const stop : stop_strings_) {
            for (std::size_t length = std::min(stop.size() - 1, held.size()); length > longest;
                 --length) {
                if (held.ends_with(stop.substr(0, length))) {
                    longest = length;
                    break;
                }
            }
        }
        return longest;
    }

    std::vector<std::string> stop_strings_;
    std::string held_;  // text not yet emitted: a possible start of a stop string
    bool stopped_ = false;
};

}  // namespace tinfer
