#pragma once
// A context-free grammar over bytes in a GBNF-like notation (llama.cpp's), parsed into a flat
// form the matcher (matcher.hpp) walks as a set of pushdown stacks:
//
//   root  ::= "{" ws pair ("," ws pair)* "}"     # rules; `root` is where matching starts
//   pair  ::= [a-z]+ ":" ws ( "yes" | "no" )?   # literals, classes, groups, * + ? {m} {m,n}
//   ws    ::= [ \t\n]*                          # [^...] negates; \xHH \n \t \r \\ \" \] \-
//
// A rule runs to the next `name ::=`; `#` starts a comment. Errors name the line and column.
// Left recursion (a rule that can reach itself without consuming a byte, `x*` of a nullable x
// included) is refused: a pushdown matcher would expand it forever.
#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <tinfer/core/error.hpp>

namespace tinfer::grammar {

struct GrammarError : Error {
    using Error::Error;
};

// One element of an alternative: a byte class, a reference to a rule, or the alternative's end.
struct Element {
    enum class Kind : std::uint8_t { bytes, rule, end };
    Kind kind = Kind::end;
    int rule = -1;             // Kind::rule
    std::bitset<256> accepts;  // Kind::bytes
};

// The parsed grammar: every alternative of every rule is a run of elements ending in
// Kind::end, all in one flat array, so a matcher position is one index.
class Grammar {
  public:
    static Grammar parse(std::string_view text, std::string_view root = "root");

    std::vector<Element> const& elements() const { return elements_; }
    // Where each alternative of rule r starts in elements().
    std::vector<int> const& alternatives(int rule) const { return alternatives_[rule]; }
    int root() const { return root_; }
    int rule_count() const { return static_cast<int>(alternatives_.size()); }
    std::string const& rule_name(int rule) const { return names_[rule]; }

  private:
    friend class GrammarBuilder;
    std::vector<Element> elements_;
    std::vector<std::vector<int>> alternatives_;
    std::vector<std::string> names_;
    int root_ = -1;
};

namespace detail {

// An expression tree while parsing, flattened into rules afterwards.
struct Node {
    enum class Kind : std::uint8_t { bytes, ref, seq, alt };
    Kind kind;
    std::bitset<256> accepts;
    std::string name;  // ref
    int line = 0, column = 0;
    std::vector<Node> children;
};

class Parser {
  public:
    explicit Parser(std::string_view text) : text_(text) {}

    std::vector<std::pair<std::string, Node>> parse_rules() {
        std::vector<std::pair<std::string, Node>> rules;
        skip_space(true);
        while (!at_end()) {
            int const line = line_, column = column_;
            std::string name = identifier();
            if (name.empty()) fail("expected a rule name");
            skip_space(true);
            if (text_.substr(pos_, 3) != "::=")
                fail("expected '::=' after rule name '" + name + "'");
            advance(3);
            Node body = alternation();
            for (auto const& [other, _] : rules)
                if (other == name)
                    throw GrammarError("grammar: line " + std::to_string(line) + ", column " +
                                       std::to_string(column) + ": rule '" + name +
                                       "' is defined twice");
            rules.emplace_back(std::move(name), std::move(body));
            skip_space(true);
        }
        return rules;
    }

  private:
    [[noreturn]] void fail(std::string const& what) const {
        throw GrammarError("grammar: line " + std::to_string(line_) + ", column " +
                           std::to_string(column_) + ": " + what);
    }
    bool at_end() const { return pos_ >= text_.size(); }
    char peek(std::size_t ahead = 0) const {
        return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
    }
    void advance(std::size_t n = 1) {
        for (std::size_t i = 0; i < n && !at_end(); ++i, ++pos_) {
            if (text_[pos_] == '\n') {
                ++line_;
                column_ = 1;
            } else {
                ++column_;
            }
        }
    }
    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_';
    }
    // Skips blanks and comments; newlines too when `newlines` (between rules, or inside a rule
    // when the next line does not start a new rule: see at_rule_start).
    void skip_space(bool newlines) {
        while (!at_end()) {
            char const c = peek();
            if (c == '#') {
                while (!at_end() && peek() != '\n') advance();
            } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                advance();
            } else {
                break;
            }
        }
    }
    std::string identifier() {
        std::string name;
        while (!at_end() && is_name_char(peek())) {
            name += peek();
            advance();
        }
        return name;
    }
    // Whether the text from here is `name ::=` (a new rule begins).
    bool at_rule_start() const {
        std::size_t p = pos_;
        while (p < text_.size() && is_name_char(text_[p])) ++p;
        if (p == pos_) return false;
        while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
        return text_.substr(p, 3) == "::=";
    }
    void skip_in_rule() {
        for (;;) {
            skip_space(false);
            if (peek() != '\n') return;
            // A newline continues the rule unless the next line starts another one.
            std::size_t const saved_pos = pos_;
            int const saved_line = line_, saved_column = column_;
            skip_space(true);
            if (at_end() || at_rule_start()) {
                pos_ = saved_pos;
                line_ = saved_line;
                column_ = saved_column;
                return;
            }
        }
    }
    bool rule_ends_here() {
        skip_in_rule();
        return at_end() || peek() == '\n';
    }

