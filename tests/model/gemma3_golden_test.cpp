// Gemma 3 270M's float32 forward pass against the float64 numpy reference
// (tests/reference/make_gemma3_golden.py, written from the published architecture): prefill
// positions (all of them at the start, the end and around the 512-token window's edge, each
// 64-token chunk's last elsewhere) and the stored decode steps within a tolerance derived from the
// measured float32 error of each position, and the greedy continuation up to the first near-tie, on
// prompts that cross the 512-token sliding window.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "gemma3_fixture.hpp"
#include "golden_tolerance.hpp"
#include "logit_metrics.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;

namespace {

constexpr tinfer::ModelConfig gemma3 = tinfer::presets::gemma3_270m;
using Model = tinfer::model::Llama<gemma3>;
constexpr int vocab = gemma3.vocab;
constexpr int window = gemma3.sliding_window;

}  // namespace

BOOST_AUTO_TEST_SUITE(gemma3_golden)

BOOST_AUTO_TEST_CASE(logits_and_greedy_match_float64_reference) {
    Model const& model = tt::gemma3_fixture().model;
    auto const golden =
        tt::load_golden_file(tt::data_dir() / "reference" / "gemma3_golden_logits.bin");
    BOOST_REQUIRE(!golden.prompts.empty());
    BOOST_REQUIRE_EQUAL(golden.vocab_size, static_cast<std::uint32_t>(vocab));
    std::size_t longest = 0;
    bool crosses_window = false;
    for (auto const& p : golden.prompts) {
        longest = std::max(longest, p.prompt.size() + p.greedy.size());
        crosses_window |= p.prompt.size() > static_cast<std::size_t>(gemma3.sliding_window);
    }
    BOOST_TEST(crosses_window, "no golden prompt is longer than the sliding window");
    tinfer::kv::ContiguousKvCache<gemma3> cache(1, static_cast<int>(longest));
    // Prefill in chunks whose logits are all kept: chunking is bitwise invisible (tested in
    // gemma3_test.cpp), and 64 rows of 262,144 logits is what memory allows comfortably.
    constexpr int chunk_tokens = 64;
    Model::Workspace ws(chunk_tokens, 2);
    std::vector<float> logits(static_cast<std::size_t>(chunk_tokens) * vocab);

    for (tt::GoldenPrompt const& prompt : golden.prompts) {
        BOOST_TEST_CONTEXT("prompt " << prompt.name) {
            cache.clear(0);
            int const n = static_cast<int>(prompt.prompt.size());
            double worst = 0;
            std::vector<float> last(vocab);
            int compared_positions = 0;
            for (int first = 0; first < n; first += chunk_tokens) {
                int const count = std::min(chunk_tokens, n - first);
                // Every position's logits in the first and last chunks and the two beside the
                // window's edge; elsewhere the chunk's last position only. The LM head is two
                // thirds of a position's work at this vocabulary, and every position's KV is
                // still checked through the positions after it.
                bool const every_row =
                    first == 0 || first + count == n ||
                    (first < window + chunk_tokens && first + count > window - chunk_tokens);
                int const skipped = every_row ? 0 : count - 1;
                tt::poison(std::span<float>(logits));
                tinfer::SequenceChunk const chunk{
                    0, first, std::span(prompt.prompt).subspan(first, count), every_row};
                model.forward(std::span(&chunk, 1), cache, ws, logits);
                for (int i = skipped; i < count; ++i) {
                    std::span<float const> const row(
                        logits.data() + static_cast<std::size_t>(i - skipped) * vocab, vocab);
                    double const e = tt::scaled_golden_error(row, prompt.prefill[first + i]);
                    ++compared_positions;
                    BOOST_TEST(e <= 1.0,
                               "prefill position " << first + i << ": scaled error " << e);
                    worst = std::max(worst, e);
                    if (first + i == n - 1) std::copy(row.begin(), row.end(), last.begin());
                }
            }
            BOOST_TEST_MESSAGE(prompt.name << " (" << n << " tokens, " << compared_positions
                                           << " compared): worst prefill error " << worst
                                           << " of the tolerance");

            bool tie_seen = false;
            auto const check_greedy = [&](std::span<float const> ours,
                                          tt::GoldenPosition const& ref, std::size_t k) {
                if (tie_seen) return;
                if (ref.top2_margin <= 2 * tt::golden_tolerance(ref)) {
                    BOOST_TEST_MESSAGE(prompt.name << ": greedy[" << k << "] is a near-tie (margin "
                                                   << ref.top2_margin
                                                   << "), greedy compared up to it");
                    tie_seen = true;
                    return;
                }
                BOOST_TEST(tt::argmax(ours) == prompt.greedy[k], "greedy[" << k << "]");
            };
            check_greedy(last, prompt.prefill.back(), 0);
            std::size_t compared = 1;
            double worst_decode = 0;
            std::vector<float> step(vocab);
            for (std::size_t i = 0; i < prompt.decode.size(); ++i) {
                tt::poison(std::span<float>(step));
                std::span<std::int32_t const> const token(&prompt.greedy[i], 1);
                tinfer::SequenceChunk const decode{0, n + static_cast<int>(i), token};
                model.forward(std::span(&decode, 1), cache, ws, step);
                if (!prompt.decode[i].logits.empty()) {
                    double const e = tt::scaled_golden_error(step, prompt.decode[i]);
                    BOOST_TEST(e <= 1.0, "decode step " << i << ": scaled error " << e);
                    worst_decode = std::max(worst_decode, e);
                }
                if (i + 1 < prompt.greedy.size()) {
                    check_greedy(step, prompt.decode[i], i + 1);
                    compared += !tie_seen;
                }
            }
            BOOST_TEST_MESSAGE(prompt.name << ": worst decode error " << worst_decode
                                           << " of the tolerance; " << compared
                                           << " greedy tokens compared");
        }
    }
}

