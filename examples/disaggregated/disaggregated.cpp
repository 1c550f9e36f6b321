// disaggregated: one prompt served by two MPI processes, the way a prefill pool and a decode
// pool share the work. Rank 0 prefills the prompt, samples the first token and ships the KV
// blocks; rank 1 adopts them and decodes, then prints the text and where the time went.
//
//   mpirun --oversubscribe --allow-run-as-root -n 2 build/examples/disaggregated --prompt "..."
//
// Both ranks tokenize the prompt themselves: they play the router too, which hands every
// request to both pools. The KV cache stores fp32, so the text is exactly what
// build/examples/generate prints for the same prompt and sampling settings.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <omp.h>
#include <CLI/CLI.hpp>

#include "../common/cli_options.hpp"

#include <tinfer/config/presets.hpp>
#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/engine/output_stream.hpp>
#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/format/tokenizer_gguf.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/with_preset.hpp>

namespace {

constexpr int prefill_rank = 0;
constexpr int decode_rank = 1;
constexpr int ranks_needed = 2;
constexpr int block_size = 16;
// Rank 0 tells rank 1 its timings on a tag of their own, after the hand-off: reporting only.
constexpr int timings_tag = tinfer::distributed::default_kv_transfer_tag + 1;

struct Options {
    std::string model;
    std::string prompt;
    bool chat = false;
    int max_tokens = 64;
    int threads = 0;
    int prefill_chunk = 512;
    tinfer::kernels::SamplingParams sampling;
};

template <tinfer::ModelConfig Cfg>
int run(tinfer::gguf::File const& file, Options const& options,
        tinfer::distributed::MpiCommunicator& comm) {
    using namespace tinfer;
    using Cache = kv::PagedKvCache<Cfg, block_size, kv::Fp32Codec>;
    using Model = Llama<Cfg>;

    tok::Tokenizer const tokenizer = tok::tokenizer_from_gguf(file);
    std::string text = options.prompt;
    if (options.chat) {
        std::vector<tok::ChatMessage> const messages{{"user", options.prompt}};
        text = tok::chat_template_from_gguf(file).render(messages, /*add_generation_prompt=*/true);
    }
    constexpr std::uint64_t request_id = 0;
    GenerationRequest const request{.prompt_tokens = tokenizer.encode_prompt(text),
                                    .max_tokens = options.max_tokens,
                                    .sampling = options.sampling};
    distributed::validate_routed(request_id, request, distributed::worker_limits<Cfg, Cache>(0));

    auto const model = Model::bind(file);
    int const threads =
        options.threads > 0 ? options.threads : std::max(1, omp_get_num_procs() / comm.size());
    // Each cache holds exactly what its side keeps of this one request.
    auto const cache_bytes = [](int positions) {
        return static_cast<std::size_t>(Cache::blocks_for(positions)) * Cache::bytes_per_block;
    };

    if (comm.rank() == prefill_rank) {
        Cache cache(cache_bytes(static_cast<int>(request.prompt_tokens.size())));
        distributed::PrefillWorker prefill(model, cache, comm,
                                           {.decode_rank = decode_rank,
                                            .chunk_tokens = options.prefill_chunk,
                                            .threads = threads});
        distributed::PrefillReport const report = prefill.serve(request_id, request);
        std::array<double, 2> const timings{report.prefill_seconds, report.transfer_seconds};
        comm.send(std::as_bytes(std::span(timings)), decode_rank, timings_tag);
        return 0;
    }

    Cache cache(cache_bytes(distributed::kv_positions_of(request)));
    auto const ends = tokenizer.end_of_generation();
    distributed::DecodeWorker decode(model, cache, comm,
                                     {.prefill_rank = prefill_rank,
                                      .max_batch = 1,
                                      .threads = threads,
                                      .end_of_generation = {ends.begin(), ends.end()}});
    decode.expect(request_id, request);
    std::vector<Completion> const done = decode.run_until_idle();
    std::array<double, 2> prefill_timings{};
    comm.recv(std::as_writable_bytes(std::span(prefill_timings)), prefill_rank, timings_tag);
    Completion const& completion = done.front();

    OutputStream output(tokenizer, {.max_new_tokens = options.max_tokens});
    for (std::int32_t const token : completion.tokens) std::cout << output.accept(token).text;
    std::cout << std::endl;

    auto const prompt_tokens = static_cast<int>(request.prompt_tokens.size());
    double const formula_bytes = Cfg.kv_bytes(prompt_tokens);
    distributed::DecodeStats const& stats = decode.stats();
    std::fprintf(
        stderr,
        "\n[disaggregated] prompt tokens %d, generated %zu (%s), %d thread(s) per rank\n"
        "[disaggregated] prefill (rank %d): %.1f ms, %.1f tokens/s\n"
        "[disaggregated] KV transfer: %zu bytes (%d blocks of %d tokens + %zu-byte header; "
        "formula tokens x %.0f B = %.0f B), received in %.2f ms (%.2f GB/s), sent in %.2f ms\n"
        "[disaggregated] decode (rank %d): %lld tokens in %.1f ms, %.1f tokens/s\n",
        prompt_tokens, completion.tokens.size(), std::string(name_of(completion.finish)).c_str(),
        threads, prefill_rank, prefill_timings[0] * 1e3, prompt_tokens / prefill_timings[0],
        completion.handoff.bytes_received, Cache::blocks_for(prompt_tokens), block_size,
        distributed::kv_transfer_header_bytes, Cfg.kv_bytes_per_token(), formula_bytes,
        completion.handoff.transfer_seconds * 1e3,
        static_cast<double>(completion.handoff.bytes_received) /
            completion.handoff.transfer_seconds / 1e9,
        prefill_timings[1] * 1e3, decode_rank, static_cast<long long>(stats.decoded_rows),
        stats.forward_seconds * 1e3,
        stats.forward_seconds > 0 ? static_cast<double>(stats.decoded_rows) / stats.forward_seconds
                                  : 0.0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    tinfer::distributed::MpiEnvironment environment(&argc, &argv);
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Serve one prompt with prefill on MPI rank 0 and decode on rank 1"};
    app.add_option("--model", options.model, "GGUF file")->capture_default_str();
    app.add_option("--prompt", options.prompt, "Prompt text (a user message with --chat)")
        ->required();
    app.add_flag("--chat", options.chat, "Wrap the prompt in the model's chat template");
    app.add_option("--max-tokens", options.max_tokens, "Most tokens to generate")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    tinfer::examples::add_sampling_options(app, options.sampling);
    app.add_option("--threads", options.threads, "CPU threads per rank (default: cores / ranks)");
    app.add_option("--prefill-chunk", options.prefill_chunk, "Most prompt tokens per forward call")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    CLI11_PARSE(app, argc, argv);

    try {
        tinfer::distributed::MpiCommunicator comm;
        if (comm.size() != ranks_needed) {
            throw tinfer::Error("started on " + std::to_string(comm.size()) +
                                " rank(s); run it as mpirun -n 2 (rank 0 prefills, rank 1 "
                                "decodes)");
        }
        if (options.prompt.empty()) throw tinfer::RequestError("the prompt is empty");
        auto const file = tinfer::gguf::File::open(options.model);
        // SmolLM2 only: distributed::KvBlockLayout ships blocks of one layer group, and Gemma 3's
        // hybrid cache has six (a sliding-window shape does not compile here).
        return tinfer::with_preset<tinfer::presets::smollm2_135m>(
            file, [&]<tinfer::ModelConfig Cfg>() { return run<Cfg>(file, options, comm); });
    } catch (std::exception const& e) {
        std::cerr << "disaggregated: " << e.what() << "\n";
        // The other rank may be blocked waiting for this one.
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
}
