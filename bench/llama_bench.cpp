// llama_bench: prefill and decode speed of a GGUF model on tinfer's CPU kernels, defined as
// llama.cpp's llama-bench defines them, so the figures compare directly:
//   ppN: N prompt tokens processed in one batch from an empty cache; t/s = N / time.
//   tgN: N tokens generated one at a time from an empty cache; t/s = N / time.
//   -d D: both after D cached positions instead ("pp512 @ d1024", "tg128 @ d1024").
// Each test runs `--repetitions` times after one warm-up; the table shows the median and the
// standard deviation. Also: batched decode (B sequences decoding together, total t/s), the
// achieved weight-read bandwidth of decode against the bandwidth this program measures over a
// buffer of the file's size (at the start and again beside each tg repetition, which the tg
// row's share uses), pp's matrix multiply-accumulates against the measured int8 dot rate, and
// where one decode step's time goes (layers, LM head, sampler, the rest).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/common/cli_options.hpp"

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kernels/sampling.hpp>
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
    int depth = 0;  // cached positions ahead of the pp and tg tests (llama-bench's -d)
    int batch = 16;
    int repetitions = 3;
    bool roofline = true;
    bool breakdown = true;  // the decode step's phases (three more decode runs per thread count)
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

// What the machine allows, measured in the same run, per thread count (0: not measured).
struct Roofline {
    std::vector<double> read_gbps;
    std::vector<double> int8_gmacs;
    std::vector<double> panel_gmacs;  // the panels' inner step, its operands in L1
    std::vector<double> amx_gmacs;    // the panels' AMX tile products (0: not used here)
    // Measures again beside each tg repetition (nullptr: --no-roofline).
    std::unique_ptr<tinfer::bench::ReadBandwidth> bandwidth;
    double at(std::vector<double> const& v, std::size_t i) const {
        return i < v.size() ? v[i] : 0.0;
    }
};

// Multiply-accumulates of one token's pass through the layers' matrix products (q, k, v, o,
// gate, up, down), of its attention over `keys` earlier positions, and of one LM-head row.
template <tinfer::ModelConfig Cfg>
double layer_matrix_macs() {
    return Cfg.layers * (double(Cfg.hidden) * (2.0 * Cfg.q_width() + 2.0 * Cfg.kv_width()) +
                         3.0 * Cfg.hidden * Cfg.ffn);
}
// Keys a query at `position` attends to under a sliding window (0: none).
int keys_seen(int position, int window) {
    return window > 0 ? std::min(position + 1, window) : position + 1;
}
template <tinfer::ModelConfig Cfg>
double attention_macs(int keys_of_global, int keys_of_sliding) {
    double macs = 0;
    for (int layer = 0; layer < Cfg.layers; ++layer) {
        bool const sliding = Cfg.layer_kind(layer) == tinfer::LayerKind::sliding;
        macs += 2.0 * Cfg.heads * Cfg.head_dim * (sliding ? keys_of_sliding : keys_of_global);
    }
    return macs;
}

// What the roofline lines say where the panels' step was not measured: measured_int8_panel_gmacs
// returns 0 where the panels do not run, and "0.0 GMAC/s" read as a measured rate.
constexpr char const* panels_not_run =
    "the panels' step not measured: the panels run on AVX-512 only";

