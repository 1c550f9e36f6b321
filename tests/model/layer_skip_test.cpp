// Layer skipping for self-speculative decoding: forward over the first k layers, then the final
// norm and LM head. All layers must be the normal forward bitwise; fewer must run, write only
// their layers' KV, and give other logits; and a draft over k layers followed by a full forward
// over the same positions (the verification) must give the full model's logits bitwise. Also
// the pass with no LM head at all (an empty logits span).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;
using Cache = tinfer::kv::ContiguousKvCache<smollm2>;
constexpr int vocab = smollm2.vocab;

namespace {

struct Fixture {
    tinfer::gguf::File file = tinfer::gguf::File::open(tt::model_path());
    Model model = Model::bind(file);
    std::vector<tt::GoldenPrompt> prompts =
        tt::load_golden_logits(tt::data_dir() / "reference" / "golden_logits.bin");
    // The longest golden prompt followed by its greedy continuation.
    std::vector<std::int32_t> sequence() const {
        auto const& p = *std::max_element(prompts.begin(), prompts.end(), [](auto& a, auto& b) {
            return a.prompt.size() < b.prompt.size();
        });
        std::vector<std::int32_t> s = p.prompt;
        s.insert(s.end(), p.greedy.begin(), p.greedy.begin() + 8);
        return s;
    }
    // Every position's logits of sequence() from one full forward pass, computed once.
    std::vector<float> const& one_pass_logits() {
        if (one_pass.empty()) {
            std::vector<std::int32_t> const tokens = sequence();
            int const n = static_cast<int>(tokens.size());
            Model::Workspace ws(n, 2);
            Cache cache(1, n);
            one_pass.resize(static_cast<std::size_t>(n) * vocab);
            tinfer::SequenceChunk const whole{0, 0, tokens, true};
            model.forward(std::span(&whole, 1), cache, ws, one_pass);
        }
        return one_pass;
    }
    std::vector<float> one_pass;
};

Fixture& fixture() {
    static std::unique_ptr<Fixture> f = std::make_unique<Fixture>();
    return *f;
}

bool same_bits(std::vector<float> const& a, std::vector<float> const& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layer_skipping)

BOOST_AUTO_TEST_CASE(all_layers_is_the_normal_forward_and_fewer_differ) {
    Fixture& f = fixture();
    std::vector<std::int32_t> const tokens = f.sequence();
    int const n = static_cast<int>(tokens.size());
    Model::Workspace ws(n, 2);
    tinfer::SequenceChunk const chunk{0, 0, tokens, true};
    auto const run = [&](int layers) {
        Cache cache(1, n);
        std::vector<float> logits(static_cast<std::size_t>(n) * vocab);
        tt::poison(std::span<float>(logits));
        if (layers == 0) {
            f.model.forward(std::span(&chunk, 1), cache, ws, logits);
        } else {
            f.model.forward(std::span(&chunk, 1), cache, ws, logits, layers);
            // Only the layers that ran hold KV.
            for (int layer = 0; layer < smollm2.layers; ++layer) {
                BOOST_TEST(cache.view(0, layer).tokens() == (layer < layers ? n : 0),
                           "layer " << layer << " of a " << layers << "-layer forward");
            }
        }
        return logits;
    };
    std::vector<float> const normal = run(0);
    BOOST_TEST(same_bits(run(smollm2.layers), normal));
    for (int const layers : {1, smollm2.layers / 2, smollm2.layers - 1}) {
        std::vector<float> const skipped = run(layers);
        BOOST_TEST(
            std::all_of(skipped.begin(), skipped.end(), [](float x) { return std::isfinite(x); }));
        double largest_change = 0;
        for (std::size_t i = 0; i < skipped.size(); ++i)
            largest_change = std::max(largest_change, std::abs(double(skipped[i]) - normal[i]));
        BOOST_TEST_MESSAGE(layers << " layers: largest logit change " << largest_change);
        BOOST_TEST(largest_change > 0.0);
    }
}

// Self-speculation: the draft (first k layers) proposes tokens one at a time into the shared
// cache, then one full forward verifies them all. The verification rewrites the first k layers'
// KV at those positions and fills the rest: its logits equal the full model's bitwise.
BOOST_AUTO_TEST_CASE(draft_then_verify_equals_the_full_model) {
    Fixture& f = fixture();
    std::vector<std::int32_t> const tokens = f.sequence();
    int const n = static_cast<int>(tokens.size());
    constexpr int drafted = 5;
    constexpr int draft_layers = smollm2.layers / 3;
    int const prompt = n - drafted;
    Model::Workspace ws(n, 2);

    std::vector<float> const& reference = f.one_pass_logits();

    Cache cache(1, n);
    std::vector<float> logits(static_cast<std::size_t>(prompt) * vocab);
    tinfer::SequenceChunk const prefill{0, 0, std::span(tokens).first(prompt), true};
    f.model.forward(std::span(&prefill, 1), cache, ws, logits);
    std::vector<float> draft_logits(vocab);
    for (int i = 0; i < drafted; ++i) {
        tinfer::SequenceChunk const draft{0, prompt + i, std::span(tokens).subspan(prompt + i, 1)};
        f.model.forward(std::span(&draft, 1), cache, ws, draft_logits, draft_layers);
    }
    BOOST_TEST(cache.view(0, draft_layers - 1).tokens() == n);
    BOOST_TEST(cache.view(0, draft_layers).tokens() == prompt);
    std::vector<float> verified(static_cast<std::size_t>(drafted) * vocab);
    tinfer::SequenceChunk const verify{0, prompt, std::span(tokens).subspan(prompt), true};
    f.model.forward(std::span(&verify, 1), cache, ws, verified);
    BOOST_TEST(std::memcmp(verified.data(),
                           reference.data() + static_cast<std::size_t>(prompt) * vocab,
                           verified.size() * sizeof(float)) == 0);
    BOOST_TEST(cache.tokens(0) == n);
}

// An empty logits span runs the layers without the LM head: the KV it writes is the normal
// pass's, so the next step's logits are bitwise the one-pass reference's. A span too small for
// the step is still refused, the cache untouched.
BOOST_AUTO_TEST_CASE(empty_logits_write_the_kv_without_the_lm_head) {
    Fixture& f = fixture();
    std::vector<std::int32_t> const tokens = f.sequence();
    int const n = static_cast<int>(tokens.size());
    Model::Workspace ws(n, 2);
    std::vector<float> const& reference = f.one_pass_logits();

    Cache cache(1, n);
    tinfer::SequenceChunk const prefill{0, 0, std::span(tokens).first(n - 1)};
    f.model.forward(std::span(&prefill, 1), cache, ws, std::span<float>());
    BOOST_TEST(cache.tokens(0) == n - 1);
    std::vector<float> last(vocab);
    tinfer::SequenceChunk const step{0, n - 1, std::span(tokens).last(1)};
    f.model.forward(std::span(&step, 1), cache, ws, last);
    BOOST_TEST(std::memcmp(last.data(), reference.data() + static_cast<std::size_t>(n - 1) * vocab,
                           last.size() * sizeof(float)) == 0);

    Cache untouched(1, n);
    std::vector<float> too_small(vocab - 1);
    BOOST_CHECK_THROW(f.model.forward(std::span(&prefill, 1), untouched, ws, too_small),
                      tinfer::RequestError);
    BOOST_TEST(untouched.tokens(0) == 0);
}

BOOST_AUTO_TEST_CASE(refuses_a_layer_count_outside_the_model) {
    Fixture& f = fixture();
    Cache cache(1, 8);
    Model::Workspace ws(8, 1);
    std::vector<float> logits(vocab);
    std::vector<std::int32_t> const tokens = {1, 2};
    tinfer::SequenceChunk const chunk{0, 0, tokens};
    BOOST_CHECK_THROW(f.model.forward(std::span(&chunk, 1), cache, ws, logits, 0),
                      tinfer::RequestError);
    BOOST_CHECK_THROW(f.model.forward(std::span(&chunk, 1), cache, ws, logits, smollm2.layers + 1),
                      tinfer::RequestError);
    BOOST_TEST(cache.tokens(0) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
