#pragma once
// The incremental matcher: which vocabulary tokens can continue a grammar's output, step by
// step. A matcher state is a set of pushdown stacks over the grammar's flat elements (as in
// llama.cpp's GBNF sampler), each stack topped by a byte class; a byte advances every stack
// whose class accepts it and expands rule references until each top is a byte class again.
//
// What makes it cheap per token (llguidance and xgrammar do more; this is the simple core):
//   * stacks are interned (a node = position + parent node), so a state is a sorted list of
//     ints and states are interned too; a tail call (a reference last in its alternative)
//     reuses its parent, so `x*` does not grow the stack;
//   * byte transitions between interned states are memoised: the matcher lazily builds the
//     DFA of the parts of the grammar the output visits;
//   * the vocabulary is a trie in preorder (Vocabulary), walked once per state, skipping the
//     subtree of every dead prefix; the resulting mask is cached per state.
// A Matcher is a value: copy it to save a state, assign it back to restore one.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <tinfer/grammar/grammar.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>

namespace tinfer::grammar {

// A vocabulary's token bytes as a trie in preorder, built once per tokenizer and shared.
class Vocabulary {
  public:
    // `bytes[t]` is what token t adds to the output ("" for tokens no grammar may emit:
    // control and unused tokens); `end_tokens` end a generation (allowed once the output is
    // complete). `size` is the model's vocabulary, which may exceed bytes.size().
    Vocabulary(std::vector<std::string> bytes, std::vector<std::int32_t> end_tokens, int size)
        : bytes_(std::move(bytes)), end_tokens_(std::move(end_tokens)), size_(size) {
        if (size_ < static_cast<int>(bytes_.size()))
            throw std::invalid_argument("grammar::Vocabulary: size below the token count");
        // An end token ends the output whatever it spells: it is never part of a sentence.
        for (std::int32_t t : end_tokens_)
            if (t >= 0 && t < static_cast<int>(bytes_.size())) bytes_[t].clear();
        build_trie();
    }

    // The tokens of a tokenizer: normal, byte and user-defined ones spell their bytes; the
    // end-of-generation tokens end the output.
    static std::shared_ptr<Vocabulary const> of(tok::Tokenizer const& tokenizer, int model_vocab) {
        std::vector<std::string> bytes(tokenizer.vocab_size());
        for (std::size_t t = 0; t < bytes.size(); ++t) {
            auto const id = static_cast<tok::TokenId>(t);
            auto const type = tokenizer.token_type(id);
            if (type == tok::TokenType::normal || type == tok::TokenType::byte ||
                type == tok::TokenType::user_defined || type == tok::TokenType::undefined)
                bytes[t] = std::string(tokenizer.token_bytes(id));
        }
        auto const eog = tokenizer.end_of_generation();
        return std::make_shared<Vocabulary const>(
            std::move(bytes), std::vector<std::int32_t>(eog.begin(), eog.end()),
            std::max<int>(model_vocab, static_cast<int>(tokenizer.vocab_size())));
    }

    int size() const { return size_; }
    std::string_view bytes(std::int32_t t) const {
        return t >= 0 && t < static_cast<int>(bytes_.size()) ? std::string_view(bytes_[t])
                                                             : std::string_view();
    }
    std::span<std::int32_t const> end_tokens() const { return end_tokens_; }
    bool is_end(std::int32_t t) const {
        return std::ranges::find(end_tokens_, t) != end_tokens_.end();
    }

    // Trie node i (preorder; node 0 is the root, the empty prefix): its byte and depth, the
    // end of its subtree, and the tokens whose bytes end there.
    struct TrieNode {
        std::uint8_t byte;
        std::uint16_t depth;
        std::int32_t subtree_end;
        std::int32_t first_token, token_count;
    };
    std::vector<TrieNode> const& trie() const { return trie_; }
    std::span<std::int32_t const> tokens_at(TrieNode const& n) const {
        return std::span<std::int32_t const>(trie_tokens_)
            .subspan(static_cast<std::size_t>(n.first_token),
                     static_cast<std::size_t>(n.token_count));
    }
    int max_depth() const { return max_depth_; }

