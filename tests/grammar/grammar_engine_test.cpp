// Structured output through the real engine on SmolLM2 at temperature 1, and the mask's cost
// per generated token over SmolLM2's 49K and Gemma 3's 262K vocabularies.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "json_check.hpp"
#include "testing.hpp"

using namespace tinfer;
using Model = model::Llama<presets::smollm2_135m>;
namespace s = tinfer::sched;
using Serving =
    s::Scheduler<s::ContinuousBatching<16, 512>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using Recompute = s::Scheduler<s::ContinuousBatching<16, 64>, s::ChunkedPrefill<32>,
                               s::PreemptByRecompute, s::Fcfs>;
using Swapping =
    s::Scheduler<s::ContinuousBatching<16, 64>, s::ChunkedPrefill<32>, s::PreemptBySwap, s::Fcfs>;
constexpr std::size_t block_bytes = kv::PagedKvCache<presets::smollm2_135m, 16>::bytes_per_block;

namespace {

struct Figures {
    double p50_us, p99_us, mean_us;
};

// Replays token sequences through fresh matchers (one per output, as a request holds one),
// timing the mask at each step: the trie walk of a state met for the first time included.
Figures mask_cost(std::shared_ptr<grammar::Vocabulary const> const& vocab,
                  std::vector<std::pair<grammar::Grammar, std::vector<std::int32_t>>> const& runs) {
    std::vector<double> us;
    std::vector<float> logits(static_cast<std::size_t>(vocab->size()), 0.f);
    for (auto const& [g, tokens] : runs) {
        grammar::Matcher m(grammar::constrain(g, vocab));
        for (std::int32_t t : tokens) {
            auto const start = std::chrono::steady_clock::now();
            (void)m.mask_logits(logits);
            us.push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count());
            std::fill(logits.begin(), logits.end(), 0.f);
            m.accept_token(t);
        }
    }
    std::ranges::sort(us);
    double sum = 0;
    for (double x : us) sum += x;
    return {us[us.size() / 2], us[us.size() * 99 / 100], sum / static_cast<double>(us.size())};
}

}  // namespace

BOOST_AUTO_TEST_CASE(random_schemas_on_smollm2) {
    auto file = gguf::File::open(testing::model_path());
    Engine<Model, Serving> engine(std::move(file), {.kv_budget_bytes = 128ull << 20, .threads = 2});
    auto const vocab = grammar::Vocabulary::of(engine.tokenizer(), presets::smollm2_135m.vocab);

    auto rng = testing::seeded_rng(4242);
    int const count = 16;
    std::vector<grammar_test::json> schemas;
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < count; ++i) {
        schemas.push_back(grammar_test::random_schema(rng));
        GenerationRequest r;
        r.messages = {
            {"user", "Answer with JSON that follows this JSON schema: " + schemas.back().dump()}};
        r.max_tokens = 256;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 100 + static_cast<std::uint64_t>(i);
        r.grammar = grammar::constrain(grammar::json_schema_to_grammar(schemas.back()), vocab);
        requests.push_back(std::move(r));
    }
    auto const start = std::chrono::steady_clock::now();
    auto const completions = engine.generate(requests);
    double const seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    int stopped = 0, truncated = 0, tokens = 0;
    std::filesystem::path const jsonl =
        std::filesystem::temp_directory_path() / "tinfer_grammar_outputs.jsonl";
    std::ofstream out(jsonl);
    std::vector<std::pair<grammar::Grammar, std::vector<std::int32_t>>> runs;
    for (int i = 0; i < count; ++i) {
        auto const& c = completions[i];
        BOOST_TEST(c.error.empty(), c.error);
        tokens += static_cast<int>(c.tokens.size());
        runs.emplace_back(grammar::json_schema_to_grammar(schemas[i]), c.tokens);
        if (c.finish != FinishReason::stop_token) {
            ++truncated;
            continue;
        }
        ++stopped;
        BOOST_TEST_CONTEXT("schema " << schemas[i].dump() << " output " << c.text) {
            grammar_test::json parsed;
            BOOST_REQUIRE_NO_THROW(parsed = grammar_test::json::parse(c.text));
            BOOST_TEST(grammar_test::valid(parsed, schemas[i]));
            out << grammar_test::json{{"schema", schemas[i]}, {"output", parsed}}.dump() << "\n";
        }
    }
    out.close();
    BOOST_TEST_MESSAGE("SmolLM2 at temperature 1: " << count << " schemas, " << stopped
                                                    << " stopped, " << truncated << " truncated, "
                                                    << tokens << " tokens in " << seconds << " s");
    BOOST_TEST(stopped >= count * 90 / 100);

    // An independent validator where one is installed: python's jsonschema.
    std::string const check =
        "python3 -c \"import json,sys,jsonschema\nfor l in open(sys.argv[1]):\n"
        "    d=json.loads(l); jsonschema.validate(d['output'], d['schema'])\n\" " +
        jsonl.string() + " 2>&1";
    if (std::system("python3 -c 'import jsonschema' 2>/dev/null") == 0) {
        BOOST_TEST(std::system(check.c_str()) == 0, "python jsonschema rejected an output");
        BOOST_TEST_MESSAGE("python jsonschema accepted all " << stopped << " outputs");
    } else {
        BOOST_TEST_MESSAGE("python jsonschema not installed: only the C++ validator ran");
    }

    Figures const small = mask_cost(vocab, runs);
    BOOST_TEST_MESSAGE("mask cost per token, 49152-token vocabulary: p50 "
                       << small.p50_us << " us, p99 " << small.p99_us << " us, mean "
                       << small.mean_us << " us");

    // The same outputs' text re-tokenized for Gemma 3 (262K tokens).
    auto const gemma_file = gguf::File::open(testing::gemma3_path());
    tok::Tokenizer const gemma = tok::tokenizer_from_gguf(gemma_file);
    auto const big = grammar::Vocabulary::of(gemma, static_cast<int>(gemma.vocab_size()));
    std::vector<std::pair<grammar::Grammar, std::vector<std::int32_t>>> gemma_runs;
    for (int i = 0; i < count; ++i) {
        if (completions[i].finish != FinishReason::stop_token) continue;
        auto ids = gemma.encode(completions[i].text);
        ids.push_back(big->end_tokens().front());
        gemma_runs.emplace_back(grammar::json_schema_to_grammar(schemas[i]), std::move(ids));
    }
    Figures const large = mask_cost(big, gemma_runs);
    BOOST_TEST_MESSAGE("mask cost per token, " << big->size() << "-token vocabulary: p50 "
                                               << large.p50_us << " us, p99 " << large.p99_us
                                               << " us, mean " << large.mean_us << " us");
}

