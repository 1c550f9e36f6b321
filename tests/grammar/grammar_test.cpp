#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/request.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/sampling.hpp>

#include "json_check.hpp"
#include "testing.hpp"

using namespace tinfer;
using grammar::Grammar;
using grammar::GrammarError;

namespace {

std::string error_of(std::string const& text) {
    try {
        (void)Grammar::parse(text);
    } catch (GrammarError const& e) {
        return e.what();
    }
    return "";
}

bool contains(std::string const& haystack, std::string const& needle) {
    return haystack.find(needle) != std::string::npos;
}

// The reference: which prefixes of the input a rule can derive, straight from the grammar's
// alternatives by memoised recursion (no stacks). With `open`, the end of the input is a
// wildcard: reaching it anywhere means the input is a viable prefix (every rule of the test
// grammars derives some string).
class Reference {
  public:
    Reference(Grammar const& g, std::string s, bool open) : g_(g), s_(std::move(s)), open_(open) {}
    bool derives_all() { return ends_of_rule(g_.root(), 0).contains(static_cast<int>(s_.size())); }

  private:
    std::set<int> ends_of_rule(int rule, int i) {
        auto const key = std::make_pair(rule, i);
        if (auto it = memo_.find(key); it != memo_.end()) return it->second;
        int const n = static_cast<int>(s_.size());
        if (open_ && i == n) return memo_[key] = {n};
        std::set<int> out;
        for (int alt : g_.alternatives(rule)) {
            std::set<int> at{i};
            for (int p = alt; g_.elements()[p].kind != grammar::Element::Kind::end; ++p) {
                auto const& e = g_.elements()[p];
                std::set<int> next;
                for (int j : at) {
                    if (open_ && j == n) {
                        next.insert(n);
                    } else if (e.kind == grammar::Element::Kind::bytes) {
                        if (j < n && e.accepts.test(static_cast<unsigned char>(s_[j])))
                            next.insert(j + 1);
                    } else {
                        auto const sub = ends_of_rule(e.rule, j);
                        next.insert(sub.begin(), sub.end());
                    }
                }
                at = std::move(next);
            }
            out.insert(at.begin(), at.end());
        }
        return memo_[key] = out;
    }
    Grammar const& g_;
    std::string s_;
    bool open_;
    std::map<std::pair<int, int>, std::set<int>> memo_;
};

bool viable(Grammar const& g, std::string const& s) {
    return Reference(g, s, true).derives_all();
}
bool complete(Grammar const& g, std::string const& s) {
    return Reference(g, s, false).derives_all();
}

// A vocabulary of every string of length 1..2 over `alphabet`, then the end token.
std::shared_ptr<grammar::Vocabulary const> small_vocabulary(std::string const& alphabet) {
    std::vector<std::string> tokens;
    for (char a : alphabet) tokens.push_back(std::string(1, a));
    for (char a : alphabet)
        for (char b : alphabet) tokens.push_back(std::string{a, b});
    tokens.push_back("");  // the end token spells nothing
    int const end = static_cast<int>(tokens.size()) - 1;
    return std::make_shared<grammar::Vocabulary const>(tokens, std::vector<std::int32_t>{end},
                                                       end + 1);
}

// Walks every viable prefix up to `depth` bytes and checks the matcher's next bytes, its
// completeness and its token mask against the reference, exactly.
int check_against_reference(std::string const& text, std::string const& alphabet, int depth) {
    Grammar const g = Grammar::parse(text);
    auto const vocab = small_vocabulary(alphabet);
    auto const constraint = grammar::constrain(Grammar::parse(text), vocab);
    int checked = 0;
    std::vector<std::pair<std::string, grammar::Matcher>> frontier{
        {"", grammar::Matcher(constraint)}};
    for (int d = 0; d <= depth; ++d) {
        std::vector<std::pair<std::string, grammar::Matcher>> next;
        for (auto& [prefix, m] : frontier) {
            BOOST_TEST_CONTEXT("grammar " << text << " prefix '" << prefix << "'") {
                BOOST_TEST(m.complete() == complete(g, prefix));
                for (char b : alphabet) {
                    bool const want = viable(g, prefix + b);
                    BOOST_TEST(m.next_bytes().test(static_cast<unsigned char>(b)) == want);
                }
                auto const& mask = m.allowed_tokens();
                for (int t = 0; t < vocab->size(); ++t) {
                    bool const got = (mask[t / 64] >> (t % 64)) & 1;
                    bool const want = vocab->is_end(t)
                                          ? complete(g, prefix)
                                          : viable(g, prefix + std::string(vocab->bytes(t)));
                    BOOST_TEST(got == want, "token '" << vocab->bytes(t) << "'");
                }
                ++checked;
            }
            if (d == depth) continue;
            for (char b : alphabet) {
                if (!viable(g, prefix + b)) continue;
                grammar::Matcher copy = m;  // a copy is a saved state
                copy.accept_token(static_cast<std::int32_t>(alphabet.find(b)));
                next.emplace_back(prefix + b, std::move(copy));
            }
        }
        frontier = std::move(next);
    }
    return checked;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grammar_parser)

BOOST_AUTO_TEST_CASE(parses_the_notation) {
    Grammar const g = Grammar::parse(R"(# a comment
root ::= "ab" [c-e]* x? ( "|" | [^a-z] )+
  "tail"   # a rule goes on over lines
x ::= "\x41\n\"" . [\]\-]{2,3}
)");
    BOOST_TEST(g.rule_name(g.root()) == "root");
    BOOST_TEST(g.rule_count() >= 2);
}