// ppN's matrix products as a share of the measured int8 dot rate and of the panels' inner
// step (what GGUF's per-block scales leave of it), attention and the one LM-head row beside
// them.
template <tinfer::ModelConfig Cfg>
std::string prefill_share(int tokens, int depth, int threads, double tokens_per_second,
                          double peak_gmacs, double panel_gmacs, double amx_gmacs) {
    double keys_global = 0, keys_sliding = 0;
    for (int p = depth; p < depth + tokens; ++p) {
        keys_global += keys_seen(p, 0);
        keys_sliding += keys_seen(p, Cfg.sliding_window);
    }
    double const seconds = tokens / tokens_per_second;
    double const matrix_gmacs = tokens * layer_matrix_macs<Cfg>() / seconds / 1e9;
    double const attention_gmac = attention_macs<Cfg>(keys_global, keys_sliding) / 1e9;
    double const head_gmac = double(Cfg.vocab) * Cfg.hidden / 1e9;
    auto const share = [&](double of) {
        return of > 0 ? std::to_string(std::lround(100 * matrix_gmacs / of)) + "%"
                      : std::string("n/a");
    };
    char panels[96];
    std::snprintf(panels, sizeof panels, "%s of the panels' step (%.1f GMAC/s)",
                  share(panel_gmacs).c_str(), panel_gmacs);
    char text[640];
    std::snprintf(text, sizeof text,
                  "pp%d, %d thread(s): matrix products %.1f GMAC/s = %s of the int8 dot peak "
                  "(%.1f GMAC/s), %s; beside them attention %.2f GMAC, the LM head's one row "
                  "%.3f GMAC, against %.2f GMAC of matrix products",
                  tokens, threads, matrix_gmacs, share(peak_gmacs).c_str(), peak_gmacs,
                  panel_gmacs > 0 ? panels : panels_not_run, attention_gmac, head_gmac,
                  tokens * layer_matrix_macs<Cfg>() / 1e9);
    if (amx_gmacs <= 0) return text;
    char amx[160];
    std::snprintf(amx, sizeof amx,
                  "; the panels' tiles of 16 tokens ran on AMX: %s of its tile rate (%.1f GMAC/s)",
                  share(amx_gmacs).c_str(), amx_gmacs);
    return std::string(text) + amx;
}

// One decode step's seconds: with its sampler, without it, without the LM head (and final
// norm), and over one layer without the LM head; the sampler alone.
struct DecodePhases {
    double with_head = 0, layers = 0, one_layer = 0;
    double sampler = 0;  // the benchmark's greedy argmax over the vocabulary, timed alone
};