    Node alternation() {
        Node alt{.kind = Node::Kind::alt, .line = line_, .column = column_};
        alt.children.push_back(sequence());
        while (!rule_ends_here() && peek() == '|') {
            advance();
            alt.children.push_back(sequence());
        }
        return alt;
    }
    Node sequence() {
        Node seq{.kind = Node::Kind::seq, .line = line_, .column = column_};
        while (!rule_ends_here() && peek() != '|' && peek() != ')') {
            Node item = primary();
            seq.children.push_back(postfix(std::move(item)));
        }
        return seq;
    }
    Node postfix(Node item) {
        for (;;) {
            skip_space(false);
            char const c = peek();
            int min = 0, max = -1;  // -1: unbounded
            if (c == '*') {
                advance();
            } else if (c == '+') {
                advance();
                min = 1;
            } else if (c == '?') {
                advance();
                max = 1;
            } else if (c == '{') {
                advance();
                min = number();
                max = min;
                if (peek() == ',') {
                    advance();
                    max = peek() == '}' ? -1 : number();
                }
                if (peek() != '}') fail("expected '}' closing a repetition");
                advance();
                if (max >= 0 && max < min) fail("repetition {m,n} has n < m");
            } else {
                return item;
            }
            item = repeat(std::move(item), min, max);
        }
    }
    int number() {
        if (!(peek() >= '0' && peek() <= '9')) fail("expected a number in a repetition");
        int n = 0;
        while (peek() >= '0' && peek() <= '9') {
            n = n * 10 + (peek() - '0');
            if (n > 10000) fail("repetition count over 10000");
            advance();
        }
        return n;
    }
    // x{min,max} as a sequence: min copies, then either a star (max unbounded) or nested
    // optionals x (x (x)?)? so that no two parses of one string exist.
    static Node repeat(Node item, int min, int max) {
        Node seq{.kind = Node::Kind::seq, .line = item.line, .column = item.column};
        for (int i = 0; i < min; ++i) seq.children.push_back(item);
        Node const empty{.kind = Node::Kind::seq, .line = item.line, .column = item.column};
        if (max < 0) {
            // star: marked by a ref to itself, resolved when flattening (name "*").
            Node star{
                .kind = Node::Kind::ref, .name = "*", .line = item.line, .column = item.column};
            star.children.push_back(item);
            seq.children.push_back(std::move(star));
        } else {
            Node tail = empty;
            for (int i = min; i < max; ++i) {
                Node with{.kind = Node::Kind::seq, .line = item.line, .column = item.column};
                with.children.push_back(item);
                with.children.push_back(std::move(tail));
                Node opt{.kind = Node::Kind::alt, .line = item.line, .column = item.column};
                opt.children.push_back(std::move(with));
                opt.children.push_back(empty);
                tail = std::move(opt);
            }
            seq.children.push_back(std::move(tail));
        }
        return seq;
    }
    Node primary() {
        int const line = line_, column = column_;
        char const c = peek();
        if (c == '"') {
            advance();
            Node seq{.kind = Node::Kind::seq, .line = line, .column = column};
            while (peek() != '"') {
                if (at_end() || peek() == '\n') fail("unterminated string literal");
                std::bitset<256> one;
                one.set(escaped_byte());
                seq.children.push_back(Node{
                    .kind = Node::Kind::bytes, .accepts = one, .line = line, .column = column});
            }
            advance();
            return seq;
        }
        if (c == '[') {
            advance();
            bool const negated = peek() == '^';
            if (negated) advance();
            std::bitset<256> set;
            while (peek() != ']') {
                if (at_end() || peek() == '\n') fail("unterminated character class");
                unsigned const lo = escaped_byte();
                unsigned hi = lo;
                if (peek() == '-' && peek(1) != ']') {
                    advance();
                    if (at_end() || peek() == '\n') fail("unterminated character class");
                    hi = escaped_byte();
                    if (hi < lo) fail("character range is backwards");
                }
                for (unsigned b = lo; b <= hi; ++b) set.set(b);
            }
            advance();
            if (negated) set.flip();
            return Node{.kind = Node::Kind::bytes, .accepts = set, .line = line, .column = column};
        }
        if (c == '.') {
            advance();
            std::bitset<256> any;
            any.set();
            return Node{.kind = Node::Kind::bytes, .accepts = any, .line = line, .column = column};
        }
        if (c == '(') {
            advance();
            Node inner = alternation();
            skip_in_rule();
            if (peek() != ')') fail("expected ')'");
            advance();
            return inner;
        }
        if (is_name_char(c)) {
            std::string name = identifier();
            return Node{
                .kind = Node::Kind::ref, .name = std::move(name), .line = line, .column = column};
        }
        if (at_end() || c == '\n') fail("expected an element, found the end of the rule");
        fail(std::string("unexpected character '") + c + "'");
    }
    unsigned escaped_byte() {
        char const c = peek();
        advance();
        if (c != '\\') return static_cast<unsigned char>(c);
        char const e = peek();
        advance();
        switch (e) {
            case 'n':
                return '\n';
            case 't':
                return '\t';
            case 'r':
                return '\r';
            case '\\':
                return '\\';
            case '"':
                return '"';
            case ']':
                return ']';
            case '[':
                return '[';
            case '-':
                return '-';
            case '^':
                return '^';
            case '/':
                return '/';
            case 'x': {
                unsigned v = 0;
                for (int i = 0; i < 2; ++i) {
                    char const h = peek();
                    int d = -1;
                    if (h >= '0' && h <= '9') d = h - '0';
                    if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
                    if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
                    if (d < 0) fail("\\x needs two hex digits");
                    v = v * 16 + static_cast<unsigned>(d);
                    advance();
                }
                return v;
            }
            default:
                fail(std::string("unknown escape '\\") + e + "'");
        }
    }