  private:
    void build_trie() {
        std::vector<std::int32_t> order;
        for (std::size_t t = 0; t < bytes_.size(); ++t)
            if (!bytes_[t].empty() && bytes_[t].size() < 65535)
                order.push_back(static_cast<std::int32_t>(t));
        std::ranges::sort(order,
                          [&](std::int32_t a, std::int32_t b) { return bytes_[a] < bytes_[b]; });
        // Sorted tokens give the preorder directly: a stack of open prefixes.
        trie_.push_back({0, 0, 0, 0, 0});
        std::vector<int> open{0};  // node index per depth
        std::string prefix;
        for (std::int32_t t : order) {
            std::string const& s = bytes_[t];
            std::size_t common = 0;
            while (common < prefix.size() && common < s.size() && prefix[common] == s[common])
                ++common;
            while (open.size() > common + 1) {
                trie_[open.back()].subtree_end = static_cast<std::int32_t>(trie_.size());
                open.pop_back();
            }
            prefix.resize(common);
            for (std::size_t d = common; d < s.size(); ++d) {
                open.push_back(static_cast<int>(trie_.size()));
                trie_.push_back({static_cast<std::uint8_t>(s[d]), static_cast<std::uint16_t>(d + 1),
                                 0, static_cast<std::int32_t>(trie_tokens_.size()), 0});
                prefix.push_back(s[d]);
            }
            max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
            TrieNode& leaf = trie_[open.back()];
            if (leaf.token_count == 0)
                leaf.first_token = static_cast<std::int32_t>(trie_tokens_.size());
            // Tokens of equal bytes are adjacent in `order`, so each node's tokens are contiguous.
            trie_tokens_.push_back(t);
            ++leaf.token_count;
        }
        while (!open.empty()) {
            trie_[open.back()].subtree_end = static_cast<std::int32_t>(trie_.size());
            open.pop_back();
        }
    }

    std::vector<std::string> bytes_;
    std::vector<std::int32_t> end_tokens_;
    int size_;
    std::vector<TrieNode> trie_;
    std::vector<std::int32_t> trie_tokens_;
    int max_depth_ = 0;
};

// What a request carries: a grammar bound to the vocabulary of the model it runs on.
struct Constraint {
    std::shared_ptr<Grammar const> grammar;
    std::shared_ptr<Vocabulary const> vocabulary;
};

inline std::shared_ptr<Constraint const> constrain(Grammar grammar,
                                                   std::shared_ptr<Vocabulary const> vocabulary) {
    return std::make_shared<Constraint const>(
        Constraint{std::make_shared<Grammar const>(std::move(grammar)), std::move(vocabulary)});
}

class Matcher {
  public:
    static constexpr std::int32_t dead = -1;

    explicit Matcher(std::shared_ptr<Constraint const> constraint)
        : c_(std::move(constraint)), elements_(&c_->grammar->elements()) {
        std::vector<std::int32_t> stacks;
        bool accepting = false;
        Expansion x;
        for (int alt : c_->grammar->alternatives(c_->grammar->root()))
            expand(alt, -1, stacks, accepting, x);
        state_ = intern_state(std::move(stacks), accepting);
    }

    // The output so far is a complete sentence of the grammar (an end token may follow).
    bool complete() const { return states_[state_].accepting; }
    // Some byte can still follow.
    bool can_continue() const { return !states_[state_].stacks.empty(); }
    bool ended() const { return ended_; }

    // Whether `bytes` can follow the output so far.
    bool accepts_bytes(std::string_view bytes) {
        std::int32_t s = state_;
        for (char ch : bytes) {
            s = step(s, static_cast<std::uint8_t>(ch));
            if (s == dead) return false;
        }
        return true;
    }

    // The tokens allowed next, one bit per token of the vocabulary (end tokens once complete).
    std::vector<std::uint64_t> const& allowed_tokens() {
        if (auto it = mask_of_state_.find(state_); it != mask_of_state_.end()) return it->second;
        // Bounded: a mask is vocab/8 bytes (32 KiB at 262K tokens), and counted repetitions
        // ({0,20}) make many states.
        if (mask_of_state_.size() >= max_cached_masks) mask_of_state_.clear();
        return mask_of_state_[state_] = compute_mask(state_);
    }

