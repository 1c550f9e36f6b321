// The second real model, Gemma 3 270M (Q4_K_M): bound in place with each matrix's own type,
// its description read back as the preset, and batch invariance across the sliding window
// (a prompt longer than 512 tokens alone, prefilled in pieces, batched with another, and its
// last token decoded alone with its keys split between two threads: bitwise the same logits).
#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/hyperparameters.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "gemma3_fixture.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
constexpr tinfer::ModelConfig gemma3 = tinfer::presets::gemma3_270m;
using Model = tinfer::model::Llama<gemma3>;
using tinfer::DType;

BOOST_AUTO_TEST_SUITE(gemma3_model)

BOOST_AUTO_TEST_CASE(description_reads_back_as_the_preset) {
    tt::Gemma3Fixture& f = tt::gemma3_fixture();
    BOOST_TEST((tinfer::model::read_config(f.file) == gemma3), tinfer::model::read_config(f.file));
    for (auto const& p : tinfer::model::compare_hyperparameters(f.file, gemma3))
        BOOST_TEST(p.matches,
                   p.key << ": file has " << p.file_value << ", config has " << p.config_value);
    // SmolLM2's shape is refused, naming the architecture.
    BOOST_CHECK_EXCEPTION(tinfer::model::Llama<tinfer::presets::smollm2_135m>::bind(f.file),
                          tinfer::ConfigMismatch, [](tinfer::ConfigMismatch const& e) {
                              return std::string(e.what()).find(
                                         "general.architecture: file has \"gemma3\", config "
                                         "has \"llama\"") != std::string::npos;
                          });
}

BOOST_AUTO_TEST_CASE(each_matrix_keeps_its_own_type) {
    auto const& w = tt::gemma3_fixture().model.weights();
    BOOST_TEST((w.token_embedding.type == DType::q8_0));
    BOOST_TEST(w.output.data == w.token_embedding.data);  // tied
    int down_q4_k = 0, down_q6_k = 0;
    for (auto const& layer : w.layers) {
        BOOST_TEST((layer.q.type == DType::q5_0));
        BOOST_TEST((layer.output.type == DType::q4_k));
        BOOST_TEST((layer.down.type == DType::q4_k || layer.down.type == DType::q6_k));
        down_q4_k += layer.down.type == DType::q4_k;
        down_q6_k += layer.down.type == DType::q6_k;
        BOOST_TEST(layer.q_norm.size() == 256u);
        BOOST_TEST(layer.k_norm.size() == 256u);
        BOOST_TEST(layer.post_attention_norm.size() == 640u);
        BOOST_TEST(layer.post_ffn_norm.size() == 640u);
        BOOST_TEST(layer.q_bias.empty());
    }
    BOOST_TEST(down_q4_k + down_q6_k == 18);
    BOOST_TEST(down_q6_k == 9);  // Q4_K_M: half of ffn_down kept at 6 bits
}

BOOST_AUTO_TEST_CASE(batched_and_chunked_equal_alone_across_the_window) {
    tt::Gemma3Fixture& f = tt::gemma3_fixture();
    std::vector<std::int32_t> const long_prompt = tt::random_gemma3_tokens(600, 1, 200000);
    std::vector<std::int32_t> const short_prompt = tt::random_gemma3_tokens(40, 2, 200000);
    constexpr int vocab = gemma3.vocab;
    tinfer::kv::ContiguousKvCache<gemma3> cache(2, 700);
    Model::Workspace ws(640, 2);

    auto const alone = [&](std::vector<std::int32_t> const& prompt) {
        cache.clear(0);
        std::vector<float> logits(vocab);
        tinfer::SequenceChunk const chunk{0, 0, prompt};
        f.model.forward(std::span(&chunk, 1), cache, ws, logits);
        return logits;
    };
    std::vector<float> const long_alone = alone(long_prompt);
    std::vector<float> const short_alone = alone(short_prompt);

    // The long prompt in three pieces, the last batched with the short prompt.
    cache.clear(0);
    cache.clear(1);
    std::vector<float> scratch(vocab);
    std::span<std::int32_t const> const all(long_prompt);
    tinfer::SequenceChunk const first{0, 0, all.subspan(0, 256)};
    f.model.forward(std::span(&first, 1), cache, ws, scratch);
    tinfer::SequenceChunk const second{0, 256, all.subspan(256, 300)};
    f.model.forward(std::span(&second, 1), cache, ws, scratch);
    std::vector<float> batched(2 * static_cast<std::size_t>(vocab));
    tinfer::SequenceChunk const both[] = {{0, 556, all.subspan(556)}, {1, 0, short_prompt}};
    f.model.forward(std::span(both), cache, ws, batched);
    BOOST_TEST(std::equal(long_alone.begin(), long_alone.end(), batched.begin()));
    BOOST_TEST(std::equal(short_alone.begin(), short_alone.end(), batched.begin() + vocab));
    BOOST_TEST(std::all_of(long_alone.begin(), long_alone.end(),
                           [](float x) { return std::isfinite(x); }));

    // The long prompt's last token as a decode step of its own on the two threads: its
    // attention split into segments of keys (split-KV, model/llama.hpp's plan_attention), each
    // thread folding some, the last to finish merging them; the logits of the one-pass prefill.
    cache.clear(0);
    tinfer::SequenceChunk const prefix{0, 0, all.first(all.size() - 1)};
    f.model.forward(std::span(&prefix, 1), cache, ws, scratch);
    tinfer::SequenceChunk const last{0, static_cast<int>(all.size()) - 1, all.last(1)};
    std::vector<float> decoded(vocab);
    f.model.forward(std::span(&last, 1), cache, ws, decoded);
    BOOST_TEST(ws.segments == Model::Attention::kernel.segments(last.first_cache_slot));
    BOOST_TEST(ws.segments > 1);
    BOOST_TEST(std::equal(long_alone.begin(), long_alone.end(), decoded.begin()),
               "a split-KV decode step differs from the prefill's last row");
}

BOOST_AUTO_TEST_SUITE_END()
