// Speculative sampling through the Engine is exact: with a drafter whose proposals come from a
// deliberately wrong distribution, the tokens the engine streams still follow the target
// model's own distribution. The target is a small synthetic model (seeded random weights,
// tests/support/synthetic_model.hpp) of 8 tokens, so the exact law of its outputs is computed
// here in float64 from its logits over every context (prompt + 1..3 tokens: 584 forward passes
// of a model that runs no engine, no paged cache and no speculation). 20000 requests, each with
// its own seed, generate 4 tokens each with up to 3 drafts per round, batched by the engine as
// it likes; chi-square compares (a) the first token, (b) the first two, (c) the fourth (after
// round boundaries and rollbacks) with that law, as tests/speculative/exactness_test.cpp does
// for the verification rule on its own.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/kv/contiguous_cache.hpp>

#include "chi_square.hpp"
#include "synthetic_model.hpp"
#include "testing.hpp"

using namespace tinfer;
namespace s = tinfer::sched;

namespace {

constexpr ModelConfig tiny{.layers = 2,
                           .hidden = 64,
                           .heads = 4,
                           .kv_heads = 2,
                           .head_dim = 16,
                           .ffn = 96,
                           .vocab = 8,
                           .max_context = 64,
                           .rope_base = 10000.0,
                           .norm_eps = 1e-5,
                           // A tied LM head makes a random model all but repeat its last token.
                           .arch = {.lm_head = LmHead::separate}};
using Model = model::Llama<tiny>;
constexpr int vocab = tiny.vocab;
constexpr long repetitions = 20000;
constexpr int generated_length = 4;
constexpr int max_drafts = 3;  // gamma
constexpr double significance = 0.001;
// A random model's logits are small (standard deviation about 0.6): a lower temperature gives
// the law some shape, so that a wrong one would show.
constexpr float temperature = 0.5f;

using Tokens = std::vector<std::int32_t>;

std::vector<std::byte> const& model_bytes() {
    static std::vector<std::byte> const bytes =
        testing::SyntheticModel(tiny, 777).with_tokenizer().bytes();
    return bytes;
}

// A drafter that proposes from a fixed random bigram law q(next | last) of its own, unrelated
// to the target, drawing each draft at the stream position the verifier expects. Stateless: one
// object serves every request.
class BigramDrafter {
  public:
    explicit BigramDrafter(std::uint64_t seed) : weights_(vocab * vocab) {
        auto rng = testing::seeded_rng(seed);
        std::normal_distribution<double> logit(0.0, 1.5);
        for (double& w : weights_) w = std::exp(logit(rng));
    }

    void propose(spec::DraftRequest const& request, spec::DraftProposal& proposal) const {
        proposal.clear();
        std::int32_t last = request.sequence.tokens.back();
        std::uint32_t const first_step = request.sequence.next_step();
        for (int i = 0; i < request.max_drafts; ++i) {
            std::span<double const> const row = this->row(last);
            double total = 0;
            for (double const w : row) total += w;
            double const u = spec::speculative_uniform(request.params, request.sequence.request_id,
                                                       first_step + static_cast<std::uint32_t>(i),
                                                       spec::SpeculativeDraw::draft);
            std::int32_t const token = spec::draw_by_weight(
                vocab, [&](std::int32_t t) { return row[static_cast<std::size_t>(t)]; }, total, u);
            proposal.add(token, row, total);
            last = token;
        }
    }

