#pragma once
// Byte-level BPE (the GGUF "gpt2" tokenizer model): special tokens are split out of the text
// first (leftmost, longest), the rest is pre-tokenized into pieces, and each piece's bytes are
// merged by rank, lowest rank first and leftmost on ties. Decoding concatenates token bytes, so
// decode(encode(s)) == s for every byte string s, ill-formed UTF-8 included, whose bytes the
// vocabulary can spell (see Tokenizer::spells_byte).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/format/tokenizer_byte_level.hpp>
#include <tinfer/format/tokenizer_pretokenizer.hpp>
#include <tinfer/format/unicode.hpp>

namespace tinfer::tok {

using TokenId = std::int32_t;

// GGUF's tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : std::int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

// Whether encode() recognises special-token text (<|im_start|>) or treats it as plain text,
// as one must for untrusted user content.
enum class SpecialTokens : std::uint8_t { parse, as_text };

// Whether decode() writes control tokens' text or leaves them out (user-defined tokens are
// content and are always written).
enum class SpecialText : std::uint8_t { keep, skip };

// Everything a byte-level BPE tokenizer is built from; the views need only outlive the
// Tokenizer's constructor.
struct TokenizerSpec {
    std::vector<std::string_view> tokens;   // byte-level spelling, as in tokenizer.ggml.tokens
    std::vector<std::int32_t> token_types;  // TokenType values; empty means all normal
    std::vector<std::string_view> merges;   // "left right", highest priority first
    PreTokenizer pre_tokenizer = PreTokenizer::smollm;
    std::optional<TokenId> bos, eos, unknown, padding;
    bool add_bos = false;  // whether prompts start with BOS (encode() never adds it itself)
};

class Tokenizer {
  public:
    explicit Tokenizer(TokenizerSpec const& spec)
        : pre_tokenizer_(spec.pre_tokenizer),
          bos_(spec.bos),
          eos_(spec.eos),
          unknown_(spec.unknown),
          padding_(spec.padding),
          add_bos_(spec.add_bos),
          cache_(std::make_shared<PieceCache>()) {
        std::size_t const n = spec.tokens.size();
        if (n == 0) throw Error("tokenizer: the vocabulary is empty");
        if (n > static_cast<std::size_t>(INT32_MAX)) throw Error("tokenizer: vocabulary too large");
        if (!spec.token_types.empty() && spec.token_types.size() != n) {
            throw Error("tokenizer: " + std::to_string(spec.token_types.size()) +
                        " token types for " + std::to_string(n) + " tokens");
        }
        texts_.reserve(n);
        bytes_.reserve(n);
        types_.reserve(n);
        for (std::size_t id = 0; id < n; ++id) {
            auto const type = spec.token_types.empty()
                                  ? TokenType::normal
                                  : static_cast<TokenType>(spec.token_types[id]);
            texts_.emplace_back(spec.tokens[id]);
            types_.push_back(type);
            bool const raw = type == TokenType::control || type == TokenType::user_defined;
            bytes_.push_back(raw ? texts_.back() : byte_level_decode(texts_.back()));
        }
        id_by_text_.reserve(n);
        for (std::size_t id = 0; id < n; ++id) {
            id_by_text_.insert_or_assign(texts_[id], static_cast<TokenId>(id));
        }
        for (auto const* id : {&bos_, &eos_, &unknown_, &padding_}) {
            if (*id && (**id < 0 || static_cast<std::size_t>(**id) >= n)) {
                throw Error("tokenizer: special token id " + std::to_string(**id) +
                            " is outside the vocabulary of " + std::to_string(n));
            }
        }
        build_byte_tokens();
        build_merges(spec.merges);
        build_specials();
    }

    std::vector<TokenId> encode(std::string_view text,
                                SpecialTokens specials = SpecialTokens::parse) const {
        std::vector<TokenId> ids;
        ids.reserve(text.size() / 3 + 1);
        encode_into(text, ids, specials);
        return ids;
    }

    // Appends the tokens of `text` to `ids`.
    void encode_into(std::string_view text, std::vector<TokenId>& ids,
                     SpecialTokens specials = SpecialTokens::parse) const {
        auto const encode_plain = [&](std::string_view plain) {
            pre_tokenize(pre_tokenizer_, plain,
                         [&](std::string_view piece) { encode_piece(piece, ids); });
        };
        if (specials == SpecialTokens::as_text || !has_specials_) {
            encode_plain(text);
            return;
        }
        std::size_t plain_start = 0;
        for (std::size_t pos = 0; pos < text.size();) {
            auto const match = special_at(text, pos);
            if (!match) {
                ++pos;
                continue;
            }
            if (plain_start < pos) encode_plain(text.substr(plain_start, pos - plain_start));
            ids.push_back(match->id);
            pos += match->length;
            plain_start = pos;
        }
        if (plain_start < text.size()) encode_plain(text.substr(plain_start));
    }

