#pragma once
// One request's output side, shared by every way of generating (the CLI loop, the engine, the
// server): turns sampled token ids into text that is safe to show, and decides when the
// request is finished (EOS or another end-of-generation token, stop tokens, stop strings,
// length).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/engine/stop_conditions.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_stream.hpp>

namespace tinfer {

class OutputStream {
  public:
    struct Step {
        std::string text;                    // newly visible text (may be empty)
        std::optional<FinishReason> finish;  // set on the request's last token
    };

    // The tokenizer must outlive the stream.
    OutputStream(tok::Tokenizer const& tokenizer, StopConditions conditions)
        : tokenizer_(&tokenizer),
          conditions_(std::move(conditions)),
          detokenizer_(tokenizer, tok::SpecialText::skip),
          stop_strings_(conditions_.stop_strings) {
        validate(conditions_);
    }

    // Records a sampled token and returns the text it completes. A stop string and what
    // follows it are never returned; a stop token is recorded but has no text.
    Step accept(std::int32_t token) {
        tokens_.push_back(token);
        Step step;
        auto const reason = token_finish_reason(conditions_, token, tokenizer_->end_of_generation(),
                                                static_cast<int>(tokens_.size()));
        bool const is_stop_token = reason == FinishReason::stop_token;
        if (!is_stop_token) {
            auto fed = stop_strings_.feed(detokenizer_.push(token));
            step.text = std::move(fed.text);
            if (fed.stopped) {
                step.finish = FinishReason::stop_string;
                finish_ = step.finish;
                return step;
            }
        }
        if (reason) {
            // Finished for another reason: release text held back for a partial stop string.
            auto fed = stop_strings_.feed(detokenizer_.finish());
            step.text += fed.text;
            if (!fed.stopped) step.text += stop_strings_.flush();
            step.finish = fed.stopped ? FinishReason::stop_string : *reason;
            finish_ = step.finish;
        }
        return step;
    }

    std::vector<std::int32_t> const& tokens() const { return tokens_; }
    std::optional<FinishReason> finish_reason() const { return finish_; }
    StopConditions const& conditions() const { return conditions_; }

  private:
    tok::Tokenizer const* tokenizer_;
    StopConditions conditions_;
    tok::StreamDetokenizer detokenizer_;
    StopStringMatcher stop_strings_;
    std::vector<std::int32_t> tokens_;
    std::optional<FinishReason> finish_;
};

}  // namespace tinfer
