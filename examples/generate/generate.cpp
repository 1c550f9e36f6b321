// generate: streams SmolLM2's (or any compiled-in shape's) answer to a prompt, computed by
// tinfer's own kernels on the CPU, then reports the timings on stderr.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/config/presets.hpp>
#include <tinfer/engine/output_stream.hpp>
#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/format/tokenizer_gguf.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/with_preset.hpp>

namespace {

std::atomic<bool> interrupted{false};

struct Options {
    std::string model;
    std::string prompt;
    std::string system;
    bool chat = false;
    int max_tokens = 256;
    int threads = 0;
    int prefill_chunk = 512;
    std::vector<std::string> stop;
    tinfer::kernels::SamplingParams sampling;
};

std::filesystem::path default_model_path() {
    char const* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : ".") / ".cache/tinfer/models" /
           "SmolLM2-135M-Instruct.Q4_1.gguf";
}

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

template <tinfer::ModelConfig Cfg>
int run(tinfer::gguf::File const& file, Options const& options) {
    using namespace tinfer;
    tok::Tokenizer const tokenizer = tok::tokenizer_from_gguf(file);
    std::string text = options.prompt;
    if (options.chat) {
        tok::ChatTemplate const chat = tok::chat_template_from_gguf(file);
        std::vector<tok::ChatMessage> messages;
        if (!options.system.empty()) messages.push_back({"system", options.system});
        messages.push_back({"user", options.prompt});
        text = chat.render(messages, /*add_generation_prompt=*/true);
    }
    std::vector<std::int32_t> const prompt = tokenizer.encode(text);
    if (prompt.empty()) throw RequestError("the prompt encodes to no tokens");
    int const context = Cfg.max_context;
    if (static_cast<int>(prompt.size()) >= context)
        throw RequestError("the prompt has " + std::to_string(prompt.size()) +
                           " tokens; the model's context holds " + std::to_string(context));
    int const max_new = std::min(options.max_tokens, context - static_cast<int>(prompt.size()));

    auto const model = Llama<Cfg>::bind(file);
    int const threads = options.threads > 0 ? options.threads : omp_get_num_procs();
    typename Llama<Cfg>::Workspace workspace(options.prefill_chunk, threads);
    kv::ContiguousKvCache<Cfg> cache(1, static_cast<int>(prompt.size()) + max_new);
    kernels::SamplingWorkspace sampling_workspace(Cfg.vocab);
    std::vector<float> logits(Cfg.vocab);
    OutputStream output(
        tokenizer, {.max_new_tokens = max_new, .stop_token_ids = {}, .stop_strings = options.stop});

    auto const start = Clock::now();
    // Prefill in chunks of at most the workspace's size; logits of the last chunk only.
    for (std::size_t first = 0; first < prompt.size(); first += options.prefill_chunk) {
        std::size_t const count =
            std::min<std::size_t>(options.prefill_chunk, prompt.size() - first);
        SequenceChunk const chunk{.slot = 0,
                                  .first_position = static_cast<int>(first),
                                  .tokens = std::span(prompt).subspan(first, count)};
        model.forward(std::span(&chunk, 1), cache, workspace, logits);
    }
    Clock::time_point first_token_time{};
    int position = static_cast<int>(prompt.size());
    for (std::uint32_t step = 0;; ++step) {
        kernels::TokenHistory const history{prompt, output.tokens()};
        auto const sampled = kernels::sample_token(logits, options.sampling, history,
                                                   /*request_id=*/0, step, sampling_workspace);
        auto const emitted = output.accept(sampled.token);
        if (step == 0) first_token_time = Clock::now();
        std::cout << emitted.text << std::flush;
        if (emitted.finish || interrupted) break;
        std::int32_t const token = sampled.token;
        SequenceChunk const chunk{
            .slot = 0, .first_position = position, .tokens = std::span(&token, 1)};
        model.forward(std::span(&chunk, 1), cache, workspace, logits);
        ++position;
    }
    auto const end = Clock::now();
    std::cout << std::endl;

    auto const generated = static_cast<int>(output.tokens().size());
    double const ttft = seconds_between(start, first_token_time);
    double const decode_seconds = seconds_between(first_token_time, end);
    double const tpot = generated > 1 ? decode_seconds / (generated - 1) : 0.0;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::fprintf(
        stderr,
        "\n[tinfer] prompt tokens %zu, generated tokens %d (%s), threads %d\n"
        "[tinfer] TTFT %.1f ms, TPOT %.1f ms\n"
        "[tinfer] prefill %.1f tokens/s, decode %.1f tokens/s, peak RSS %.1f MiB\n",
        prompt.size(), generated,
        interrupted ? "interrupted" : std::string(name_of(output.finish_reason().value())).c_str(),
        threads, ttft * 1e3, tpot * 1e3, prompt.size() / ttft,
        generated > 1 ? (generated - 1) / decode_seconds : 0.0, usage.ru_maxrss / 1024.0);
    return interrupted ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = default_model_path().string();
    CLI::App app{"Generate text with a GGUF model on tinfer's CPU kernels"};
    app.add_option("--model", options.model, "GGUF file")->capture_default_str();
    app.add_option("--prompt", options.prompt, "Prompt text (a user message with --chat)")
        ->required();
    app.add_flag("--chat", options.chat, "Wrap the prompt in the model's chat template");
    app.add_option("--system", options.system, "System message for --chat");
    app.add_option("--max-tokens", options.max_tokens, "Most tokens to generate")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--temperature", options.sampling.temperature, "0 = greedy")
        ->capture_default_str();
    app.add_option("--top-k", options.sampling.top_k, "0 = off")->capture_default_str();
    app.add_option("--top-p", options.sampling.top_p, "1 = off")->capture_default_str();
    app.add_option("--min-p", options.sampling.min_p, "0 = off")->capture_default_str();
    app.add_option("--seed", options.sampling.seed, "Sampling seed")->capture_default_str();
    app.add_option("--threads", options.threads, "CPU threads (default: all)");
    app.add_option("--stop", options.stop, "Stop string (repeatable); never printed");
    CLI11_PARSE(app, argc, argv);

    std::signal(SIGINT, [](int) { interrupted = true; });
    try {
        if (options.prompt.empty()) throw tinfer::RequestError("the prompt is empty");
        auto const file = tinfer::gguf::File::open(options.model);
        return tinfer::with_preset<tinfer::presets::smollm2_135m>(
            file, [&]<tinfer::ModelConfig Cfg>() { return run<Cfg>(file, options); });
    } catch (std::exception const& e) {
        std::cerr << "generate: " << e.what() << "\n";
        return 1;
    }
}