    // Sets every disallowed token's logit to -inf. Returns the number of allowed tokens.
    int mask_logits(std::span<float> logits) {
        auto const& mask = allowed_tokens();
        int allowed = 0;
        std::size_t const n =
            std::min<std::size_t>(logits.size(), static_cast<std::size_t>(c_->vocabulary->size()));
        constexpr float ninf = -std::numeric_limits<float>::infinity();
        for (std::size_t w = 0; w * 64 < logits.size(); ++w) {
            std::uint64_t const bits = w < mask.size() ? mask[w] : 0;
            std::size_t const end = std::min(logits.size(), (w + 1) * 64);
            if (bits == ~std::uint64_t{0} && end <= n) {
                allowed += static_cast<int>(end - w * 64);
                continue;
            }
            allowed += std::popcount(bits);
            for (std::size_t t = w * 64; t < end; ++t)
                if (!((bits >> (t - w * 64)) & 1)) logits[t] = ninf;
        }
        return allowed;
    }

    // Advances by an accepted token; throws std::logic_error for a token the mask forbade.
    void accept_token(std::int32_t token) {
        if (ended_) throw std::logic_error("grammar::Matcher: a token after the end token");
        if (c_->vocabulary->is_end(token)) {
            if (!complete())
                throw std::logic_error(
                    "grammar::Matcher: an end token before the output is complete");
            ended_ = true;
            return;
        }
        std::string_view const bytes = c_->vocabulary->bytes(token);
        if (bytes.empty())
            throw std::logic_error("grammar::Matcher: token " + std::to_string(token) +
                                   " spells no bytes");
        std::int32_t s = state_;
        for (char ch : bytes) {
            s = step(s, static_cast<std::uint8_t>(ch));
            if (s == dead)
                throw std::logic_error("grammar::Matcher: token " + std::to_string(token) +
                                       " does not continue the grammar");
        }
        state_ = s;
    }
    void accept_bytes(std::string_view bytes) {
        std::int32_t s = state_;
        for (char ch : bytes) {
            s = step(s, static_cast<std::uint8_t>(ch));
            if (s == dead)
                throw std::logic_error("grammar::Matcher: bytes do not continue the grammar");
        }
        state_ = s;
    }

    // The bytes that can follow the output so far.
    std::bitset<256> next_bytes() const {
        std::bitset<256> out;
        for (std::int32_t s : states_[state_].stacks) out |= (*elements_)[nodes_[s].pos].accepts;
        return out;
    }

    Constraint const& constraint() const { return *c_; }
    std::size_t cached_states() const { return states_.size(); }

    // Where the output stands, without the caches: saving and restoring it is O(1), where a
    // copy of the matcher copies every cached state and mask (checking speculative drafts
    // walks ahead and comes back every round).
    struct Position {
        std::int32_t state;
        bool ended;
    };
    Position position() const { return {state_, ended_}; }
    void restore(Position p) {
        state_ = p.state;
        ended_ = p.ended;
    }
    // Whether `token` may come next: the mask's bit, false once the end token was accepted.
    bool allows(std::int32_t token) {
        if (ended_ || token < 0) return false;
        auto const& mask = allowed_tokens();
        auto const word = static_cast<std::size_t>(token) / 64;
        return word < mask.size() && ((mask[word] >> (static_cast<std::size_t>(token) % 64)) & 1);
    }

  private:
    struct StackNode {
        std::int32_t pos, parent;
    };
    struct State {
        std::vector<std::int32_t> stacks;  // sorted node ids, each topped by a byte class
        bool accepting;
        std::vector<std::int32_t> next;  // per byte: the next state, dead, or -2 unknown
    };
    struct Expansion {
        std::unordered_set<std::uint64_t> seen;
    };
    struct VectorHash {
        std::size_t operator()(std::vector<std::int32_t> const& v) const {
            std::uint64_t h = 1469598103934665603ull;
            for (std::int32_t x : v) h = (h ^ static_cast<std::uint32_t>(x)) * 1099511628211ull;
            return h;
        }
    };

