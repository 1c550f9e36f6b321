// kv_bench: what the paged KV cache buys and what its codecs cost, on the real model.
//   prefix:      16 requests share a 512-token system prompt (real text) and differ in a ~32-token
//                suffix; run one after another with the prefix cache on and off: prefill tokens
//                computed and time to first token (TTFT = admit + prefill + first argmax).
//   codecs:      teacher-forced perplexity of a public-domain English text, fed in chunks of
//                `--chunk` tokens (all logits) over the paged cache so later tokens attend to the
//                quantized KV, for (K, V) codec pairs; top-1 agreement with the fp32 cache.
//   utilization: memory utilization on utilization.hpp's synthetic workload, paged against
//                contiguous max-length preallocation (block bookkeeping only, no model).
// Every table is printed as Markdown, for docs/kv-cache.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/common/cli_options.hpp"
#include "../tests/support/text_corpus.hpp"

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/kv/utilization.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/shipped_presets.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#ifndef TINFER_TEXT_DIR
#define TINFER_TEXT_DIR "tests/data/text"
#endif

namespace {

using Tokens = std::vector<std::int32_t>;
using Clock = std::chrono::steady_clock;

struct Options {
    std::string model;
    std::vector<std::string> text = tinfer::testing::corpus_paths(TINFER_TEXT_DIR);
    int threads = 2;
    int chunk = 256;
    int system_tokens = 512;
    int requests = 16;
    int generated = 8;
    bool prefix = true;
    bool codecs = true;
    bool utilization = true;
};

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

int argmax(float const* logits, int n) {
    return static_cast<int>(std::max_element(logits, logits + n) - logits);
}

// ---- (a) prefix caching ----

template <tinfer::ModelConfig Cfg>
struct RequestResult {
    int computed = 0;  // prompt tokens prefilled
    int suffix = 0;    // tokens past the shared system prompt
    double ttft = 0;
    Tokens output;
};

template <tinfer::ModelConfig Cfg, class Cache>
std::vector<RequestResult<Cfg>> serve_sequentially(tinfer::model::Llama<Cfg> const& model,
                                                   std::vector<Tokens> const& prompts,
                                                   int system_tokens, bool prefix_cache,
                                                   Options const& options) {
    int longest = 0;
    for (auto const& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
    int const max_tokens = longest + options.generated;
    // Room for every request's blocks: the prefix cache never has to evict, so the "on" figures
    // show reuse alone, not eviction policy.
    Cache cache(Cache::bytes_per_block *
                static_cast<std::size_t>(Cache::blocks_for(max_tokens) *
                                         (static_cast<int>(prompts.size()) + 1)));
    typename tinfer::model::Llama<Cfg>::Workspace ws(longest, options.threads);
    std::vector<float> logits(Cfg.vocab);
    std::vector<RequestResult<Cfg>> results;
    for (Tokens const& prompt : prompts) {
        RequestResult<Cfg> r;
        int const n = static_cast<int>(prompt.size());
        auto const start = Clock::now();
        tinfer::kv::Admission const admitted = cache.admit(prompt, max_tokens);
        if (!cache.reserve(admitted.seq, n)) throw std::runtime_error("prefix bench: pool full");
        tinfer::SequenceChunk const prefill{
            admitted.seq, admitted.cached_tokens,
            std::span(prompt).subspan(static_cast<std::size_t>(admitted.cached_tokens))};
        model.forward(std::span(&prefill, 1), cache, ws, logits);
        r.output.push_back(argmax(logits.data(), Cfg.vocab));
        r.ttft = seconds_since(start);
        r.computed = n - admitted.cached_tokens;
        r.suffix = n - system_tokens;
        // With the cache off the blocks are simply never offered, so nothing can match.
        if (prefix_cache) cache.cache_prefix(admitted.seq, prompt);
        for (int i = 1; i < options.generated; ++i) {
            if (!cache.reserve(admitted.seq, n + i)) throw std::runtime_error("pool full");
            tinfer::SequenceChunk const decode{admitted.seq, n + i - 1,
                                               std::span(&r.output.back(), 1)};
            model.forward(std::span(&decode, 1), cache, ws, logits);
            r.output.push_back(argmax(logits.data(), Cfg.vocab));
        }
        cache.release(admitted.seq);
        results.push_back(std::move(r));
    }
    return results;
}

template <tinfer::ModelConfig Cfg>
void bench_prefix(tinfer::model::Llama<Cfg> const& model, Tokens const& text,
                  Options const& options) {
    constexpr int block = 16;
    using Cache = tinfer::kv::PagedKvCache<Cfg, block, tinfer::kv::Fp32Codec>;
    int const system = options.system_tokens;
    // Suffixes of 28..36 tokens (not block multiples), cut from the text after the system prompt.
    std::vector<Tokens> prompts;
    for (int i = 0; i < options.requests; ++i) {
        int const length = 28 + (i * 5) % 9;
        std::size_t const from = static_cast<std::size_t>(system + 40 + i * 61);
        if (from + static_cast<std::size_t>(length) > text.size())
            throw std::runtime_error("prefix bench: the text is too short for the suffixes");
        Tokens prompt(text.begin(), text.begin() + system);
        prompt.insert(prompt.end(), text.begin() + static_cast<std::ptrdiff_t>(from),
                      text.begin() + static_cast<std::ptrdiff_t>(from) + length);
        prompts.push_back(std::move(prompt));
    }
    // Warm-up: page the weights in and start the OpenMP threads outside the timed runs.
    serve_sequentially<Cfg, Cache>(model, {prompts[0]}, system, false, options);

    auto const off = serve_sequentially<Cfg, Cache>(model, prompts, system, false, options);
    auto const on = serve_sequentially<Cfg, Cache>(model, prompts, system, true, options);

    std::printf(
        "\n### Prefix cache: %d requests, %d-token shared system prompt, block %d, "
        "%d threads\n\n",
        options.requests, system, block, options.threads);
    std::printf(
        "| prefix cache | prefill tokens (all) | first request | others: mean | others: max "
        "| TTFT total (s) | TTFT mean (ms) | TTFT first (ms) | TTFT others mean (ms) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    bool bounded = true, same_outputs = true;
    for (auto const& [name, results] : {std::pair{"off", &off}, std::pair{"on", &on}}) {
        int total = 0, others_max = 0;
        double others_sum = 0, ttft_total = 0, ttft_others = 0;
        for (std::size_t i = 0; i < results->size(); ++i) {
            auto const& r = (*results)[i];
            total += r.computed;
            ttft_total += r.ttft;
            if (i == 0) continue;
            others_sum += r.computed;
            others_max = std::max(others_max, r.computed);
            ttft_others += r.ttft;
        }
        double const others = static_cast<double>(results->size() - 1);
        std::printf("| %s | %d | %d | %.1f | %d | %.2f | %.1f | %.1f | %.1f |\n", name, total,
                    results->front().computed, others_sum / others, others_max, ttft_total,
                    1e3 * ttft_total / static_cast<double>(results->size()),
                    1e3 * results->front().ttft, 1e3 * ttft_others / others);
    }
    for (std::size_t i = 0; i < on.size(); ++i) {
        // The requirement: after the first, only the suffix plus at most one partial block.
        if (i > 0 && on[i].computed > on[i].suffix + block - 1) bounded = false;
        if (on[i].output != off[i].output) same_outputs = false;
    }
    std::printf(
        "\nrequests 2..%d prefill at most suffix + %d tokens: %s; greedy outputs (%d "
        "tokens) identical on and off: %s\n",
        options.requests, block - 1, bounded ? "yes" : "NO", options.generated,
        same_outputs ? "yes" : "NO");
}

// ---- (b) KV codecs ----

struct CodecResult {
    std::string k, v;
    std::size_t bytes_per_token = 0;
    double perplexity = 0;
    std::vector<int> top1;  // argmax at each position
    double seconds = 0;
};

// Perplexity of text[1..] given the preceding tokens, the text fed `chunk` tokens at a time.
template <tinfer::ModelConfig Cfg, class KCodec, class VCodec>
CodecResult evaluate_codecs(tinfer::model::Llama<Cfg> const& model, Tokens const& text,
                            Options const& options) {
    using Cache = tinfer::kv::PagedKvCache<Cfg, 16, KCodec, VCodec>;
    int const n = static_cast<int>(text.size());
    Cache cache(Cache::bytes_per_block * static_cast<std::size_t>(Cache::blocks_for(n)));
    int const seq = cache.admit(n);
    typename tinfer::model::Llama<Cfg>::Workspace ws(options.chunk, options.threads);
    std::vector<float> logits(static_cast<std::size_t>(options.chunk) * Cfg.vocab);
    CodecResult result;
    result.k = KCodec::name;
    result.v = VCodec::name;
    result.bytes_per_token = Cache::bytes_per_token;
    result.top1.reserve(text.size());
    double nll = 0;
    auto const start = Clock::now();
    for (int first = 0; first < n; first += options.chunk) {
        int const count = std::min(options.chunk, n - first);
        if (!cache.reserve(seq, first + count)) throw std::runtime_error("codec bench: pool full");
        tinfer::SequenceChunk const chunk{
            seq, first, std::span(text).subspan(static_cast<std::size_t>(first), count), true};
        model.forward(std::span(&chunk, 1), cache, ws, logits);
        for (int i = 0; i < count; ++i) {
            float const* row = logits.data() + static_cast<std::size_t>(i) * Cfg.vocab;
            result.top1.push_back(argmax(row, Cfg.vocab));
            int const position = first + i;
            if (position + 1 >= n) continue;
            // -log softmax(row)[next] in double, max-shifted.
            float const largest = *std::max_element(row, row + Cfg.vocab);
            double sum = 0;
            for (int t = 0; t < Cfg.vocab; ++t) sum += std::exp(double(row[t]) - largest);
            nll += std::log(sum) + largest - row[text[static_cast<std::size_t>(position) + 1]];
        }
    }
    result.seconds = seconds_since(start);
    result.perplexity = std::exp(nll / (n - 1));
    cache.release(seq);
    return result;
}

template <tinfer::ModelConfig Cfg>
void bench_codecs(tinfer::model::Llama<Cfg> const& model, Tokens const& text,
                  Options const& options) {
    namespace kv = tinfer::kv;
    std::vector<CodecResult> results;
    auto const run = [&]<class K, class V>() {
        results.push_back(evaluate_codecs<Cfg, K, V>(model, text, options));
        auto const& r = results.back();
        std::fprintf(stderr, "  K %s, V %s: perplexity %.4f (%.0f s)\n", r.k.c_str(), r.v.c_str(),
                     r.perplexity, r.seconds);
    };
    run.template operator()<kv::Fp32Codec, kv::Fp32Codec>();  // the reference, first
    run.template operator()<kv::Fp16Codec, kv::Fp16Codec>();
    run.template operator()<kv::Bf16Codec, kv::Bf16Codec>();
    run.template operator()<kv::Fp8E4M3Codec, kv::Fp8E4M3Codec>();
    run.template operator()<kv::Fp8E5M2Codec, kv::Fp8E5M2Codec>();
    run.template operator()<kv::Int8Codec, kv::Int8Codec>();
    run.template operator()<kv::Int4Codec, kv::Int4Codec>();
    run.template operator()<kv::Int8Codec, kv::Int4Codec>();
    run.template operator()<kv::Fp8E4M3Codec, kv::Int4Codec>();
    run.template operator()<kv::Int4Codec, kv::Fp16Codec>();

    CodecResult const& reference = results.front();
    std::printf(
        "\n### KV codecs: teacher-forced perplexity over %zu tokens, chunks of %d, block "
        "16\n\n",
        text.size(), options.chunk);
    std::printf(
        "| K | V | KV bytes/token | vs fp32 | perplexity | vs fp32 | top-1 agreement | "
        "tokens/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (CodecResult const& r : results) {
        std::size_t agree = 0;
        for (std::size_t i = 0; i < r.top1.size(); ++i) agree += r.top1[i] == reference.top1[i];
        std::printf("| %s | %s | %zu | %.3fx | %.4f | %+.2f%% | %.2f%% | %.1f |\n", r.k.c_str(),
                    r.v.c_str(), r.bytes_per_token,
                    double(r.bytes_per_token) / double(reference.bytes_per_token), r.perplexity,
                    100.0 * (r.perplexity / reference.perplexity - 1.0),
                    100.0 * double(agree) / double(r.top1.size()), double(text.size()) / r.seconds);
    }
}

// ---- (c) utilization ----

// Only block bookkeeping runs, so the smallest shape keeps the pool cheap (the same workload as
// tests/kv/utilization_test.cpp).
constexpr int utilization_max_length = 2048;
constexpr tinfer::ModelConfig bookkeeping_shape{.layers = 1,
                                                .hidden = 32,
                                                .heads = 1,
                                                .kv_heads = 1,
                                                .head_dim = 32,
                                                .ffn = 32,
                                                .vocab = 32,
                                                .max_context = utilization_max_length,
                                                .weights = tinfer::DType::f32};

template <int BlockSize>
void utilization_row(std::vector<tinfer::kv::RequestLengths> const& requests, int pool_tokens) {
    using Cache = tinfer::kv::PagedKvCache<bookkeeping_shape, BlockSize>;
    Cache cache(Cache::bytes_per_block * static_cast<std::size_t>(pool_tokens / BlockSize));
    auto const report = tinfer::kv::measure_utilization(cache, requests, utilization_max_length);
    std::printf("| %d | %.1f%% | %.1f%% | %d | %d | %d |\n", BlockSize, 100 * report.paged,
                100 * report.contiguous, report.steps, report.peak_running, report.preemptions);
}

void bench_utilization() {
    auto const requests =
        tinfer::kv::lognormal_requests(601, 400, {.median = 300, .sigma = 0.9},
                                       {.median = 200, .sigma = 0.8}, utilization_max_length);
    double mean = 0;
    for (auto const& r : requests) mean += r.prompt_tokens + r.output_tokens;
    mean /= static_cast<double>(requests.size());
    int const pool_tokens = 32 * 1024;
    std::printf(
        "\n### Memory utilization: 400 requests, prompt lognormal(median 300, sigma 0.9), "
        "output lognormal(median 200, sigma 0.8), max length %d (mean final length %.0f), "
        "pool of %d tokens\n\n",
        utilization_max_length, mean, pool_tokens);
    std::printf(
        "| block size | paged | contiguous max-length preallocation | steps | peak "
        "running | preemptions |\n");
    std::printf("|---|---|---|---|---|---|\n");
    utilization_row<8>(requests, pool_tokens);
    utilization_row<16>(requests, pool_tokens);
    utilization_row<32>(requests, pool_tokens);
}

template <tinfer::ModelConfig Cfg>
void run(tinfer::gguf::File const& file, Options const& options) {
    auto const model = tinfer::model::Llama<Cfg>::bind(file);
    auto const tokenizer = tinfer::tok::tokenizer_from_gguf(file);
    std::string const text = tinfer::testing::read_texts(options.text);
    // Plain text, not a chat: special-token syntax in it (there is none) stays text.
    Tokens const tokens = tokenizer.encode(text, tinfer::tok::SpecialTokens::as_text);
    std::printf("text: %zu bytes, %zu tokens\n", text.size(), tokens.size());
    if (options.prefix) bench_prefix(model, tokens, options);
    if (options.codecs) bench_codecs(model, tokens, options);
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Paged KV cache: prefix caching, KV codec perplexity, memory utilization"};
    app.add_option("-m,--model", options.model)->capture_default_str();
    app.add_option("--text", options.text, "Text files, joined by a blank line")
        ->capture_default_str();
    app.add_option("-t,--threads", options.threads)->capture_default_str();
    app.add_option("--chunk", options.chunk, "Tokens per forward in the perplexity run")
        ->capture_default_str();
    app.add_option("--system", options.system_tokens, "Shared system prompt tokens")
        ->capture_default_str();
    app.add_option("--requests", options.requests)->capture_default_str();
    app.add_option("--generate", options.generated, "Greedy tokens per prefix-bench request")
        ->capture_default_str();
    app.add_flag("!--no-prefix", options.prefix);
    app.add_flag("!--no-codecs", options.codecs);
    app.add_flag("!--no-utilization", options.utilization);
    CLI11_PARSE(app, argc, argv);
    try {
        if (options.utilization) bench_utilization();
        if (options.prefix || options.codecs) {
            auto const file = tinfer::gguf::File::open(options.model);
            tinfer::model::with_shipped_preset(
                file, [&]<tinfer::ModelConfig Cfg>() { run<Cfg>(file, options); });
        }
    } catch (std::exception const& e) {
        std::fprintf(stderr, "kv_bench: %s\n", e.what());
        return 1;
    }
}
