// Gemma 3 270M on the hybrid paged cache: a prompt well past the 512-token window, prefilled in
// chunks (each reserved before it runs, as the engine does), then greedy decode steps, give
// bitwise the logits of the contiguous cache that keeps every layer's every token, while the
// sliding layers hold one window each. Needs the model (TINFER_GEMMA3_PATH).
#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

namespace {

constexpr tinfer::ModelConfig gemma3 = tinfer::presets::gemma3_270m;
using Model = tinfer::model::Llama<gemma3>;
using Paged = tinfer::kv::PagedKvCache<gemma3, 16>;

std::vector<std::int32_t> random_tokens(int n, unsigned seed) {
    std::mt19937 random(seed);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
    tokens[0] = 2;  // BOS
    for (int i = 1; i < n; ++i) tokens[static_cast<std::size_t>(i)] = 1000 + random() % 200000;
    return tokens;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_gemma3_hybrid)

BOOST_AUTO_TEST_CASE(chunked_prefill_and_decode_equal_the_contiguous_cache) {
    auto file = tinfer::gguf::File::open(tinfer::testing::gemma3_path());
    Model model = Model::bind(file);
    constexpr int prompt_length = 760;
    constexpr int chunk = 190;
    constexpr int decode_steps = 6;
    constexpr int total = prompt_length + decode_steps;
    constexpr int vocab = gemma3.vocab;
    std::vector<std::int32_t> context = random_tokens(prompt_length, 7);

    tinfer::kv::ContiguousKvCache<gemma3> contiguous(1, total);
    Paged paged(Paged::bytes_per_block * static_cast<std::size_t>(Paged::blocks_for(total)));
    int const seq = paged.admit(total);
    Model::Workspace ws(chunk, 1);
    std::vector<float> reference(vocab), logits(vocab);

    std::span<std::int32_t const> const prompt(context);
    tinfer::SequenceChunk const whole{0, 0, prompt};
    {
        Model::Workspace one_shot(prompt_length, 1);
        model.forward(std::span(&whole, 1), contiguous, one_shot, reference);
    }
    for (int first = 0; first < prompt_length; first += chunk) {
        int const count = std::min(chunk, prompt_length - first);
        BOOST_REQUIRE(paged.reserve(seq, first + count));
        tinfer::SequenceChunk const piece{
            seq, first,
            prompt.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(count))};
        model.forward(std::span(&piece, 1), paged, ws, logits);
    }
    BOOST_REQUIRE(paged.dropped_blocks(seq) > 0);  // the early sliding blocks went back
    BOOST_TEST(std::equal(reference.begin(), reference.end(), logits.begin()));
    BOOST_TEST(
        std::all_of(reference.begin(), reference.end(), [](float x) { return std::isfinite(x); }));

    for (int step = 0; step < decode_steps; ++step) {
        auto const next = static_cast<std::int32_t>(
            std::max_element(reference.begin(), reference.end()) - reference.begin());
        context.push_back(next);
        int const position = static_cast<int>(context.size()) - 1;
        std::span<std::int32_t const> const token(&context.back(), 1);
        tinfer::SequenceChunk const c_step{0, position, token};
        model.forward(std::span(&c_step, 1), contiguous, ws, reference);
        BOOST_REQUIRE(paged.reserve(seq, position + 1));
        tinfer::SequenceChunk const p_step{seq, position, token};
        model.forward(std::span(&p_step, 1), paged, ws, logits);
        BOOST_TEST(std::equal(reference.begin(), reference.end(), logits.begin()),
                   "decode step " << step);
    }
    // Global layers keep every block; each sliding group one window and the block being
    // filled: ceil(511 / 16) + 1 = 33 blocks at most.
    int const logical = Paged::logical_blocks_for(total);
    BOOST_TEST(paged.used_blocks() <= logical + 5 * 33);
    BOOST_TEST_MESSAGE("blocks used " << paged.used_blocks() << " of " << Paged::blocks_for(total)
                                      << " for every layer");
}

BOOST_AUTO_TEST_SUITE_END()