    std::string decode(std::span<TokenId const> ids,
                       SpecialText specials = SpecialText::keep) const {
        std::string out;
        for (TokenId const id : ids) append_token(out, id, specials);
        return out;
    }

    // Appends one token's bytes to `out`.
    void append_token(std::string& out, TokenId id,
                      SpecialText specials = SpecialText::keep) const {
        check_id(id);
        if (specials == SpecialText::skip && types_[id] == TokenType::control) return;
        out += bytes_[id];
    }

    std::size_t vocab_size() const { return texts_.size(); }
    PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }

    // The bytes a token decodes to.
    std::string_view token_bytes(TokenId id) const {
        check_id(id);
        return bytes_[id];
    }
    // The token as the vocabulary spells it (byte-level alphabet for normal tokens).
    std::string_view token_text(TokenId id) const {
        check_id(id);
        return texts_[id];
    }
    TokenType token_type(TokenId id) const {
        check_id(id);
        return types_[id];
    }
    std::optional<TokenId> find_token_text(std::string_view text) const {
        auto const it = id_by_text_.find(text);
        return it == id_by_text_.end() ? std::nullopt : std::optional<TokenId>(it->second);
    }

    std::optional<TokenId> bos_id() const { return bos_; }
    std::optional<TokenId> eos_id() const { return eos_; }
    std::optional<TokenId> unknown_id() const { return unknown_; }
    std::optional<TokenId> padding_id() const { return padding_; }

    // Whether the vocabulary has a token for this byte. Vocabularies trained on text often lack
    // bytes that never occur in it (SmolLM2: 21 of 256, e.g. 0xC0, 0xFF and some controls);
    // encode() drops such bytes, as HF `tokenizers` and llama.cpp do, rather than emit an
    // unknown token the model would read as text. Every other byte string round-trips.
    bool spells_byte(std::uint8_t byte) const { return byte_tokens_[byte] >= 0; }
    // Whether the model expects BOS before a prompt; encode() leaves that to the caller.
    bool add_bos() const { return add_bos_; }