// The mask's cost against a decode step, end to end: one request at batch 1 on 1 thread,
// greedy, with and without a grammar (json_object), per generated token. (The random-schema
// case before it has warmed the process up.)
BOOST_AUTO_TEST_CASE(decode_step_with_and_without_the_mask) {
    auto file = gguf::File::open(testing::model_path());
    Engine<Model, Serving> engine(std::move(file), {.kv_budget_bytes = 64ull << 20, .threads = 1});
    auto const vocab = grammar::Vocabulary::of(engine.tokenizer(), presets::smollm2_135m.vocab);
    auto per_token_ms = [&](bool constrained) {
        GenerationRequest r;
        r.messages = {{"user", "Describe a cat as a JSON object with many fields."}};
        r.max_tokens = 64;
        r.sampling.temperature = 0;
        if (constrained)
            r.grammar = grammar::constrain(
                grammar::json_schema_to_grammar(std::string_view(R"({"type":"json_object"})")),
                vocab);
        auto const start = std::chrono::steady_clock::now();
        auto const c = engine.generate({r}).front();
        double const ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        BOOST_TEST(c.error.empty(), c.error);
        BOOST_TEST_MESSAGE((constrained ? "json_object: " : "free: ")
                           << c.tokens.size() << " tokens, "
                           << ms / static_cast<double>(c.tokens.size())
                           << " ms per token (prefill included); text " << c.text.substr(0, 200));
        return ms / static_cast<double>(c.tokens.size());
    };
    double const free = per_token_ms(false);
    double const constrained = per_token_ms(true);
    BOOST_TEST_MESSAGE("mask overhead at batch 1, 1 thread: "
                       << (constrained - free) << " ms per token, "
                       << 100.0 * (constrained - free) / free << "% of a step");
}

// The matcher's state survives preemption: constrained greedy requests in a pool of 8 blocks
// (preempted by recompute, then by swap) give the tokens they give alone, and stay valid.
template <class Scheduler>
std::vector<std::vector<std::int32_t>> constrained_run(std::size_t kv_bytes, int* preemptions) {
    Engine<Model, Scheduler> engine(gguf::File::open(testing::model_path()),
                                    {.kv_budget_bytes = kv_bytes, .threads = 2});
    auto const vocab = grammar::Vocabulary::of(engine.tokenizer(), presets::smollm2_135m.vocab);
    grammar_test::json const schema = grammar_test::json::parse(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},"legs":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","legs","tags"]})");
    auto const constraint = grammar::constrain(grammar::json_schema_to_grammar(schema), vocab);
    std::vector<GenerationRequest> requests;
    for (char const* animal : {"cat", "spider", "horse", "fish"}) {
        GenerationRequest r;
        r.prompt = std::string("A ") + animal + " as JSON with its name, legs and tags: ";
        r.max_tokens = 40;
        r.sampling.temperature = 0;
        r.grammar = constraint;
        requests.push_back(std::move(r));
    }
    auto const completions = engine.generate(requests);
    std::vector<std::vector<std::int32_t>> tokens;
    for (auto const& c : completions) {
        BOOST_TEST(c.error.empty(), c.error);
        if (c.finish == FinishReason::stop_token) {
            BOOST_TEST_CONTEXT("output " << c.text) {
                grammar_test::json parsed;
                BOOST_REQUIRE_NO_THROW(parsed = grammar_test::json::parse(c.text));
                BOOST_TEST(grammar_test::valid(parsed, schema));
            }
        }
        tokens.push_back(c.tokens);
    }
    if (preemptions) *preemptions = engine.metrics().summary().preemptions;
    return tokens;
}