    std::int32_t node(std::int32_t pos, std::int32_t parent) {
        std::uint64_t const key =
            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pos)) << 32) |
            static_cast<std::uint32_t>(parent);
        auto const [it, inserted] =
            node_ids_.try_emplace(key, static_cast<std::int32_t>(nodes_.size()));
        if (inserted) nodes_.push_back({pos, parent});
        return it->second;
    }

    // Expands position `pos` under stack `parent` until every top is a byte class.
    void expand(std::int32_t pos, std::int32_t parent, std::vector<std::int32_t>& out,
                bool& accepting, Expansion& x) {
        Element const& e = (*elements_)[pos];
        switch (e.kind) {
            case Element::Kind::bytes:
                out.push_back(node(pos, parent));
                return;
            case Element::Kind::end:
                if (parent < 0) {
                    accepting = true;
                    return;
                }
                // Pop: continue after the reference that pushed this alternative.
                if (!x.seen.insert((std::uint64_t{1} << 63) | static_cast<std::uint32_t>(parent))
                         .second)
                    return;
                expand(nodes_[parent].pos, nodes_[parent].parent, out, accepting, x);
                return;
            case Element::Kind::rule: {
                // A reference last in its alternative returns straight to the parent.
                std::int32_t const ret = (*elements_)[pos + 1].kind == Element::Kind::end
                                             ? parent
                                             : node(pos + 1, parent);
                std::uint64_t const key =
                    (static_cast<std::uint64_t>(static_cast<std::uint32_t>(e.rule)) << 32) |
                    static_cast<std::uint32_t>(ret);
                if (!x.seen.insert(key).second) return;
                for (int alt : c_->grammar->alternatives(e.rule))
                    expand(alt, ret, out, accepting, x);
                return;
            }
        }
    }

    std::int32_t intern_state(std::vector<std::int32_t> stacks, bool accepting) {
        std::ranges::sort(stacks);
        stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
        if (stacks.empty() && !accepting) return dead;
        if (stacks.size() > max_stacks)
            throw GrammarError("grammar: the matcher holds over " + std::to_string(max_stacks) +
                               " stacks (a very ambiguous grammar)");
        stacks.push_back(accepting ? 1 : 0);  // the key holds the flag too
        auto const [it, inserted] =
            state_ids_.try_emplace(stacks, static_cast<std::int32_t>(states_.size()));
        if (inserted) {
            stacks.pop_back();
            states_.push_back({std::move(stacks), accepting, std::vector<std::int32_t>(256, -2)});
        }
        return it->second;
    }

    std::int32_t step(std::int32_t s, std::uint8_t b) {
        std::int32_t const known = states_[s].next[b];
        if (known != -2) return known;
        std::vector<std::int32_t> out;
        bool accepting = false;
        Expansion x;
        // Copy: expand() may grow nodes_ but not states_; states_ grows in intern_state below.
        std::vector<std::int32_t> const stacks = states_[s].stacks;
        for (std::int32_t id : stacks) {
            StackNode const n = nodes_[id];
            if ((*elements_)[n.pos].accepts.test(b)) expand(n.pos + 1, n.parent, out, accepting, x);
        }
        std::int32_t const next = intern_state(std::move(out), accepting);
        states_[s].next[b] = next;
        return next;
    }

    std::vector<std::uint64_t> compute_mask(std::int32_t s0) {
        Vocabulary const& v = *c_->vocabulary;
        std::vector<std::uint64_t> mask((static_cast<std::size_t>(v.size()) + 63) / 64, 0);
        if (states_[s0].accepting)
            for (std::int32_t t : v.end_tokens()) mask[t / 64] |= std::uint64_t{1} << (t % 64);
        auto const& trie = v.trie();
        std::vector<std::int32_t> at_depth(static_cast<std::size_t>(v.max_depth()) + 1, dead);
        at_depth[0] = s0;
        for (std::size_t i = 1; i < trie.size();) {
            auto const& n = trie[i];
            std::int32_t const parent = at_depth[n.depth - 1];
            std::int32_t const s = states_[parent].stacks.empty() ? dead : step(parent, n.byte);
            if (s == dead) {
                i = static_cast<std::size_t>(n.subtree_end);
                continue;
            }
            at_depth[n.depth] = s;
            for (std::int32_t t : v.tokens_at(n)) mask[t / 64] |= std::uint64_t{1} << (t % 64);
            ++i;
        }
        return mask;
    }

    static constexpr std::size_t max_stacks = 4096;
    static constexpr std::size_t max_cached_masks = 512;

    std::shared_ptr<Constraint const> c_;
    std::vector<Element> const* elements_;
    std::vector<StackNode> nodes_;
    std::unordered_map<std::uint64_t, std::int32_t> node_ids_;
    std::vector<State> states_;
    std::unordered_map<std::vector<std::int32_t>, std::int32_t, VectorHash> state_ids_;
    std::unordered_map<std::int32_t, std::vector<std::uint64_t>> mask_of_state_;
    std::int32_t state_ = dead;
    bool ended_ = false;
};

}  // namespace tinfer::grammar
