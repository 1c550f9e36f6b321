#pragma once
// The tokenizer of a GGUF model, for the two tokenizer models tinfer implements:
//
// byte-level BPE ("gpt2": SmolLM2, GPT-2, Llama 3, Qwen): special tokens are split out of the
//   text first (leftmost, longest), the rest is pre-tokenized into pieces, and each piece's
//   bytes are merged by rank, lowest rank first and leftmost on ties.
// SentencePiece BPE ("llama": Llama 2, Mistral, Gemma): special tokens are split out the same
//   way, each remaining fragment gets an optional leading space (add_space_prefix), its spaces
//   become U+2581 and its characters are merged by score (tokenizer_sentencepiece.hpp), with
//   <0xNN> byte tokens for whatever the vocabulary cannot spell.
//
// Decoding concatenates token bytes, so decode(encode(s)) == s for every byte string s,
// ill-formed UTF-8 included, whose bytes the vocabulary can spell (see Tokenizer::spells_byte);
// for SentencePiece, s must not contain U+2581 itself (it decodes as a space), and the prefix
// space encode() adds (add_space_prefix) is taken off again only at the start of the text, as
// llama.cpp does.
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
#include <tinfer/core/unicode.hpp>
#include <tinfer/tokenizer/tokenizer_byte_level.hpp>
#include <tinfer/tokenizer/tokenizer_pretokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_sentencepiece.hpp>

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

// Whether encode() recognises control-token text (<|im_start|>) or treats it as plain text,
// as one must for untrusted user content. User-defined tokens (Gemma's "\n\n", "<table>") are
// content, not control, and are split out either way, as llama.cpp and HF `tokenizers` do.
enum class SpecialTokens : std::uint8_t { parse, as_text };

// Whether decode() writes control (and unknown) tokens' text or leaves them out, as llama.cpp
// does; user-defined tokens are content and are always written.
enum class SpecialText : std::uint8_t { keep, skip };

// GGUF's tokenizer.ggml.model: how text becomes tokens.
enum class TokenizerModel : std::uint8_t {
    byte_level_bpe,  // "gpt2"
    sentencepiece,   // "llama"
};

// Token texts that end a turn, and so generation, besides EOS: llama.cpp's list (llama-vocab.cpp,
// "special_eog_ids"), less the entries that need its gpt-oss and model-specific workarounds.
inline constexpr std::array<std::string_view, 11> end_of_turn_texts{
    "<|eot_id|>",      "<|im_end|>",         "<|end|>", "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",         "<EOT>",   "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>"};

// Everything a tokenizer is built from; the views need only outlive the Tokenizer's constructor.
struct TokenizerSpec {
    TokenizerModel model = TokenizerModel::byte_level_bpe;
    std::vector<std::string_view> tokens;  // as in tokenizer.ggml.tokens (byte-level or ▁ spelling)
    std::vector<std::int32_t> token_types;  // TokenType values; empty means all normal
    std::vector<std::string_view> merges;   // byte-level BPE: "left right", highest priority first
    std::vector<float> scores;              // SentencePiece: higher merges first; empty means all 0
    PreTokenizer pre_tokenizer = PreTokenizer::smollm;  // byte-level BPE only
    std::optional<TokenId> bos, eos, unknown, padding;
    std::vector<TokenId> end_of_turn;  // more ids that end generation (tokenizer.ggml.eot_token_id)
    bool add_bos = false;              // whether prompts start with BOS (see encode_prompt)
    bool add_eos = false;              // whether prompts end with EOS (see encode_prompt)
    bool add_space_prefix = false;     // SentencePiece: a space before each text fragment
};