// Splits the step into per-layer time (from all layers against one), the LM head (with the
// final norm), the sampler (greedy argmax over the vocabulary) and the rest (what a one-layer
// pass costs beyond its layer: embedding, RoPE table, the thread team's start), each with the
// bytes it reads and their rate against the measured bandwidth.
template <tinfer::ModelConfig Cfg>
std::string decode_breakdown(tinfer::gguf::File const& file, int threads, DecodePhases const& t,
                             double read_gbps, int generated, int depth) {
    double layer_bytes = 0, head_bytes = 0;
    for (auto const& info : file.tensors())
        if (info.name.rfind("blk.", 0) == 0) layer_bytes += double(info.data.size());
    auto const* head = file.find_tensor("output.weight");
    if (head == nullptr) head = file.find_tensor("token_embd.weight");
    head_bytes = head ? double(head->data.size()) : 0.0;
    double const per_layer = (t.layers - t.one_layer) / (Cfg.layers - 1);
    double const step = t.with_head + t.sampler;  // the step, its sampler included
    double const lm_head = t.with_head - t.layers;
    double const sampler = t.sampler;
    double const rest = t.one_layer - per_layer;
    // KV read per step, float32 K and V, averaged over the run's positions: the token at
    // position i reads i + 1 keys, or the layer's sliding window of them.
    double kv_bytes = 0;
    for (int layer = 0; layer < Cfg.layers; ++layer) {
        int const window = Cfg.window_of(Cfg.layer_kind(layer));
        double keys = 0;
        for (int i = depth; i < depth + generated; ++i) keys += keys_seen(i, window);
        kv_bytes += 2.0 * Cfg.kv_width() * sizeof(float) * keys / generated;
    }
    double const ceiling = (layer_bytes + head_bytes) / (read_gbps * 1e9);
    auto const gbps = [](double bytes, double seconds) { return bytes / seconds / 1e9; };
    char text[1024];
    std::snprintf(
        text, sizeof text,
        "decode step, %d thread(s): %.3f ms = layers %d x %.4f ms (%.1f MB of weights at %.1f "
        "GB/s, and %.2f MB of cached keys and values at mean position %d) + LM head %.3f ms "
        "(%.1f MB at %.1f GB/s) + sampler %.3f ms (argmax over %d logits) + rest %.3f ms "
        "(embedding, RoPE table, team start)",
        threads, 1e3 * step, Cfg.layers, 1e3 * per_layer, layer_bytes / 1e6,
        gbps(layer_bytes, per_layer * Cfg.layers), kv_bytes / 1e6, depth + generated / 2,
        1e3 * lm_head, head_bytes / 1e6, gbps(head_bytes, lm_head), 1e3 * sampler, Cfg.vocab,
        1e3 * rest);
    if (read_gbps <= 0) return std::string(text) + "; no roofline measured";  // --no-roofline
    char reached[128];
    std::snprintf(reached, sizeof reached, "; the weights' roofline %.3f ms (%.0f%% of it reached)",
                  1e3 * ceiling, 100 * ceiling / step);
    return std::string(text) + reached;
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
         Roofline const& roofline) {
    using namespace tinfer;
    auto const model = model::Llama<Cfg>::bind(file);
    std::mt19937 rng(42);
    std::uniform_int_distribution<std::int32_t> token(0, Cfg.vocab - 1);
    // The batched test's steps, fixed here because the cache must hold them too.
    int const batched_steps = std::max(16, options.generated_tokens / 4);
    int const context = std::max(
        options.depth + std::max(options.prompt_tokens, options.generated_tokens), batched_steps);
    int const slots = std::max(1, options.batch);  // tg runs in slot 0 whatever -b says
    // The depth is prefilled (untimed) in chunks of up to 512 tokens.
    int const depth_chunk = std::min(options.depth, 512);
    std::vector<float> logits(static_cast<std::size_t>(slots) * Cfg.vocab);

    // llama-bench's columns, then the achieved weight-read rate and its share of the measured
    // read bandwidth (decode reads every weight once per step).
    std::printf("| %-28s | %10s | %8s | %-8s | %7s | %-13s | %16s | %9s | %9s |\n", "model", "size",
                "params", "backend", "threads", "test", "t/s", "GB/s", "% of BW");
    std::printf("| %-28s | %10s | %8s | %-8s | %7s | %-13s | %16s | %9s | %9s |\n", "---",
                "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:");
    double const params_m = parameters<Cfg>() / 1e6;
    // The file's own name and the type of its first layer matrix, as llama-bench labels a model.
    std::string label = file.get_optional<std::string>("general.name").value_or("model") + " " +
                        std::string(name_of(model.weights().layers[0].q.type));
    if (label.size() > 28) label.resize(28);
    std::vector<double> ratios;      // batched decode over single-sequence decode, per thread count
    std::vector<std::string> notes;  // the prefill shares and decode breakdowns, printed after
    for (std::size_t ti = 0; ti < options.threads.size(); ++ti) {
        int const threads = options.threads[ti];
        typename model::Llama<Cfg>::Workspace ws(
            std::max({options.prompt_tokens, slots, depth_chunk}), threads);
        kv::ContiguousKvCache<Cfg> cache(slots, context);
        // Slot 0 emptied, then holding options.depth random tokens.
        std::vector<std::int32_t> depth_tokens(static_cast<std::size_t>(depth_chunk));
        auto const fill_depth = [&] {
            cache.clear(0);
            for (int first = 0; first < options.depth; first += depth_chunk) {
                int const n = std::min(depth_chunk, options.depth - first);
                for (auto& t : depth_tokens) t = token(rng);
                SequenceChunk const chunk{
                    .slot = 0, .first_position = first, .tokens = std::span(depth_tokens).first(n)};
                model.template forward<Precision>(std::span(&chunk, 1), cache, ws,
                                                  std::span<float>());
            }
        };
        // llama-bench's test names: "tg128", or "tg128 @ d1024" after a depth.
        auto const test_name = [&](char const* kind, int tokens) {
            std::string name = kind + std::to_string(tokens);
            if (options.depth > 0) name += " @ d" + std::to_string(options.depth);
            return name;
        };
        // share_percent: the row's share of the read bandwidth where it was paired with the
        // bandwidth beside each repetition; otherwise gbps over the one measured at the start.
        auto const row = [&](std::string const& test, Stats s, double gbps,
                             double share_percent = 0) {
            char rate[64];
            std::snprintf(rate, sizeof rate, "%.2f ± %.2f", s.median, s.stddev);
            char bw[32] = "", share[32] = "";
            if (gbps > 0) {
                std::snprintf(bw, sizeof bw, "%.1f", gbps);
                if (share_percent > 0)
                    std::snprintf(share, sizeof share, "%.0f%%", share_percent);
                else if (double const bw_limit = roofline.at(roofline.read_gbps, ti); bw_limit > 0)
                    std::snprintf(share, sizeof share, "%.0f%%", 100 * gbps / bw_limit);
            }
            std::string const backend = std::string("CPU ") + Precision::name;
            std::printf("| %-28s | %6.2f MiB | %6.2f M | %-8s | %7d | %-13s | %16s | %9s | %9s |\n",
                        label.c_str(), model_gib * 1024, params_m, backend.c_str(), threads,
                        test.c_str(), rate, bw, share);
            std::fflush(stdout);
        };

        // ppN: one batch from an empty cache. A size of 0 skips the test (-p 0, -n 0, -b 0),
        // as llama-bench skips it.
        std::vector<std::int32_t> prompt(static_cast<std::size_t>(options.prompt_tokens));
        std::vector<double> rates;
        for (int r = 0; options.prompt_tokens > 0 && r <= options.repetitions; ++r) {
            for (auto& t : prompt) t = token(rng);
            fill_depth();
            SequenceChunk const chunk{.slot = 0, .first_position = options.depth, .tokens = prompt};
            double const s = bench::median_seconds(1, [&] {
                model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
            });
            if (r > 0) rates.push_back(options.prompt_tokens / s);  // r == 0 warms up
        }
        if (options.prompt_tokens > 0) {
            Stats const pp = stats_of(rates);
            row(test_name("pp", options.prompt_tokens), pp, 0);
            notes.push_back(prefill_share<Cfg>(options.prompt_tokens, options.depth, threads,
                                               pp.median, roofline.at(roofline.int8_gmacs, ti),
                                               roofline.at(roofline.panel_gmacs, ti),
                                               roofline.at(roofline.amx_gmacs, ti)));
        }

        // tgN: one token at a time from an empty cache (or one holding the depth). The read
        // bandwidth is measured again before each timed repetition and after the last, and each
        // repetition's weight-read rate is set against the mean of the two beside it: this
        // guest's bandwidth moves by up to 2x within a minute (its two vCPUs change placement),
        // so a figure from the start of the run can be the wrong ceiling for its tg rows.
        rates.clear();
        std::vector<double> bandwidth_beside;
        auto const measure_beside = [&] {
            if (roofline.bandwidth)
                bandwidth_beside.push_back(roofline.bandwidth->measure(threads, 3));
        };
        for (int r = 0; options.generated_tokens > 0 && r <= options.repetitions; ++r) {
            if (r > 0) measure_beside();
            fill_depth();
            std::int32_t next = token(rng);
            double const s = bench::median_seconds(1, [&] {
                for (int i = 0; i < options.generated_tokens; ++i) {
                    SequenceChunk const chunk{.slot = 0,
                                              .first_position = options.depth + i,
                                              .tokens = std::span(&next, 1)};
                    model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
                    next = kernels::first_argmax(std::span(logits).first(Cfg.vocab));
                }
            });
            if (r > 0) rates.push_back(options.generated_tokens / s);
        }
        Stats tg;
        double tg_bandwidth = roofline.at(roofline.read_gbps, ti);
        if (options.generated_tokens > 0) {
            measure_beside();
            tg = stats_of(rates);
            double const weight_bytes = model_gib * (1 << 30);
            std::vector<double> shares;
            for (std::size_t r = 0; r + 1 < bandwidth_beside.size(); ++r)
                shares.push_back(100 * rates[r] * weight_bytes /
                                 (0.5 * (bandwidth_beside[r] + bandwidth_beside[r + 1]) * 1e9));
            row(test_name("tg", options.generated_tokens), tg, tg.median * weight_bytes / 1e9,
                shares.empty() ? 0 : stats_of(shares).median);
            if (!shares.empty()) {
                tg_bandwidth = stats_of(bandwidth_beside).median;
                auto const [low, high] = std::ranges::minmax(shares);
                auto const [slowest, fastest] = std::ranges::minmax(bandwidth_beside);
                char note[256];
                std::snprintf(note, sizeof note,
                              "%s, %d thread(s): read bandwidth beside its repetitions "
                              "%.1f-%.1f GB/s; each repetition's weight reads against the "
                              "bandwidth beside it: %.0f%% median (%.0f-%.0f%%)",
                              test_name("tg", options.generated_tokens).c_str(), threads, slowest,
                              fastest, stats_of(shares).median, low, high);
                notes.push_back(note);
            }
        }
        if (options.breakdown && options.generated_tokens > 0) {
            // Each position of the decode run four ways back to back (the step with its
            // sampler; without the sampler; without the LM head; over one layer without it,
            // the last two rewriting the same KV), so that every variant sees the machine in
            // the same state; the least total over the repetitions is kept for each (on a
            // shared machine, interference only ever adds time).
            using Clock = std::chrono::steady_clock;
            auto const since = [](Clock::time_point a) {
                return std::chrono::duration<double>(Clock::now() - a).count();
            };
            DecodePhases phases{1e30, 1e30, 1e30, 1e30};
            std::int32_t const first = token(rng);
            for (int r = 0; r <= options.repetitions; ++r) {
                fill_depth();
                std::int32_t next = first;
                DecodePhases sum;
                for (int i = 0; i < options.generated_tokens; ++i) {
                    SequenceChunk const chunk{.slot = 0,
                                              .first_position = options.depth + i,
                                              .tokens = std::span(&next, 1)};
                    auto start = Clock::now();
                    model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
                    sum.with_head += since(start);
                    start = Clock::now();
                    next = kernels::first_argmax(std::span(logits).first(Cfg.vocab));
                    sum.sampler += since(start);
                    start = Clock::now();
                    model.template forward<Precision>(std::span(&chunk, 1), cache, ws,
                                                      std::span<float>());
                    sum.layers += since(start);
                    start = Clock::now();
                    model.template forward<Precision>(std::span(&chunk, 1), cache, ws,
                                                      std::span<float>(), 1);
                    sum.one_layer += since(start);
                }
                if (r == 0) continue;  // warm-up
                double const n = options.generated_tokens;
                phases.with_head = std::min(phases.with_head, sum.with_head / n);
                phases.sampler = std::min(phases.sampler, sum.sampler / n);
                phases.layers = std::min(phases.layers, sum.layers / n);
                phases.one_layer = std::min(phases.one_layer, sum.one_layer / n);
            }
            notes.push_back(decode_breakdown<Cfg>(file, threads, phases, tg_bandwidth,
                                                  options.generated_tokens, options.depth));
        }

        // Batched decode: B sequences, one token each per step, weights read once per step.
        rates.clear();
        std::vector<std::int32_t> next(static_cast<std::size_t>(options.batch));
        std::vector<SequenceChunk> chunks(next.size());
        for (int r = 0; options.batch > 0 && r <= options.repetitions; ++r) {
            for (int b = 0; b < options.batch; ++b) cache.clear(b);
            for (auto& t : next) t = token(rng);
            double const s = bench::median_seconds(1, [&] {
                for (int i = 0; i < batched_steps; ++i) {
                    for (int b = 0; b < options.batch; ++b)
                        chunks[b] = {
                            .slot = b, .first_position = i, .tokens = std::span(&next[b], 1)};
                    model.template forward<Precision>(chunks, cache, ws, logits);
                }
            });
            if (r > 0) rates.push_back(double(batched_steps) * options.batch / s);
        }
        if (options.batch == 0) continue;
        Stats const batched = stats_of(rates);
        row("tg x" + std::to_string(options.batch), batched, 0);
        if (options.generated_tokens > 0) ratios.push_back(batched.median / tg.median);
    }
    for (std::string const& note : notes) std::printf("\n%s", note.c_str());
    std::printf("\n");
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
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("-p,--prompt", options.prompt_tokens, "Prompt tokens of ppN (0: no pp test)")
        ->check(tinfer::examples::at_least(0))
        ->capture_default_str();
    app.add_option("-n,--generate", options.generated_tokens,
                   "Generated tokens of tgN (0: no tg test, no breakdown)")
        ->check(tinfer::examples::at_least(0))
        ->capture_default_str();
    app.add_option("-d,--depth", options.depth,
                   "Positions cached (random tokens, untimed) before each pp and tg run, as "
                   "llama-bench's -d; the batched test starts empty")
        ->check(tinfer::examples::at_least(0))
        ->capture_default_str();
    app.add_option("-b,--batch", options.batch,
                   "Sequences in the batched decode test (0: no batched test)")
        ->check(tinfer::examples::at_least(0))
        ->capture_default_str();
    app.add_option("-r,--repetitions", options.repetitions)
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_flag("!--no-roofline", options.roofline,
                 "Skip measuring bandwidth, the int8 dot rate and the GEMM rate");
    app.add_flag("!--no-breakdown", options.breakdown,
                 "Skip splitting a decode step into layers, LM head, sampler and the rest");
    app.add_option("--precision", options.precision,
                   "Activations: int8 (quantized per block of 32, as llama.cpp) or f32")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        auto const file = tinfer::gguf::File::open(options.model);
        double const model_gib = double(file.bytes().size()) / (1 << 30);
        std::printf("CPU kernels: %s\n", tinfer::kernels::describe_isa().c_str());
        Roofline roofline;
        std::unique_ptr<tinfer::bench::ReadBandwidth> beyond_caches;
        if (options.roofline) {
            for (int const t : options.threads) {
                // Decode reads the file's bytes once per token; a buffer of that size, read
                // over and over, comes from where they live between tokens (a last-level cache of
                // hundreds of MiB holds SmolLM2 whole); 1 GiB, beyond every cache, is shown too.
                if (!roofline.bandwidth) {
                    roofline.bandwidth =
                        std::make_unique<tinfer::bench::ReadBandwidth>(file.bytes().size());
                    beyond_caches = std::make_unique<tinfer::bench::ReadBandwidth>();
                }
                double const bw = roofline.bandwidth->measure(t);
                double const memory_bw = beyond_caches->measure(t);
                roofline.read_gbps.push_back(bw);
                roofline.int8_gmacs.push_back(tinfer::bench::measured_int8_gmacs(t));
                roofline.panel_gmacs.push_back(tinfer::bench::measured_int8_panel_gmacs(t));
                roofline.amx_gmacs.push_back(tinfer::bench::measured_amx_panel_gmacs(t));
                double const decode_ceiling = bw * 1e9 / double(file.bytes().size());
                char panels[160];
                std::snprintf(panels, sizeof panels, "the prefill panels' step from L1: %.1f",
                              roofline.panel_gmacs.back());
                if (double const amx = roofline.amx_gmacs.back(); amx > 0)
                    std::snprintf(panels + std::strlen(panels), sizeof panels - std::strlen(panels),
                                  "; their AMX tile products: %.1f", amx);
                std::printf(
                    "roofline, %d thread(s): read bandwidth %.1f GB/s over a buffer of the "
                    "file's size (decode ceiling %.0f t/s for the %.1f MB file; %.1f GB/s over "
                    "1 GiB), int8 dot %.1f GMAC/s (%s), sgemm %.1f GFLOP/s\n",
                    t, bw, decode_ceiling, file.bytes().size() / 1e6, memory_bw,
                    roofline.int8_gmacs.back(),
                    roofline.panel_gmacs.back() > 0 ? panels : panels_not_run,
                    tinfer::bench::measured_sgemm_gflops(t));
            }
        }
        tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            if (options.precision == "int8") {
                run<Cfg, tinfer::kernels::Int8Activations>(file, options, model_gib, roofline);
            } else {
                run<Cfg, tinfer::kernels::Float32Activations>(file, options, model_gib, roofline);
            }
        });
    } catch (std::exception const& e) {
        std::fprintf(stderr, "llama_bench: %s\n", e.what());
        return 1;
    }
}