BOOST_AUTO_TEST_CASE(matcher_state_survives_preemption) {
    auto const roomy = constrained_run<Recompute>(64ull << 20, nullptr);
    int preemptions = 0;
    BOOST_TEST((constrained_run<Recompute>(8 * block_bytes, &preemptions) == roomy));
    BOOST_TEST_MESSAGE("recompute preemptions: " << preemptions);
    BOOST_TEST(preemptions > 0);
    BOOST_TEST((constrained_run<Swapping>(8 * block_bytes, &preemptions) == roomy));
    BOOST_TEST_MESSAGE("swap preemptions: " << preemptions);
    BOOST_TEST(preemptions > 0);
}

// Speculative drafts under a grammar (prompt lookup over prompts that hold example JSON, so
// drafts are proposed and some fall outside the grammar): drafts are cut at the first token
// the grammar rejects and verified against the masked target distribution, so greedy output
// equals greedy decoding without drafts, and every sampled output stays valid.
BOOST_AUTO_TEST_CASE(drafts_under_a_grammar_keep_outputs_valid_and_greedy_unchanged) {
    Engine<Model, Serving> engine(gguf::File::open(testing::model_path()),
                                  {.kv_budget_bytes = 64ull << 20, .threads = 2});
    auto const vocab = grammar::Vocabulary::of(engine.tokenizer(), presets::smollm2_135m.vocab);
    grammar_test::json const schema = grammar_test::json::parse(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},"legs":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","legs","tags"]})");
    auto const constraint = grammar::constrain(grammar::json_schema_to_grammar(schema), vocab);
    auto const requests = [&](int draft_tokens, float temperature) {
        std::vector<GenerationRequest> out;
        int i = 0;
        for (char const* animal : {"cat", "spider", "horse", "fish"}) {
            GenerationRequest r;
            // Example JSON with whitespace the grammar does not allow (a newline, two spaces):
            // the drafter copies it, the grammar cuts it.
            r.prompt = std::string(
                           "Example: {\n  \"name\": \"Tom\",\n  \"legs\": 4,  \"tags\": "
                           "[\"pet\", \"small\"]}\nA ") +
                       animal + " as JSON with its name, legs and tags: ";
            r.max_tokens = 48;
            r.sampling.temperature = temperature;
            r.seed = 7 + static_cast<std::uint64_t>(i++);
            r.draft_tokens = draft_tokens;
            r.grammar = constraint;
            out.push_back(std::move(r));
        }
        return out;
    };
    auto const check_valid = [&](std::vector<Completion> const& completions) {
        int stopped = 0;
        for (auto const& c : completions) {
            BOOST_TEST(c.error.empty(), c.error);
            if (c.finish != FinishReason::stop_token) continue;
            ++stopped;
            BOOST_TEST_CONTEXT("output " << c.text) {
                grammar_test::json parsed;
                BOOST_REQUIRE_NO_THROW(parsed = grammar_test::json::parse(c.text));
                BOOST_TEST(grammar_test::valid(parsed, schema));
            }
        }
        return stopped;
    };
    auto const plain = engine.generate(requests(0, 0));
    auto const drafted = engine.generate(requests(4, 0));
    spec::SpeculationStats const greedy_stats = engine.speculation_stats();
    for (std::size_t i = 0; i < plain.size(); ++i)
        BOOST_TEST(drafted[i].tokens == plain[i].tokens,
                   "request " << i << ": " << drafted[i].text << " vs " << plain[i].text);
    check_valid(plain);
    int const greedy_stopped = check_valid(drafted);
    auto const sampled = engine.generate(requests(4, 1));
    int const sampled_stopped = check_valid(sampled);
    spec::SpeculationStats const stats = engine.speculation_stats();
    BOOST_TEST_MESSAGE("drafts under a grammar: greedy "
                       << greedy_stats.accepted << " of " << greedy_stats.drafted
                       << " drafts kept; all: " << stats.accepted << " of " << stats.drafted << "; "
                       << greedy_stopped << " + " << sampled_stopped << " of 8 stopped");
    BOOST_TEST(greedy_stats.drafted > 0);
    BOOST_TEST(greedy_stats.accepted > 0);
    BOOST_TEST(sampled_stopped >= 3);
}
