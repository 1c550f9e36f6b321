// eviction_perplexity: teacher-forced perplexity of tests/data/text/ (2,943 tokens) under a
// 256-token KV budget, for the eviction policies of sched/eviction.hpp against the full cache.
// The budgeted policies are fed one token per step (a decode loop; --chunk changes it) and
// evict after every step; the full cache is fed in prefill chunks, which batch invariance makes
// bitwise the same as one token per step. Prints docs/eviction.md's table as Markdown.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "../support/text_corpus.hpp"
#include "eviction_run.hpp"

namespace {

constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;
namespace ev = tinfer::testing::eviction;
namespace sched = tinfer::sched;

constexpr int budget = 256;
constexpr int full_cache_chunk = 256;

struct Row {
    std::string name;
    std::string budget;
    ev::PolicyRun run;
    double seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
    std::string model_path = TINFER_DEFAULT_MODEL_PATH;
    std::vector<std::string> texts = tinfer::testing::corpus_paths(TINFER_TEST_DATA_DIR "/text");
    int tokens = 0;
    int chunk = 1;
    int threads = 2;
    CLI::App app{"Perplexity of a long text under KV eviction policies"};
    app.add_option("--model", model_path, "GGUF file")->capture_default_str();
    app.add_option("--text", texts, "Text files, joined by a blank line")->capture_default_str();
    app.add_option("--tokens", tokens, "Use only the first N tokens (0: all)");
    app.add_option("--chunk", chunk, "Tokens per step for the budgeted policies")
        ->capture_default_str();
    app.add_option("--threads", threads, "CPU threads")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        auto const file = tinfer::gguf::File::open(model_path);
        auto const model = Model::bind(file);
        std::vector<std::int32_t> text =
            tinfer::tok::tokenizer_from_gguf(file).encode(tinfer::testing::read_texts(texts));
        if (tokens > 0 && tokens < static_cast<int>(text.size())) text.resize(tokens);
        int const n = static_cast<int>(text.size());
        std::fprintf(stderr, "%d tokens, KV budget %d, %d threads\n", n, budget, threads);

        std::vector<Row> rows;
        auto const measure = [&]<class Policy>(std::string name, std::string budget_text,
                                               int step_tokens) {
            auto const start = std::chrono::steady_clock::now();
            Row row{std::move(name), std::move(budget_text),
                    ev::run_policy<Policy>(model, text, step_tokens, threads)};
            row.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fprintf(stderr, "  %s: perplexity %.4f, peak %d tokens (%.0f s)\n",
                         row.name.c_str(), row.run.perplexity(), row.run.peak_tokens, row.seconds);
            rows.push_back(std::move(row));
        };
        measure.template operator()<sched::NoEviction>("NoEviction (full cache)", "all",
                                                       full_cache_chunk);
        measure.template operator()<sched::SlidingWindow<budget>>("SlidingWindow<256>", "256",
                                                                  chunk);
        measure.template operator()<sched::AttentionSinks<4, budget - 4>>(
            "AttentionSinks<4, 252> (StreamingLLM)", "4 + 252", chunk);
        measure.template operator()<sched::HeavyHitters<budget / 2, budget / 2>>(
            "HeavyHitters<128, 128> (H2O)", "128 + 128", chunk);

        // Tokens past the budget are the ones eviction can hurt; the first budget + 1 are
        // predicted from the same cache by every policy.
        int const evicted_from = std::min(budget + 1, n - 1);
        std::printf("%d tokens of tests/data/text/, KV budget %d tokens, %s per step:\n\n", n,
                    budget, chunk == 1 ? "one token" : (std::to_string(chunk) + " tokens").c_str());
        std::printf(
            "| policy | kept tokens | peak KV tokens | perplexity | perplexity of tokens %d..%d | "
            "vs full cache |\n|---|---|---|---|---|---|\n",
            evicted_from, n - 1);
        double const reference = rows.front().run.perplexity(evicted_from, n);
        for (Row const& row : rows) {
            double const late = row.run.perplexity(evicted_from, n);
            std::printf("| %s | %s | %d | %.3f | %.3f | %+.1f%% |\n", row.name.c_str(),
                        row.budget.c_str(), row.run.peak_tokens, row.run.perplexity(), late,
                        100.0 * (late / reference - 1.0));
        }
        // Perplexity per 512-token segment shows whether a policy degrades as the text grows.
        std::printf("\nPerplexity per segment of the text:\n\n| policy |");
        constexpr int segment = 512;
        for (int first = 1; first < n; first += segment)
            std::printf(" %d..%d |", first, std::min(n, first + segment) - 1);
        std::printf("\n|---|");
        for (int first = 1; first < n; first += segment) std::printf("---|");
        std::printf("\n");
        for (Row const& row : rows) {
            std::printf("| %s |", row.name.c_str());
            for (int first = 1; first < n; first += segment)
                std::printf(" %.3f |", row.run.perplexity(first, std::min(n, first + segment)));
            std::printf("\n");
        }
    } catch (std::exception const& e) {
        std::fprintf(stderr, "eviction_perplexity: %s\n", e.what());
        return 1;
    }
    return 0;
}