    std::string_view text_;
    std::size_t pos_ = 0;
    int line_ = 1, column_ = 1;
};

}  // namespace detail

class GrammarBuilder {
  public:
    static Grammar build(std::vector<std::pair<std::string, detail::Node>> const& rules,
                         std::string_view root_name) {
        GrammarBuilder b;
        for (auto const& [name, _] : rules) b.new_rule(name);
        auto const root = b.ids_.find(std::string(root_name));
        if (root == b.ids_.end())
            throw GrammarError("grammar: no rule named '" + std::string(root_name) + "'");
        // Each rule's body becomes its alternatives; helper rules (groups under postfix ops,
        // stars) are appended as they are met.
        for (std::size_t r = 0; r < rules.size(); ++r)
            b.define(static_cast<int>(r), rules[r].second);
        b.g_.root_ = root->second;
        b.flatten();
        b.refuse_left_recursion();
        return std::move(b.g_);
    }

  private:
    int new_rule(std::string name) {
        int const id = static_cast<int>(names_.size());
        ids_.emplace(name, id);
        names_.push_back(std::move(name));
        alts_.emplace_back();
        return id;
    }
    void define(int rule, detail::Node const& body) {
        // sequence_of may append helper rules (growing alts_): index alts_ only afterwards.
        if (body.kind == detail::Node::Kind::alt) {
            for (auto const& c : body.children) {
                auto seq = sequence_of(c);
                alts_[rule].push_back(std::move(seq));
            }
        } else {
            auto seq = sequence_of(body);
            alts_[rule].push_back(std::move(seq));
        }
    }
    std::vector<Element> sequence_of(detail::Node const& n) {
        std::vector<Element> out;
        append(n, out);
        return out;
    }
    void append(detail::Node const& n, std::vector<Element>& out) {
        using K = detail::Node::Kind;
        switch (n.kind) {
            case K::bytes:
                out.push_back({.kind = Element::Kind::bytes, .accepts = n.accepts});
                break;
            case K::seq:
                for (auto const& c : n.children) append(c, out);
                break;
            case K::alt: {
                if (n.children.size() == 1) {
                    append(n.children[0], out);
                    break;
                }
                int const helper = new_rule("(group)");
                std::vector<std::vector<Element>> helper_alts;
                for (auto const& c : n.children) helper_alts.push_back(sequence_of(c));
                alts_[helper] = std::move(helper_alts);
                out.push_back({.kind = Element::Kind::rule, .rule = helper});
                break;
            }
            case K::ref: {
                if (n.name == "*") {
                    // R ::= x R | (empty)
                    int const helper = new_rule("(star)");
                    std::vector<Element> more = sequence_of(n.children[0]);
                    more.push_back({.kind = Element::Kind::rule, .rule = helper});
                    alts_[helper] = {std::move(more), {}};
                    out.push_back({.kind = Element::Kind::rule, .rule = helper});
                    break;
                }
                auto const it = ids_.find(n.name);
                if (it == ids_.end())
                    throw GrammarError("grammar: line " + std::to_string(n.line) + ", column " +
                                       std::to_string(n.column) + ": undefined rule '" + n.name +
                                       "'");
                out.push_back({.kind = Element::Kind::rule, .rule = it->second});
                break;
            }
        }
    }
    void flatten() {
        g_.names_ = names_;
        g_.alternatives_.assign(alts_.size(), {});
        for (std::size_t r = 0; r < alts_.size(); ++r) {
            for (auto const& alt : alts_[r]) {
                g_.alternatives_[r].push_back(static_cast<int>(g_.elements_.size()));
                g_.elements_.insert(g_.elements_.end(), alt.begin(), alt.end());
                g_.elements_.push_back({.kind = Element::Kind::end});
            }
        }
    }
    // nullable[r]: rule r can match the empty string. Then a rule "starts with" each rule it
    // references before its first byte; a cycle in that relation is left recursion.
    void refuse_left_recursion() {
        std::size_t const n = alts_.size();
        std::vector<bool> nullable(n, false);
        for (bool changed = true; changed;) {
            changed = false;
            for (std::size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (auto const& alt : alts_[r]) {
                    bool all = true;
                    for (auto const& e : alt)
                        if (e.kind == Element::Kind::bytes || !nullable[e.rule]) {
                            all = false;
                            break;
                        }
                    if (all) {
                        nullable[r] = true;
                        changed = true;
                        break;
                    }
                }
            }
        }
        std::vector<std::vector<int>> starts(n);
        for (std::size_t r = 0; r < n; ++r)
            for (auto const& alt : alts_[r])
                for (auto const& e : alt) {
                    if (e.kind == Element::Kind::bytes) break;
                    starts[r].push_back(e.rule);
                    if (!nullable[e.rule]) break;
                }
        std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
        std::vector<int> path;
        auto visit = [&](auto&& self, int r) -> void {
            mark[r] = 1;
            path.push_back(r);
            for (int s : starts[r]) {
                if (mark[s] == 1) {
                    std::string cycle;
                    bool on = false;
                    for (int p : path) {
                        if (p == s) on = true;
                        if (on) cycle += names_[p] + " -> ";
                    }
                    throw GrammarError(
                        "grammar: left recursion (a rule reaches itself without "
                        "consuming a byte; a repetition of something that can be "
                        "empty does so too): " +
                        cycle + names_[s]);
                }
                if (mark[s] == 0) self(self, s);
            }
            path.pop_back();
            mark[r] = 2;
        };
        for (std::size_t r = 0; r < n; ++r)
            if (mark[r] == 0) visit(visit, static_cast<int>(r));
    }

    Grammar g_;
    std::map<std::string, int> ids_;
    std::vector<std::string> names_;
    std::vector<std::vector<std::vector<Element>>> alts_;
};

inline Grammar Grammar::parse(std::string_view text, std::string_view root) {
    detail::Parser parser(text);
    auto const rules = parser.parse_rules();
    return GrammarBuilder::build(rules, root);
}

}  // namespace tinfer::grammar