class Tokenizer {
  public:
    explicit Tokenizer(TokenizerSpec const& spec)
        : model_(spec.model),
          pre_tokenizer_(spec.pre_tokenizer),
          bos_(spec.bos),
          eos_(spec.eos),
          unknown_(spec.unknown),
          padding_(spec.padding),
          add_bos_(spec.add_bos),
          add_eos_(spec.add_eos),
          add_space_prefix_(spec.add_space_prefix),
          cache_(std::make_shared<PieceCache>()) {
        std::size_t const n = spec.tokens.size();
        if (n == 0) throw Error("tokenizer: the vocabulary is empty");
        if (n > static_cast<std::size_t>(INT32_MAX)) throw Error("tokenizer: vocabulary too large");
        if (!spec.token_types.empty() && spec.token_types.size() != n) {
            throw Error("tokenizer: " + std::to_string(spec.token_types.size()) +
                        " token types for " + std::to_string(n) + " tokens");
        }
        if (!spec.scores.empty() && spec.scores.size() != n) {
            throw Error("tokenizer: " + std::to_string(spec.scores.size()) + " scores for " +
                        std::to_string(n) + " tokens");
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
            bytes_.push_back(decoded_bytes(texts_.back(), type));
        }
        if (model_ == TokenizerModel::sentencepiece) {
            scores_ = spec.scores.empty() ? std::vector<float>(n, 0.f) : spec.scores;
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
        if (model_ == TokenizerModel::byte_level_bpe) {
            build_byte_tokens();
            build_merges(spec.merges);
        } else {
            build_byte_fallback();
        }
        build_specials();
        build_end_of_generation(spec.end_of_turn);
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
        // SentencePiece's prefix space goes before the first fragment and before each one that
        // follows a special token (llama.cpp: "prefix with space if previous is special").
        bool after_special = true;
        auto const encode_plain = [&](std::string_view plain) {
            if (model_ == TokenizerModel::sentencepiece) {
                encode_sentencepiece(plain, add_space_prefix_ && after_special, ids);
            } else {
                pre_tokenize(pre_tokenizer_, plain,
                             [&](std::string_view piece) { encode_piece(piece, ids); });
            }
            after_special = false;
        };
        if (!has_specials_) {
            encode_plain(text);
            return;
        }
        std::size_t plain_start = 0;
        for (std::size_t pos = 0; pos < text.size();) {
            auto const match = special_at(text, pos, specials);
            if (!match) {
                ++pos;
                continue;
            }
            if (plain_start < pos) encode_plain(text.substr(plain_start, pos - plain_start));
            ids.push_back(match->id);
            after_special = true;
            pos += match->length;
            plain_start = pos;
        }
        if (plain_start < text.size()) encode_plain(text.substr(plain_start));
    }

    // A prompt as the model expects it: encode() with BOS before it when the file's add_bos
    // says so, and EOS after it when add_eos does (llama.cpp's add_special).
    std::vector<TokenId> encode_prompt(std::string_view text,
                                       SpecialTokens specials = SpecialTokens::parse) const {
        std::vector<TokenId> ids;
        ids.reserve(text.size() / 3 + 2);
        if (add_bos_ && bos_) ids.push_back(*bos_);
        encode_into(text, ids, specials);
        if (add_eos_ && eos_) ids.push_back(*eos_);
        return ids;
    }

    // The text of a token sequence. With SentencePiece's add_space_prefix, the space encode()
    // put before the text is taken off the first token's text again (llama.cpp's detokenize);
    // a sequence that starts with a special token (BOS) keeps its spaces.
    std::string decode(std::span<TokenId const> ids,
                       SpecialText specials = SpecialText::keep) const {
        std::string out;
        for (std::size_t i = 0; i < ids.size(); ++i) {
            append_token(out, ids[i], specials);
            if (i == 0 && add_space_prefix_ && out.starts_with(' ')) out.erase(0, 1);
        }
        return out;
    }

    // Appends one token's bytes to `out`.
    void append_token(std::string& out, TokenId id,
                      SpecialText specials = SpecialText::keep) const {
        check_id(id);
        if (specials == SpecialText::skip &&
            (types_[id] == TokenType::control || types_[id] == TokenType::unknown)) {
            return;
        }
        out += bytes_[id];
    }

    TokenizerModel model() const { return model_; }
    std::size_t vocab_size() const { return texts_.size(); }
    PreTokenizer pre_tokenizer() const { return pre_tokenizer_; }

    // The bytes a token decodes to.
    std::string_view token_bytes(TokenId id) const {
        check_id(id);
        return bytes_[id];
    }
    // The token as the vocabulary spells it (byte-level alphabet or ▁ for normal tokens).
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
    // SentencePiece's merge priority of a token (0 for byte-level BPE, which ranks merges).
    float token_score(TokenId id) const {
        check_id(id);
        return scores_.empty() ? 0.f : scores_[id];
    }

    // The tokens after which a model has finished: EOS, the file's end-of-turn ids, and the
    // tokens spelled like one of end_of_turn_texts (Gemma's <end_of_turn>, ChatML's
    // <|im_end|>), as llama.cpp's end-of-generation set. Sorted, no duplicates.
    std::span<TokenId const> end_of_generation() const { return end_of_generation_; }
    bool ends_generation(TokenId id) const {
        return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
    }

    // Whether the vocabulary has a token for this byte. Vocabularies trained on text often lack
    // bytes that never occur in it (SmolLM2: 21 of 256, e.g. 0xC0, 0xFF and some controls);
    // encode() drops such bytes, as HF `tokenizers` and llama.cpp do, rather than emit an
    // unknown token the model would read as text. Every other byte string round-trips.
    // SentencePiece vocabularies with byte fallback (Gemma) spell all 256.
    bool spells_byte(std::uint8_t byte) const { return byte_spelled_[byte]; }
    // Whether the model expects BOS before a prompt; encode() leaves that to the caller,
    // encode_prompt() honours it.
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }

