// llama_bench: prefill and decode speed of a GGUF model on tinfer's CPU kernels, defined as
// llama.cpp's llama-bench defines them, so the figures compare directly:
//   ppN: N prompt tokens processed in one batch from an empty cache; t/s = N / time.
//   tgN: N tokens generated one at a time from an empty cache; t/s = N / time.
// Each test runs `--repetitions` times after one warm-up; the table shows the median and the
// standard deviation. Also: batched decode (B sequences decoding together, total t/s) and the
// achieved weight-read bandwidth of decode against the bandwidth this program measures.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/common/cli_options.hpp"

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/shipped_presets.hpp>
#include <tinfer/presets/presets.hpp>

#include "support/roofline.hpp"

namespace {

struct Options {
    std::string model;
    std::vector<int> threads{1, 2};
    int prompt_tokens = 512;
    int generated_tokens = 128;
    int batch = 16;
    int repetitions = 3;
    bool roofline = true;
    std::string precision = "int8";
};

struct Stats {
    double median = 0;
    double stddev = 0;
};

Stats stats_of(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    double const mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
    double variance = 0;
    for (double v : values) variance += (v - mean) * (v - mean);
    return {values[values.size() / 2],
            values.size() > 1 ? std::sqrt(variance / (values.size() - 1)) : 0.0};
}

// Parameters of the model's matrices and norms (the tied embedding counted once), as llama-bench
// reports them.
template <tinfer::ModelConfig Cfg>
double parameters() {
    double const per_layer = double(Cfg.hidden) * (2.0 * Cfg.q_width() + 2.0 * Cfg.kv_width()) +
                             3.0 * Cfg.hidden * Cfg.ffn + 2.0 * Cfg.hidden;
    return double(Cfg.vocab) * Cfg.hidden + Cfg.layers * per_layer + Cfg.hidden;
}

template <tinfer::ModelConfig Cfg, class Precision>
void run(tinfer::gguf::File const& file, Options const& options, double model_gib,
         std::vector<double> const& read_gbps) {
    using namespace tinfer;
    auto const model = model::Llama<Cfg>::bind(file);
    std::mt19937 rng(42);
    std::uniform_int_distribution<std::int32_t> token(0, Cfg.vocab - 1);
    int const context = options.prompt_tokens + options.generated_tokens;
    std::vector<float> logits(static_cast<std::size_t>(options.batch) * Cfg.vocab);

    // llama-bench's columns, then the achieved weight-read rate and its share of the measured
    // read bandwidth (decode reads every weight once per step).
    std::printf("| %-28s | %10s | %8s | %-8s | %7s | %-11s | %16s | %9s | %9s |\n", "model", "size",
                "params", "backend", "threads", "test", "t/s", "GB/s", "% of BW");
    std::printf("| %-28s | %10s | %8s | %-8s | %7s | %-11s | %16s | %9s | %9s |\n", "---",
                "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:");
    double const params_m = parameters<Cfg>() / 1e6;
    // The file's own name and the type of its first layer matrix, as llama-bench labels a model.
    std::string label = file.get_optional<std::string>("general.name").value_or("model") + " " +
                        std::string(name_of(model.weights().layers[0].q.type));
    if (label.size() > 28) label.resize(28);
    std::vector<double> ratios;  // batched decode over single-sequence decode, per thread count
    for (std::size_t ti = 0; ti < options.threads.size(); ++ti) {
        int const threads = options.threads[ti];
        typename model::Llama<Cfg>::Workspace ws(std::max(options.prompt_tokens, options.batch),
                                                 threads);
        kv::ContiguousKvCache<Cfg> cache(options.batch, context);
        auto const row = [&](std::string const& test, Stats s, double gbps) {
            char rate[64];
            std::snprintf(rate, sizeof rate, "%.2f ± %.2f", s.median, s.stddev);
            char bw[32] = "", share[32] = "";
            if (gbps > 0) {
                std::snprintf(bw, sizeof bw, "%.1f", gbps);
                if (ti < read_gbps.size() && read_gbps[ti] > 0)
                    std::snprintf(share, sizeof share, "%.0f%%", 100 * gbps / read_gbps[ti]);
            }
            std::string const backend = std::string("CPU ") + Precision::name;
            std::printf("| %-28s | %6.2f MiB | %6.2f M | %-8s | %7d | %-11s | %16s | %9s | %9s |\n",
                        label.c_str(), model_gib * 1024, params_m, backend.c_str(), threads,
                        test.c_str(), rate, bw, share);
            std::fflush(stdout);
        };

        // ppN: one batch from an empty cache.
        std::vector<std::int32_t> prompt(static_cast<std::size_t>(options.prompt_tokens));
        std::vector<double> rates;
        for (int r = 0; r <= options.repetitions; ++r) {
            for (auto& t : prompt) t = token(rng);
            cache.clear(0);
            SequenceChunk const chunk{.slot = 0, .first_position = 0, .tokens = prompt};
            double const s = bench::median_seconds(1, [&] {
                model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
            });
            if (r > 0) rates.push_back(options.prompt_tokens / s);  // r == 0 warms up
        }
        row("pp" + std::to_string(options.prompt_tokens), stats_of(rates), 0);

        // tgN: one token at a time from an empty cache.
        rates.clear();
        for (int r = 0; r <= options.repetitions; ++r) {
            cache.clear(0);
            std::int32_t next = token(rng);
            double const s = bench::median_seconds(1, [&] {
                for (int i = 0; i < options.generated_tokens; ++i) {
                    SequenceChunk const chunk{
                        .slot = 0, .first_position = i, .tokens = std::span(&next, 1)};
                    model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
                    next = static_cast<std::int32_t>(
                        std::max_element(logits.begin(), logits.begin() + Cfg.vocab) -
                        logits.begin());
                }
            });
            if (r > 0) rates.push_back(options.generated_tokens / s);
        }
        Stats const tg = stats_of(rates);
        row("tg" + std::to_string(options.generated_tokens), tg,
            tg.median * model_gib * (1 << 30) / 1e9);

        // Batched decode: B sequences, one token each per step, weights read once per step.
        rates.clear();
        std::vector<std::int32_t> next(static_cast<std::size_t>(options.batch));
        std::vector<SequenceChunk> chunks(next.size());
        int const steps = std::max(16, options.generated_tokens / 4);
        for (int r = 0; r <= options.repetitions; ++r) {
            for (int b = 0; b < options.batch; ++b) cache.clear(b);
            for (auto& t : next) t = token(rng);
            double const s = bench::median_seconds(1, [&] {
                for (int i = 0; i < steps; ++i) {
                    for (int b = 0; b < options.batch; ++b)
                        chunks[b] = {
                            .slot = b, .first_position = i, .tokens = std::span(&next[b], 1)};
                    model.template forward<Precision>(chunks, cache, ws, logits);
                }
            });
            if (r > 0) rates.push_back(double(steps) * options.batch / s);
        }
        Stats const batched = stats_of(rates);
        row("tg x" + std::to_string(options.batch), batched, 0);
        ratios.push_back(batched.median / tg.median);
    }
    for (std::size_t ti = 0; ti < ratios.size(); ++ti)
        std::printf("\nbatched decode, %d thread(s): %d sequences give %.1fx the tokens/s of one",
                    options.threads[ti], options.batch, ratios[ti]);
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Prefill (ppN) and decode (tgN) speed, as llama-bench defines them"};
    app.add_option("-m,--model", options.model)->capture_default_str();
    app.add_option("-t,--threads", options.threads, "Thread counts to test (1,2 or 1 2)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("-p,--prompt", options.prompt_tokens)->capture_default_str();
    app.add_option("-n,--generate", options.generated_tokens)->capture_default_str();
    app.add_option("-b,--batch", options.batch, "Sequences in the batched decode test")
        ->capture_default_str();
    app.add_option("-r,--repetitions", options.repetitions)->capture_default_str();
    app.add_flag("!--no-roofline", options.roofline, "Skip measuring bandwidth and GEMM rate");
    app.add_option("--precision", options.precision,
                   "Activations: int8 (quantized per block of 32, as llama.cpp) or f32")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        auto const file = tinfer::gguf::File::open(options.model);
        double const model_gib = double(file.bytes().size()) / (1 << 30);
        std::printf("CPU kernels: %s\n", tinfer::kernels::describe_isa().c_str());
        std::vector<double> read_gbps;
        if (options.roofline) {
            for (int const t : options.threads) {
                read_gbps.push_back(tinfer::bench::measured_read_gbps(t));
                double const decode_ceiling = read_gbps.back() * 1e9 / double(file.bytes().size());
                std::printf(
                    "roofline, %d thread(s): read bandwidth %.1f GB/s (decode ceiling "
                    "%.0f t/s for the %.1f MB file), sgemm %.1f GFLOP/s\n",
                    t, read_gbps.back(), decode_ceiling, file.bytes().size() / 1e6,
                    tinfer::bench::measured_sgemm_gflops(t));
            }
        }
        tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            if (options.precision == "int8") {
                run<Cfg, tinfer::kernels::Int8Activations>(file, options, model_gib, read_gbps);
            } else {
                run<Cfg, tinfer::kernels::Float32Activations>(file, options, model_gib, read_gbps);
            }
        });
    } catch (std::exception const& e) {
        std::fprintf(stderr, "llama_bench: %s\n", e.what());
        return 1;
    }
}
