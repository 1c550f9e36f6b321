// batched_bench: B sequences prefilled together, then decoding together, reported as llama.cpp's
// llama-batched-bench reports it, so the tables compare row by row:
//   PP, TG: prompt and generated tokens per sequence; B: sequences; N_KV = B * (PP + TG);
//   T_PP: seconds to prefill the B prompts (batches of at most --ubatch rows, as llama.cpp's
//   n_ubatch); S_PP = B * PP / T_PP; T_TG: seconds for TG steps of B tokens (one per sequence,
//   each with its logits); S_TG = B * TG / T_TG; T = T_PP + T_TG; S = N_KV / T.
// No sampling, as llama-batched-bench: each step feeds the same token. Int8 activations (as
// llama.cpp quantizes activations for its quantized matrix products) unless --precision f32.
// K and V cached as fp16 (llama.cpp's default -ctk f16 -ctv f16: the same bytes a decode step's
// attention reads) in a paged cache, or as fp32 in the contiguous one with --kv fp32.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../examples/common/cli_options.hpp"

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/shipped_presets.hpp>

#include "support/roofline.hpp"

namespace {

struct Options {
    std::string model;
    std::vector<int> threads{1, 2};
    std::vector<int> prompt_tokens{128};             // -npp
    std::vector<int> generated_tokens{128};          // -ntg
    std::vector<int> sequences{1, 2, 4, 8, 16, 32};  // -npl
    int ubatch = 512;
    std::string precision = "int8";
    std::string kv = "fp16";
};

inline constexpr int warm_up_tokens = 16;

// The B sequences' caches: `restart(s, tokens)` empties sequence s with room for `tokens`
// positions, `slot(s)` is its slot for SequenceChunk.
template <tinfer::ModelConfig Cfg>
struct ContiguousSlots {
    static std::string describe() { return "fp32, contiguous"; }
    tinfer::kv::ContiguousKvCache<Cfg> cache;
    ContiguousSlots(int sequences, int tokens) : cache(sequences, tokens) {}
    void restart(int s, int /*tokens*/) { cache.clear(s); }
    int slot(int s) const { return s; }
};
template <tinfer::ModelConfig Cfg, class Codec>
struct PagedSlots {
    static std::string describe() { return std::string(Codec::name) + ", paged in blocks of 16"; }
    using Cache = tinfer::kv::PagedKvCache<Cfg, 16, Codec, Codec>;
    Cache cache;
    std::vector<int> sequences;
    PagedSlots(int count, int tokens)
        : cache(Cache::bytes_per_block * static_cast<std::size_t>(Cache::blocks_for(tokens)) *
                static_cast<std::size_t>(count)),
          sequences(static_cast<std::size_t>(count), -1) {}
    void restart(int s, int tokens) {
        int& seq = sequences[static_cast<std::size_t>(s)];
        if (seq >= 0) cache.release(seq);
        seq = cache.admit(tokens);
        if (!cache.reserve(seq, tokens)) throw tinfer::Error("batched_bench: KV pool full");
    }
    int slot(int s) const { return sequences[static_cast<std::size_t>(s)]; }
};

template <tinfer::ModelConfig Cfg, class Precision, class Slots>
void run(Options const& options, tinfer::gguf::File const& file) {
    using namespace tinfer;
    auto const model = model::Llama<Cfg>::bind(file);
    int const most_sequences =
        *std::max_element(options.sequences.begin(), options.sequences.end());
    int const longest =
        *std::max_element(options.prompt_tokens.begin(), options.prompt_tokens.end()) +
        *std::max_element(options.generated_tokens.begin(), options.generated_tokens.end());
    int const rows = std::max(options.ubatch, most_sequences);
    std::vector<float> logits(static_cast<std::size_t>(rows) * Cfg.vocab);
    int const room = std::max(longest, warm_up_tokens);
    Slots slots(most_sequences, room);
    auto& cache = slots.cache;
    std::mt19937 rng(42);
    std::uniform_int_distribution<std::int32_t> token(0, Cfg.vocab - 1);

    for (int const threads : options.threads) {
        typename model::Llama<Cfg>::Workspace ws(rows, threads);
        std::printf("\nthreads %d, ubatch %d, %s activations, KV %s, CPU kernels %s\n\n", threads,
                    options.ubatch, Precision::name, Slots::describe().c_str(),
                    kernels::describe_isa().c_str());
        std::printf("| %6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG",
                    "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
        std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n",
                    "-------:", "-------:", "-----:", "-------:", "---------:", "---------:",
                    "---------:", "---------:", "---------:", "---------:");
        // A warm-up pass (llama-batched-bench makes one too): page faults, the int8 repack.
        {
            std::vector<std::int32_t> warm(warm_up_tokens, 1);
            slots.restart(0, room);
            SequenceChunk const chunk{.slot = slots.slot(0), .first_position = 0, .tokens = warm};
            model.template forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
        }
        for (int const pp : options.prompt_tokens) {
            for (int const tg : options.generated_tokens) {
                for (int const b : options.sequences) {
                    for (int s = 0; s < b; ++s) slots.restart(s, room);
                    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(b));
                    for (auto& p : prompts) {
                        p.resize(static_cast<std::size_t>(pp));
                        for (auto& t : p) t = token(rng);
                    }
                    // Prefill: the B prompts back to back, cut into steps of at most ubatch
                    // rows; each sequence's piece in a step is one chunk.
                    double const t_pp = bench::median_seconds(1, [&] {
                        std::vector<SequenceChunk> chunks;
                        int sequence = 0, done = 0;  // the next sequence and its tokens done
                        while (sequence < b) {
                            chunks.clear();
                            int room = options.ubatch;
                            while (room > 0 && sequence < b) {
                                int const take = std::min(room, pp - done);
                                chunks.push_back(
                                    {.slot = slots.slot(sequence),
                                     .first_position = done,
                                     .tokens = std::span(prompts[sequence]).subspan(done, take)});
                                room -= take;
                                done += take;
                                if (done == pp) {
                                    ++sequence;
                                    done = 0;
                                }
                            }
                            model.template forward<Precision>(chunks, cache, ws, logits);
                        }
                    });
                    // Decode: TG steps of one token per sequence.
                    std::vector<std::int32_t> next(static_cast<std::size_t>(b), 0);
                    std::vector<SequenceChunk> chunks(static_cast<std::size_t>(b));
                    double const t_tg = bench::median_seconds(1, [&] {
                        for (int i = 0; i < tg; ++i) {
                            for (int s = 0; s < b; ++s)
                                chunks[s] = {.slot = slots.slot(s),
                                             .first_position = pp + i,
                                             .tokens = std::span(&next[s], 1)};
                            model.template forward<Precision>(chunks, cache, ws, logits);
                        }
                    });
                    int const n_kv = b * (pp + tg);
                    std::printf(
                        "| %6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f "
                        "|\n",
                        pp, tg, b, n_kv, t_pp, double(b) * pp / t_pp, t_tg, double(b) * tg / t_tg,
                        t_pp + t_tg, n_kv / (t_pp + t_tg));
                    std::fflush(stdout);
                }
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Batched prefill and decode, as llama-batched-bench reports them"};
    app.add_option("-m,--model", options.model)->capture_default_str();
    app.add_option("-t,--threads", options.threads, "Thread counts (1,2)")
        ->delimiter(',')
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("--npp", options.prompt_tokens, "Prompt tokens per sequence (128,256)")
        ->delimiter(',')
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("--ntg", options.generated_tokens, "Generated tokens per sequence")
        ->delimiter(',')
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("--npl", options.sequences, "Sequences decoding together (1,2,4,...)")
        ->delimiter(',')
        ->check(tinfer::examples::at_least(1))
        ->capture_default_str();
    app.add_option("--ubatch", options.ubatch, "Most rows per prefill step (llama.cpp's -ub)")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--precision", options.precision, "Activations: int8 or f32")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    app.add_option("--kv", options.kv, "K and V cached as fp16 (llama.cpp's default) or fp32")
        ->check(CLI::IsMember({"fp16", "fp32"}))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        auto const file = tinfer::gguf::File::open(options.model);
        std::printf("model %s, %.1f MB\n", options.model.c_str(), file.bytes().size() / 1e6);
        tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            auto const with_kv = [&]<class Precision>() {
                if (options.kv == "fp16") {
                    run<Cfg, Precision, PagedSlots<Cfg, tinfer::kv::Fp16Codec>>(options, file);
                } else {
                    run<Cfg, Precision, ContiguousSlots<Cfg>>(options, file);
                }
            };
            if (options.precision == "int8") {
                with_kv.template operator()<tinfer::kernels::Int8Activations>();
            } else {
                with_kv.template operator()<tinfer::kernels::Float32Activations>();
            }
        });
    } catch (std::exception const& e) {
        std::fprintf(stderr, "batched_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