  private:
    std::span<double const> row(std::int32_t last) const {
        return std::span<double const>(weights_).subspan(static_cast<std::size_t>(last) * vocab,
                                                         vocab);
    }
    std::vector<double> weights_;  // [last token][next token], unnormalised
};
static_assert(spec::Drafter<BigramDrafter>);

using Serving =
    s::Scheduler<s::ContinuousBatching<64, 512>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using SpeculativeEngine = Engine<Model, Serving, Host, PagedKv<>, BigramDrafter>;

// The target's next-token law after `context`, from a plain forward pass in float64.
std::vector<double> next_token_law(Model const& model, Tokens const& context) {
    kv::ContiguousKvCache<tiny> cache(1, tiny.max_context);
    Model::Workspace workspace(static_cast<int>(context.size()), 1);
    std::vector<float> logits(vocab);
    SequenceChunk const chunk{.slot = 0, .first_position = 0, .tokens = context};
    model.forward(std::span(&chunk, 1), cache, workspace, logits);
    double const top = *std::ranges::max_element(logits);
    std::vector<double> law(vocab);
    double total = 0;
    for (int t = 0; t < vocab; ++t)
        total += law[t] = std::exp((static_cast<double>(logits[t]) - top) / temperature);
    for (double& p : law) p /= total;
    return law;
}

struct ExactLaws {
    std::vector<double> first = std::vector<double>(vocab);
    std::vector<double> pair = std::vector<double>(vocab * vocab);  // first * vocab + second
    std::vector<double> fourth = std::vector<double>(vocab);
};

// Every path of three tokens after the prompt, weighted by its probability.
ExactLaws exact_laws(Model const& model, Tokens const& prompt) {
    ExactLaws laws;
    laws.first = next_token_law(model, prompt);
    Tokens context = prompt;
    for (std::int32_t a = 0; a < vocab; ++a) {
        context.push_back(a);
        std::vector<double> const after_a = next_token_law(model, context);
        for (std::int32_t b = 0; b < vocab; ++b) {
            double const p_ab = laws.first[a] * after_a[b];
            laws.pair[a * vocab + b] = p_ab;
            context.push_back(b);
            std::vector<double> const after_ab = next_token_law(model, context);
            for (std::int32_t c = 0; c < vocab; ++c) {
                context.push_back(c);
                std::vector<double> const after_abc = next_token_law(model, context);
                for (std::int32_t d = 0; d < vocab; ++d)
                    laws.fourth[d] += p_ab * after_ab[c] * after_abc[d];
                context.pop_back();
            }
            context.pop_back();
        }
        context.pop_back();
    }
    return laws;
}

testing::ChiSquare report(std::string const& what, std::vector<long> const& observed,
                          std::vector<double> const& expected) {
    testing::ChiSquare const test = testing::chi_square(observed, expected, repetitions);
    BOOST_TEST_MESSAGE(what << ": chi2 " << test.statistic << " with " << test.degrees_of_freedom
                            << " dof, p " << test.p_value);
    return test;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(spec_engine_exactness)

BOOST_AUTO_TEST_CASE(sampled_speculation_through_the_engine_follows_the_target) {
    Tokens const prompt = {3, 1, 4, 1, 5, 2};
    gguf::File const reference_file = gguf::File::from_bytes(model_bytes());
    Model const target = Model::bind(reference_file);
    ExactLaws const laws = exact_laws(target, prompt);

    SpeculativeEngine engine(gguf::File::from_bytes(model_bytes()),
                             {.kv_budget_bytes = 8u << 20, .threads = 1, .prefix_caching = false},
                             BigramDrafter(4242));
    std::vector<GenerationRequest> requests;
    for (long rep = 0; rep < repetitions; ++rep) {
        GenerationRequest r;
        r.prompt_tokens = prompt;
        r.max_tokens = generated_length;
        r.ignore_eos = true;
        r.sampling.temperature = temperature;
        r.sampling.seed = static_cast<std::uint64_t>(rep) + 1;  // a stream of its own
        r.draft_tokens = max_drafts;
        requests.push_back(std::move(r));
    }
    std::vector<Completion> const completions = engine.generate(std::move(requests));

    std::vector<long> first(vocab), pair(vocab * vocab), fourth(vocab);
    for (Completion const& c : completions) {
        BOOST_REQUIRE_MESSAGE(c.tokens.size() == static_cast<std::size_t>(generated_length),
                              "request " << c.id << " generated " << c.tokens.size() << " tokens"
                                         << (c.error.empty() ? "" : ": " + c.error));
        ++first[c.tokens[0]];
        ++pair[c.tokens[0] * vocab + c.tokens[1]];
        ++fourth[c.tokens[3]];
    }
    spec::SpeculationStats const& stats = engine.speculation_stats();
    BOOST_TEST_MESSAGE("acceptance " << stats.acceptance_rate() << ", tokens per target pass "
                                     << stats.tokens_per_target_pass() << ", " << stats.drafted
                                     << " drafted");
    // A meaningful check needs drafts both accepted and rejected, and tokens past the first
    // coming from verification rounds.
    BOOST_TEST(stats.drafted > repetitions);
    BOOST_TEST(stats.acceptance_rate() > 0.05);
    BOOST_TEST(stats.acceptance_rate() < 0.9);
    BOOST_TEST(report("first token", first, laws.first).p_value > significance);
    BOOST_TEST(report("first two tokens", pair, laws.pair).p_value > significance);
    BOOST_TEST(report("fourth token", fourth, laws.fourth).p_value > significance);
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