  private:
    struct SpecialMatch {
        TokenId id;
        std::size_t length;
    };
    struct MergeRule {
        std::uint32_t rank;
        TokenId result;
    };
    struct StringHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const {
            return std::hash<std::string_view>{}(s);
        }
    };
    // Memoised piece -> ids: real text repeats the same words, so most pieces are hits. Shared
    // by copies of the tokenizer and guarded so one tokenizer can serve several threads.
    struct PieceCache {
        std::mutex mutex;
        std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> ids;
    };
    static constexpr std::size_t cached_piece_max_bytes = 64;
    static constexpr std::size_t cache_max_entries = 1 << 16;

    static std::uint64_t pair_key(TokenId left, TokenId right) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
               static_cast<std::uint32_t>(right);
    }

    // The bytes a byte-level token spells; a token with a character outside the byte alphabet
    // is taken as its own UTF-8 text (as HF's ByteLevel decoder does).
    static std::string byte_level_decode(std::string_view text) {
        std::string out;
        out.reserve(text.size());
        for (std::size_t pos = 0; pos < text.size();) {
            Utf8Unit const unit = decode_utf8(text, pos);
            auto const byte = unit.valid ? code_point_to_byte(unit.code_point) : std::nullopt;
            if (!byte) return std::string(text);
            out += static_cast<char>(*byte);
            pos += unit.length;
        }
        return out;
    }

    void check_id(TokenId id) const {
        if (id < 0 || static_cast<std::size_t>(id) >= texts_.size()) {
            throw Error("tokenizer: token id " + std::to_string(id) +
                        " is outside the vocabulary of " + std::to_string(texts_.size()));
        }
    }

    void build_byte_tokens() {
        for (unsigned b = 0; b < 256; ++b) {
            std::string spelling;
            append_utf8(spelling, byte_to_code_point(static_cast<std::uint8_t>(b)));
            auto const id = find_token_text(spelling);
            byte_tokens_[b] = id ? *id : -1;
        }
    }

    void build_merges(std::vector<std::string_view> const& merges) {
        merges_.reserve(merges.size());
        std::string joined;
        for (std::size_t rank = 0; rank < merges.size(); ++rank) {
            std::string_view const merge = merges[rank];
            // Searching from 1 lets a vocabulary whose left side is a plain " " still split.
            auto const space = merge.find(' ', 1);
            auto const bad = [&](std::string const& why) {
                return Error("tokenizer: merge " + std::to_string(rank) + " '" +
                             std::string(merge) + "' " + why);
            };
            if (space == std::string_view::npos) throw bad("is not 'left right'");
            std::string_view const left = merge.substr(0, space), right = merge.substr(space + 1);
            joined.assign(left).append(right);
            auto const left_id = find_token_text(left), right_id = find_token_text(right);
            auto const result = find_token_text(joined);
            if (!left_id || !right_id || !result) throw bad("names a token not in the vocabulary");
            merges_.try_emplace(pair_key(*left_id, *right_id),
                                MergeRule{static_cast<std::uint32_t>(rank), *result});
        }
    }

    void build_specials() {
        for (std::size_t id = 0; id < texts_.size(); ++id) {
            bool const special =
                types_[id] == TokenType::control || types_[id] == TokenType::user_defined;
            if (!special || texts_[id].empty()) continue;
            specials_by_first_byte_[static_cast<std::uint8_t>(texts_[id][0])].push_back(
                static_cast<TokenId>(id));
            has_specials_ = true;
        }
        for (auto& bucket : specials_by_first_byte_) {
            // Longest first, so the first match at a position is the longest one.
            std::stable_sort(bucket.begin(), bucket.end(), [&](TokenId a, TokenId b) {
                return texts_[a].size() > texts_[b].size();
            });
        }
    }

    std::optional<SpecialMatch> special_at(std::string_view text, std::size_t pos) const {
        for (TokenId const id : specials_by_first_byte_[static_cast<std::uint8_t>(text[pos])]) {
            if (text.substr(pos).starts_with(texts_[id]))
                return SpecialMatch{id, texts_[id].size()};
        }
        return std::nullopt;
    }

    void encode_piece(std::string_view piece, std::vector<TokenId>& ids) const {
        if (piece.size() > cached_piece_max_bytes) {
            merge_piece(piece, ids);
            return;
        }
        {
            std::lock_guard const lock(cache_->mutex);
            auto const it = cache_->ids.find(piece);
            if (it != cache_->ids.end()) {
                ids.insert(ids.end(), it->second.begin(), it->second.end());
                return;
            }
        }
        std::size_t const first = ids.size();
        merge_piece(piece, ids);
        std::lock_guard const lock(cache_->mutex);
        if (cache_->ids.size() >= cache_max_entries) cache_->ids.clear();
        cache_->ids.try_emplace(std::string(piece), ids.begin() + first, ids.end());
    }

    // BPE over one piece: starts from one token per byte and repeatedly applies the adjacent
    // pair with the lowest merge rank (leftmost among equal ranks) until none applies. A heap
    // of candidate pairs keeps this O(n log n) for long pieces such as whitespace runs;
    // candidates made stale by an earlier merge are recognised by their token ids and dropped.
    void merge_piece(std::string_view piece, std::vector<TokenId>& ids) const {
        struct Symbol {
            TokenId id;  // -1 once merged into its left neighbour
            std::int32_t prev, next;
        };
        struct Candidate {
            std::uint32_t rank;
            std::int32_t left;
            TokenId left_id, right_id, result;
            bool operator>(Candidate const& o) const {
                return rank != o.rank ? rank > o.rank : left > o.left;
            }
        };
        std::vector<Symbol> symbols;
        symbols.reserve(piece.size());
        for (char const c : piece) {
            TokenId const id = byte_tokens_[static_cast<std::uint8_t>(c)];
            if (id < 0) continue;  // a byte the vocabulary cannot spell: see spells_byte()
            auto const i = static_cast<std::int32_t>(symbols.size());
            symbols.push_back({id, i - 1, i + 1});
        }
        if (symbols.empty()) return;
        symbols.back().next = -1;
        auto const n = static_cast<std::int32_t>(symbols.size());
        if (n == 1) {
            ids.push_back(symbols[0].id);
            return;
        }
        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
        auto const consider = [&](std::int32_t left) {
            if (left < 0) return;
            std::int32_t const right = symbols[left].next;
            if (right < 0) return;
            auto const rule = merges_.find(pair_key(symbols[left].id, symbols[right].id));
            if (rule == merges_.end()) return;
            queue.push({rule->second.rank, left, symbols[left].id, symbols[right].id,
                        rule->second.result});
        };
        for (std::int32_t i = 0; i + 1 < n; ++i) consider(i);
        while (!queue.empty()) {
            Candidate const c = queue.top();
            queue.pop();
            Symbol& left = symbols[c.left];
            if (left.id != c.left_id || left.next < 0) continue;
            Symbol& right = symbols[left.next];
            if (right.id != c.right_id) continue;
            left.id = c.result;
            right.id = -1;
            left.next = right.next;
            if (left.next >= 0) symbols[left.next].prev = c.left;
            consider(left.prev);
            consider(c.left);
        }
        for (std::int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
    }

    PreTokenizer pre_tokenizer_;
    std::optional<TokenId> bos_, eos_, unknown_, padding_;
    bool add_bos_;
    std::vector<std::string> texts_;
    std::vector<std::string> bytes_;
    std::vector<TokenType> types_;
    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> id_by_text_;
    std::array<TokenId, 256> byte_tokens_{};
    std::unordered_map<std::uint64_t, MergeRule> merges_;
    std::array<std::vector<TokenId>, 256> specials_by_first_byte_{};
    bool has_specials_ = false;
    std::shared_ptr<PieceCache> cache_;
};

}  // namespace tinfer::tok
