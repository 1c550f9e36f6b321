#pragma once
// Turns tokens into text as they are generated. A token can end in the middle of a multi-byte
// character (byte-level BPE splits emoji and CJK across tokens), so the bytes of an unfinished
// character are held back until the tokens that complete it arrive: every piece handed out is
// whole UTF-8 the moment it is printed or matched against stop strings.
#include <cstddef>
#include <string>
#include <string_view>

#include <tinfer/core/unicode.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>

namespace tinfer::tok {

class StreamDetokenizer {
  public:
    // The tokenizer must outlive the detokenizer.
    StreamDetokenizer(Tokenizer const& tokenizer, SpecialText specials)
        : tokenizer_(&tokenizer), specials_(specials) {}

    // The text completed by this token; empty while a character is still unfinished.
    std::string push(TokenId id) {
        tokenizer_->append_token(pending_, id, specials_);
        std::size_t const ready = utf8_complete_prefix(pending_);
        std::string out = pending_.substr(0, ready);
        pending_.erase(0, ready);
        return out;
    }

    // At the end of the stream: whatever was held back, as raw bytes (an unfinished character
    // that never got completed).
    std::string finish() {
        std::string out;
        out.swap(pending_);
        return out;
    }

    // Bytes received but not yet handed out.
    std::string_view held_back() const { return pending_; }

  private:
    Tokenizer const* tokenizer_;
    SpecialText specials_;
    std::string pending_;
};

}  // namespace tinfer::tok