BOOST_AUTO_TEST_CASE(errors_name_line_and_column) {
    BOOST_TEST(contains(error_of("root ::= foo\n"), "line 1, column 10: undefined rule 'foo'"));
    BOOST_TEST(contains(error_of("root ::= \"a\"\nb ::= \"unterminated\n"),
                        "line 2, column 20: unterminated string literal"));
    BOOST_TEST(
        contains(error_of("root ::= [a-\n"), "line 1, column 13: unterminated character class"));
    BOOST_TEST(contains(error_of("root ::= ( \"a\" \n"), "line 1, column 16: expected ')'"));
    BOOST_TEST(contains(error_of("root \"a\"\n"),
                        "line 1, column 6: expected '::=' after rule name 'root'"));
    BOOST_TEST(contains(error_of("root ::= [z-a]\n"), "character range is backwards"));
    BOOST_TEST(contains(error_of("root ::= \"\\q\"\n"), "unknown escape '\\q'"));
    BOOST_TEST(contains(error_of("root ::= \"a\"{3,1}\n"), "repetition {m,n} has n < m"));
    BOOST_TEST(contains(error_of("root ::= \"a\"\nroot ::= \"b\"\n"),
                        "line 2, column 1: rule 'root' is defined twice"));
    BOOST_TEST(contains(error_of("start ::= \"a\"\n"), "no rule named 'root'"));
    BOOST_TEST(contains(error_of("root ::= root \"a\" | \"b\"\n"), "left recursion"));
    BOOST_TEST(contains(error_of("root ::= (\"a\"?)*\n"), "left recursion"));
    BOOST_TEST(contains(error_of("root ::= )\n"), "line 1, column 10"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(matcher_reference)

// Next bytes, completeness and the token mask after every viable prefix, exactly as the
// brute-force reference says.
BOOST_AUTO_TEST_CASE(matches_brute_force_on_small_grammars) {
    struct Case {
        char const* grammar;
        char const* alphabet;
        int depth;
    };
    Case const cases[] = {
        {R"g(root ::= "a" | "ab" | "abc")g", "abcx", 4},
        {R"g(root ::= ( "(" root ")" )*)g", "()x", 7},
        {R"g(root ::= [ab]* "c" [ab]?)g", "abcx", 5},
        {R"g(root ::= x y
x ::= "a"? "b"?
y ::= "c" | x "d")g",
         "abcdx", 4},
        {R"g(root ::= "[" ( v ( "," v )* )? "]"
v ::= [0-9]+ | root)g",
         "[],1x", 6},
        {R"g(root ::= "a"{2,4} "b"{0,2} | "c"+)g", "abcx", 6},
        {R"g(root ::= [^b]? "b")g", "abc", 3},
    };
    int checked = 0;
    for (Case const& c : cases) checked += check_against_reference(c.grammar, c.alphabet, c.depth);
    BOOST_TEST_MESSAGE("prefixes checked: " << checked);
    BOOST_TEST(checked > 100);
}

BOOST_AUTO_TEST_CASE(copy_restores_a_state) {
    auto const constraint =
        grammar::constrain(Grammar::parse(R"(root ::= "ab" | "ac")"), small_vocabulary("abc"));
    grammar::Matcher m(constraint);
    m.accept_token(0);  // "a"
    grammar::Matcher const saved = m;
    m.accept_token(1);  // "b"
    BOOST_TEST(m.complete());
    m = saved;
    BOOST_TEST(!m.complete());
    BOOST_TEST(m.accepts_bytes("c"));
    BOOST_CHECK_THROW(m.accept_token(0), std::logic_error);  // "a" cannot follow "a"
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(json_schema)

BOOST_AUTO_TEST_CASE(refuses_unsupported_keywords_by_name) {
    auto error = [](char const* schema) -> std::string {
        try {
            (void)grammar::json_schema_to_grammar(std::string_view(schema));
        } catch (GrammarError const& e) {
            return e.what();
        }
        return "";
    };
    BOOST_TEST(contains(error(R"({"type":"string","pattern":"^a+$"})"), "keyword 'pattern'"));
    BOOST_TEST(contains(error(R"({"type":"integer","minimum":3})"), "keyword 'minimum'"));
    BOOST_TEST(contains(error(R"({"$ref":"#/defs/a"})"), "keyword '$ref'"));
    BOOST_TEST(
        contains(error(R"({"type":"object","properties":{"a":{}},"additionalProperties":true})"),
                 "keyword 'additionalProperties'"));
    BOOST_TEST(
        contains(error(R"({"type":"blob"})"), "keyword 'type' has the unknown value 'blob'"));
    BOOST_TEST(contains(error(R"({"oneOf":[]})"), "keyword 'oneOf'"));
    BOOST_TEST(contains(error("{"), "not JSON"));
}

// Properties come in the schema text's order (OpenAI's structured outputs do the same).
BOOST_AUTO_TEST_CASE(properties_keep_the_schema_order) {
    auto const g = grammar::json_schema_to_grammar(std::string_view(
        R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"boolean"}},"required":["zeta","alpha"]})"));
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back("");
    auto const constraint = grammar::constrain(g, std::make_shared<grammar::Vocabulary const>(
                                                      tokens, std::vector<std::int32_t>{256}, 257));
    grammar::Matcher m(constraint);
    BOOST_TEST(m.accepts_bytes(R"({"zeta": 1, "alpha": true})"));
    BOOST_TEST(!m.accepts_bytes(R"({"alpha")"));
}

BOOST_AUTO_TEST_CASE(json_object_is_any_object) {
    auto const g = grammar::json_schema_to_grammar(std::string_view(R"({"type":"json_object"})"));
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back("");
    auto const vocab =
        std::make_shared<grammar::Vocabulary const>(tokens, std::vector<std::int32_t>{256}, 257);
    auto const constraint = grammar::constrain(g, vocab);
    for (std::string const ok :
         {R"({})", R"({"a": [1, {"b": null}], "c":"\u00e9\n"})", "{\"\xC3\xA9\":-0.5e+3}"}) {
        grammar::Matcher m(constraint);
        BOOST_TEST(m.accepts_bytes(ok), ok);
        m.accept_bytes(ok);
        BOOST_TEST(m.complete(), ok);
    }
    for (std::string const bad :
         {R"([])", R"({"a" 1})", R"({"a":01})", "{\"\xC3\"", R"({"a":1,})"}) {
        grammar::Matcher m(constraint);
        bool const accepted = m.accepts_bytes(bad) && (m.accept_bytes(bad), m.complete());
        BOOST_TEST(!accepted, bad);
    }
}

// A few hundred random schemas, sampled at temperature 1 over random logits (biased towards
// closing tokens so most outputs end) with a vocabulary of every byte and some longer JSON-ish
// tokens: every output that ends parses and validates; truncations are counted.
BOOST_AUTO_TEST_CASE(random_schemas_sampled_outputs_validate) {
    auto rng = testing::seeded_rng(1717);
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (char const* t :
         {"{\"",   "\":", "\": ", "\",", ", \"", "\"}",   "true",  "false", "null",     "12",
          "3.",    "e+",  "name", "id",  "tags", "x",     "value", "ok",    "\xC3\xA9", "red",
          "fixed", "[1",  "]}",   "}]",  ", ",   "\\u00", "\\n",   "ab",    "-0"})
        tokens.push_back(t);
    int const end = static_cast<int>(tokens.size());
    tokens.push_back("");
    auto const vocab = std::make_shared<grammar::Vocabulary const>(
        tokens, std::vector<std::int32_t>{end}, end + 1);

    kernels::SamplingParams params;
    params.temperature = 1.0f;
    params.seed = 7;
    kernels::SamplingWorkspace workspace(vocab->size());
    std::normal_distribution<float> noise(0.f, 1.f);
    int stopped = 0, truncated = 0, schemas = 0;
    for (int i = 0; i < 300; ++i) {
        grammar_test::json const schema = grammar_test::random_schema(rng);
        auto const constraint = grammar::constrain(grammar::json_schema_to_grammar(schema), vocab);
        ++schemas;
        grammar::Matcher m(constraint);
        std::string out;
        std::vector<std::int32_t> generated;
        bool ended = false;
        for (int step = 0; step < 400 && !ended; ++step) {
            std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
            for (int t = 0; t < vocab->size(); ++t) {
                float bias = 0;
                std::string_view const bytes = vocab->bytes(t);
                if (t == end) bias = 8;
                if (bytes == "\"" || bytes == "}" || bytes == "]" || bytes == "\"}" ||
                    bytes == "]}")
                    bias = 5;
                logits[t] = noise(rng) + bias;
            }
            BOOST_REQUIRE(m.mask_logits(logits) > 0);
            kernels::TokenHistory const history{{}, generated};
            auto const sampled = kernels::sample_token(logits, params, history, 0,
                                                       static_cast<std::uint32_t>(step), workspace);
            m.accept_token(sampled.token);
            generated.push_back(sampled.token);
            if (sampled.token == end) {
                ended = true;
            } else {
                out += vocab->bytes(sampled.token);
            }
        }
        if (!ended) {
            ++truncated;
            continue;
        }
        ++stopped;
        BOOST_TEST_CONTEXT("schema " << schema.dump() << " output " << out) {
            grammar_test::json parsed;
            BOOST_REQUIRE_NO_THROW(parsed = grammar_test::json::parse(out));
            BOOST_TEST(grammar_test::valid(parsed, schema));
        }
    }
    BOOST_TEST_MESSAGE("schemas " << schemas << ", stopped " << stopped << ", truncated "
                                  << truncated);
    BOOST_TEST(stopped >= schemas * 95 / 100);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(requests_refuse_what_a_grammar_cannot_do) {
    auto const vocab = small_vocabulary("ab");
    GenerationRequest r;
    r.grammar = grammar::constrain(Grammar::parse(R"(root ::= "a")"), vocab);
    RequestLimits const limits{.vocab = vocab->size(), .max_context = 512, .max_draft_tokens = 4};
    std::vector<std::int32_t> const prompt{0};
    BOOST_CHECK_NO_THROW(validate_request(r, prompt, limits));
    auto message = [&](GenerationRequest const& req) -> std::string {
        try {
            validate_request(req, prompt, limits);
        } catch (RequestError const& e) {
            return e.what();
        }
        return "";
    };
    auto message_with = [&](GenerationRequest const& req, RequestLimits const& l) -> std::string {
        try {
            validate_request(req, prompt, l);
        } catch (RequestError const& e) {
            return e.what();
        }
        return "";
    };
    // Drafts are checked against the grammar (speculative_round.hpp): accepted.
    GenerationRequest drafts = r;
    drafts.draft_tokens = 2;
    BOOST_TEST(message(drafts).empty());
    GenerationRequest no_eos = r;
    no_eos.ignore_eos = true;
    BOOST_TEST(contains(message(no_eos), "grammar and ignore_eos"));
    RequestLimits worker = limits;
    worker.has_tokenizer = false;
    BOOST_TEST(contains(message_with(r, worker), "grammar is not applied by this worker"));
    RequestLimits bigger = limits;
    bigger.vocab = vocab->size() + 1;
    BOOST_CHECK_THROW(validate_request(r, prompt, bigger), RequestError);
}