  private:
    struct SpecialMatch {
        TokenId id;
        std::size_t length;
    };
    // The special tokens that start with one byte, longest first, and their distinct lengths.
    struct SpecialBucket {
        std::vector<TokenId> ids;
        std::vector<std::size_t> lengths;
    };
    // Up to this many tokens a bucket is scanned; a larger one is looked up by length.
    static constexpr std::size_t scanned_bucket_max = 32;
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

    // The bytes a token stands for in decoded text. Control and user-defined tokens are their
    // own text in both models.
    std::string decoded_bytes(std::string_view text, TokenType type) const {
        if (type == TokenType::control || type == TokenType::user_defined) return std::string(text);
        if (model_ == TokenizerModel::byte_level_bpe) return byte_level_decode(text);
        switch (type) {
            case TokenType::normal:
                return unescape_spaces(text);
            case TokenType::unknown:
                return std::string(text);
            case TokenType::byte:
                if (auto const byte = byte_of_fallback_text(text)) return std::string(1, *byte);
                throw Error("tokenizer: byte token '" + std::string(text) + "' is not <0xNN>");
            default:
                return {};  // unused and undefined tokens decode to nothing (llama.cpp)
        }
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
            byte_spelled_[b] = id.has_value();
        }
    }

    // SentencePiece's byte fallback: <0xNN>, else the byte as a one-character token (llama.cpp's
    // byte_to_token), else the unknown token (the byte is lost), else the byte is dropped.
    void build_byte_fallback() {
        for (unsigned b = 0; b < 256; ++b) {
            auto const byte = static_cast<std::uint8_t>(b);
            auto id = find_token_text(byte_fallback_text(byte));
            if (!id) id = find_token_text(std::string(1, static_cast<char>(byte)));
            byte_spelled_[b] = id.has_value();
            if (!id) id = unknown_;
            byte_tokens_[b] = id ? *id : -1;
        }
    }

    void build_end_of_generation(std::vector<TokenId> const& end_of_turn) {
        if (eos_) end_of_generation_.push_back(*eos_);
        for (TokenId const id : end_of_turn) {
            check_id(id);
            end_of_generation_.push_back(id);
        }
        for (std::string_view const text : end_of_turn_texts) {
            if (auto const id = find_token_text(text)) end_of_generation_.push_back(*id);
        }
        std::ranges::sort(end_of_generation_);
        auto const tail = std::ranges::unique(end_of_generation_);
        end_of_generation_.erase(tail.begin(), tail.end());
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

    bool is_special(TokenId id) const {
        return types_[id] == TokenType::control || types_[id] == TokenType::user_defined ||
               types_[id] == TokenType::unknown;
    }

    void build_specials() {
        for (std::size_t id = 0; id < texts_.size(); ++id) {
            if (!is_special(static_cast<TokenId>(id)) || texts_[id].empty()) continue;
            specials_by_first_byte_[static_cast<std::uint8_t>(texts_[id][0])].ids.push_back(
                static_cast<TokenId>(id));
            has_specials_ = true;
        }
        for (SpecialBucket& bucket : specials_by_first_byte_) {
            // Longest first, so the first match at a position is the longest one.
            std::stable_sort(bucket.ids.begin(), bucket.ids.end(), [&](TokenId a, TokenId b) {
                return texts_[a].size() > texts_[b].size();
            });
            for (TokenId const id : bucket.ids) {
                if (bucket.lengths.empty() || bucket.lengths.back() != texts_[id].size())
                    bucket.lengths.push_back(texts_[id].size());
            }
        }
    }

    // The longest special token at text[pos]; with SpecialTokens::as_text only user-defined
    // ones, which are content.
    std::optional<SpecialMatch> special_at(std::string_view text, std::size_t pos,
                                           SpecialTokens specials) const {
        auto const allowed = [&](TokenId id) {
            return specials == SpecialTokens::parse || types_[id] == TokenType::user_defined;
        };
        SpecialBucket const& bucket = specials_by_first_byte_[static_cast<std::uint8_t>(text[pos])];
        std::string_view const rest = text.substr(pos);
        if (bucket.ids.size() <= scanned_bucket_max) {
            for (TokenId const id : bucket.ids) {
                if (allowed(id) && rest.starts_with(texts_[id]))
                    return SpecialMatch{id, texts_[id].size()};
            }
            return std::nullopt;
        }
        // Gemma has 6,000 control tokens starting with '<' (<unused0>..): one lookup per length
        // instead of one comparison per token.
        for (std::size_t const length : bucket.lengths) {
            if (length > rest.size()) continue;
            auto const it = id_by_text_.find(rest.substr(0, length));
            if (it != id_by_text_.end() && is_special(it->second) && allowed(it->second))
                return SpecialMatch{it->second, length};
        }
        return std::nullopt;
    }

    // One fragment between special tokens, SentencePiece style. Merges may only produce the
    // tokens SentencePiece lets them (normal, user-defined, unused): never a control or byte
    // token, so user text can never turn into <start_of_turn> by merging its characters.
    void encode_sentencepiece(std::string_view plain, bool space_prefix,
                              std::vector<TokenId>& ids) const {
        std::string const escaped = space_prefix
                                        ? std::string(sentencepiece_space) + escape_spaces(plain)
                                        : escape_spaces(plain);
        auto const find = [&](std::string_view piece) -> std::optional<ScoredToken> {
            auto const it = id_by_text_.find(piece);
            if (it == id_by_text_.end()) return std::nullopt;
            TokenType const type = types_[it->second];
            if (type != TokenType::normal && type != TokenType::user_defined &&
                type != TokenType::unused) {
                return std::nullopt;
            }
            return ScoredToken{it->second, scores_[it->second]};
        };
        sentencepiece_merge(escaped, find, byte_tokens_, ids);
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

    TokenizerModel model_;
    PreTokenizer pre_tokenizer_;
    std::optional<TokenId> bos_, eos_, unknown_, padding_;
    bool add_bos_, add_eos_, add_space_prefix_;
    std::vector<TokenId> end_of_generation_;
    std::vector<float> scores_;  // SentencePiece only
    std::vector<std::string> texts_;
    std::vector<std::string> bytes_;
    std::vector<TokenType> types_;
    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> id_by_text_;
    std::array<TokenId, 256> byte_tokens_{};
    std::array<bool, 256> byte_spelled_{};
    std::unordered_map<std::uint64_t, MergeRule> merges_;
    std::array<SpecialBucket, 256> specials_by_first_byte_{};
    bool has_specials_ = false;
    std::shared_ptr<PieceCache> cache_;
};

}  // namespace tinfer::tok