// kernels::Int8Activations on Gemma 3's mixed file (Q5_0, Q8_0, Q4_K and Q6_K matrices all
// take the integer path): the same bounds as SmolLM2's (int8_precision_test.cpp) against the
// float32 path, over the full 262,144-token vocabulary at every prompt position and 16
// teacher-forced decode steps.
BOOST_AUTO_TEST_CASE(int8_activations_close_to_float32) {
    using Int8 = tinfer::kernels::Int8Activations;
    using Float32 = tinfer::kernels::Float32Activations;
    Model const& model = tt::gemma3_fixture().model;
    auto const golden =
        tt::load_golden_file(tt::data_dir() / "reference" / "gemma3_golden_logits.bin");
    constexpr int chunk_tokens = 32;
    constexpr int decode_steps = 16;
    std::size_t longest = 0;
    for (auto const& p : golden.prompts)
        longest = std::max(longest, p.prompt.size() + decode_steps);
    tinfer::kv::ContiguousKvCache<gemma3> exact_cache(1, static_cast<int>(longest)),
        int8_cache(1, static_cast<int>(longest));
    Model::Workspace ws(chunk_tokens, 2);
    std::vector<float> exact(static_cast<std::size_t>(chunk_tokens) * vocab), int8(exact.size());
    double kl_sum = 0, kl_max = 0;
    int positions = 0, agree = 0;
    auto const compare_rows = [&](int rows) {
        for (int r = 0; r < rows; ++r) {
            std::span<float const> const a(exact.data() + static_cast<std::size_t>(r) * vocab,
                                           vocab);
            std::span<float const> const b(int8.data() + static_cast<std::size_t>(r) * vocab,
                                           vocab);
            BOOST_REQUIRE(
                std::all_of(b.begin(), b.end(), [](float v) { return std::isfinite(v); }));
            double const kl = tt::kl_divergence(a, b);
            kl_sum += kl;
            kl_max = std::max(kl_max, kl);
            agree += tt::argmax(a) == tt::argmax(b);
            ++positions;
        }
    };
    for (tt::GoldenPrompt const& prompt : golden.prompts) {
        exact_cache.clear(0);
        int8_cache.clear(0);
        int const n = static_cast<int>(prompt.prompt.size());
        for (int first = 0; first < n; first += chunk_tokens) {
            int const count = std::min(chunk_tokens, n - first);
            tinfer::SequenceChunk const chunk{0, first,
                                              std::span(prompt.prompt).subspan(first, count), true};
            model.forward<Float32>(std::span(&chunk, 1), exact_cache, ws, exact);
            model.forward<Int8>(std::span(&chunk, 1), int8_cache, ws, int8);
            compare_rows(count);
        }
        for (int i = 0; i < decode_steps && i < static_cast<int>(prompt.greedy.size()); ++i) {
            std::span<std::int32_t const> const token(&prompt.greedy[static_cast<std::size_t>(i)],
                                                      1);
            tinfer::SequenceChunk const decode{0, n + i, token};
            model.forward<Float32>(std::span(&decode, 1), exact_cache, ws, exact);
            model.forward<Int8>(std::span(&decode, 1), int8_cache, ws, int8);
            compare_rows(1);
        }
    }
    double const mean_kl = kl_sum / positions;
    double const agreement = static_cast<double>(agree) / positions;
    BOOST_TEST_MESSAGE("Gemma 3 int8 activations over " << positions << " positions: mean KL "
                                                        << mean_kl << " nats, max KL " << kl_max
                                                        << ", top-1 agreement " << agreement);
    BOOST_TEST(mean_kl <= 0.01);
    BOOST_TEST(agreement >= 0.95);
}

BOOST_AUTO_TEST_SUITE_END()
