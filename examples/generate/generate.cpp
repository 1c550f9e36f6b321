// generate: streams SmolLM2's (or any compiled-in shape's) answer to a prompt, computed by
// tinfer's own kernels on the CPU, then reports the timings on stderr.
//
// --tp N (a build with MPI, TINFER_WITH_MPI): tensor parallelism over the N ranks of
//   mpirun --oversubscribe --allow-run-as-root -n N generate --tp N --prompt ...
// Every rank computes its share of every layer; rank 0 samples and prints.
// --pp N: pipeline parallelism over N ranks, each a contiguous stage of the layers holding only
//   their KV; a prefill chunk runs as --micro-batches pieces so the stages overlap:
//   mpirun --oversubscribe --allow-run-as-root -n N generate --pp N --prompt ...
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "../common/cli_options.hpp"

#include <tinfer/config/presets.hpp>
#include <tinfer/engine/output_stream.hpp>
#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/format/tokenizer_gguf.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/model/shipped_presets.hpp>

#ifdef TINFER_WITH_MPI
#include <mpi.h>

#include <tinfer/distributed/mpi_communicator.hpp>
#endif

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
    int tensor_parallel = 1;
    int pipeline_parallel = 1;
    int micro_batches = 2;
    std::string precision = "int8";
    std::string grammar_file;  // --grammar: GBNF-like grammar text
    std::string
        json_schema_file;  // --json-schema: a JSON Schema (grammar/json_schema.hpp's subset)
};

std::string read_file(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw tinfer::RequestError("cannot read '" + path + "'");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// How the ranks of a tensor-parallel run agree: rank 0's sampled token goes to every rank
// (their logits are the same, but a rank must never act on a token rank 0 did not print).
struct Ranks {
    bool prints = true;
    void (*share_token)(std::int32_t&) = [](std::int32_t&) {};
};

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

template <tinfer::ModelConfig Cfg, class Model>
int run(tinfer::gguf::File const& file, Options const& options, Model const& model,
        Ranks const& ranks = {}) {
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
    std::vector<std::int32_t> const prompt = tokenizer.encode_prompt(text);
    if (prompt.empty()) throw RequestError("the prompt encodes to no tokens");
    int const context = Cfg.max_context;
    if (static_cast<int>(prompt.size()) >= context)
        throw RequestError("the prompt has " + std::to_string(prompt.size()) +
                           " tokens; the model's context holds " + std::to_string(context));
    int const max_new = std::min(options.max_tokens, context - static_cast<int>(prompt.size()));

    int const threads = options.threads > 0 ? options.threads : omp_get_num_procs();
    typename Model::Workspace workspace(options.prefill_chunk, threads);
    kv::ContiguousKvCache<Model::local_config> cache(1, static_cast<int>(prompt.size()) + max_new);
    kernels::SamplingWorkspace sampling_workspace(Cfg.vocab);
    std::vector<float> logits(Cfg.vocab);
    OutputStream output(
        tokenizer, {.max_new_tokens = max_new, .stop_token_ids = {}, .stop_strings = options.stop});
    // Structured output: tokens that cannot continue the grammar are masked before sampling.
    std::optional<grammar::Matcher> matcher;
    if (!options.grammar_file.empty() || !options.json_schema_file.empty()) {
        grammar::Grammar g = options.grammar_file.empty()
                                 ? grammar::json_schema_to_grammar(
                                       std::string_view(read_file(options.json_schema_file)))
                                 : grammar::Grammar::parse(read_file(options.grammar_file));
        matcher.emplace(
            grammar::constrain(std::move(g), grammar::Vocabulary::of(tokenizer, Cfg.vocab)));
    }

    // Activations quantized to int8 for the integer kernels (as llama.cpp does), or float32.
    auto const forward = [&](SequenceChunk const& chunk) {
        if (options.precision == "int8") {
            model.template forward<precision::Int8Activations>(std::span(&chunk, 1), cache,
                                                               workspace, logits);
        } else {
            model.forward(std::span(&chunk, 1), cache, workspace, logits);
        }
    };
    auto const start = Clock::now();
    // Prefill in chunks of at most the workspace's size; logits of the last chunk only.
    for (std::size_t first = 0; first < prompt.size(); first += options.prefill_chunk) {
        std::size_t const count =
            std::min<std::size_t>(options.prefill_chunk, prompt.size() - first);
        SequenceChunk const chunk{.slot = 0,
                                  .first_position = static_cast<int>(first),
                                  .tokens = std::span(prompt).subspan(first, count)};
        forward(chunk);
    }
    Clock::time_point first_token_time{};
    int position = static_cast<int>(prompt.size());
    for (std::uint32_t step = 0;; ++step) {
        kernels::TokenHistory const history{prompt, output.tokens()};
        if (matcher && matcher->mask_logits(logits) == 0)
            throw RequestError("grammar: no token of the vocabulary continues the output");
        std::int32_t token = kernels::sample_token(logits, options.sampling, history,
                                                   /*request_id=*/0, step, sampling_workspace)
                                 .token;
        ranks.share_token(token);
        if (matcher) matcher->accept_token(token);
        auto const emitted = output.accept(token);
        if (step == 0) first_token_time = Clock::now();
        if (ranks.prints) std::cout << emitted.text << std::flush;
        if (emitted.finish || interrupted) break;
        SequenceChunk const chunk{
            .slot = 0, .first_position = position, .tokens = std::span(&token, 1)};
        forward(chunk);
        ++position;
    }
    auto const end = Clock::now();
    if (!ranks.prints) return 0;
    std::cout << std::endl;

    auto const generated = static_cast<int>(output.tokens().size());
    double const ttft = seconds_between(start, first_token_time);
    double const decode_seconds = seconds_between(first_token_time, end);
    double const tpot = generated > 1 ? decode_seconds / (generated - 1) : 0.0;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    using Parallel = typename Model::ParallelPolicy;
    std::string const split =
        std::string(model::is_pipeline_parallel<Parallel> ? "pipeline" : "tensor") + " parallel " +
        std::to_string(Parallel::degree);
    std::fprintf(
        stderr,
        "\n[tinfer] prompt tokens %zu, generated tokens %d (%s), threads %d, %s, "
        "%s activations\n"
        "[tinfer] TTFT %.1f ms, TPOT %.1f ms\n"
        "[tinfer] prefill %.1f tokens/s, decode %.1f tokens/s, peak RSS %.1f MiB\n",
        prompt.size(), generated,
        interrupted ? "interrupted" : std::string(name_of(output.finish_reason().value())).c_str(),
        threads, split.c_str(), options.precision.c_str(), ttft * 1e3, tpot * 1e3,
        prompt.size() / ttft, generated > 1 ? (generated - 1) / decode_seconds : 0.0,
        usage.ru_maxrss / 1024.0);
    return interrupted ? 130 : 0;
}

#ifdef TINFER_WITH_MPI
// Tensor-parallel degrees this program is compiled for; a shape gets those it divides evenly.
template <tinfer::ModelConfig Cfg, int... Degrees>
int run_tensor_parallel(tinfer::gguf::File const& file, Options const& options,
                        tinfer::distributed::MpiCommunicator& comm) {
    using namespace tinfer;
    if (comm.size() != options.tensor_parallel) {
        throw Error("--tp " + std::to_string(options.tensor_parallel) +
                    " needs as many MPI ranks; "
                    "this run has " +
                    std::to_string(comm.size()) + " (mpirun -n N ... --tp N)");
    }
    Ranks ranks{.prints = comm.rank() == 0, .share_token = [](std::int32_t& token) {
                    MPI_Bcast(&token, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
                }};
    std::optional<int> result;
    std::string fitting;
    auto const try_degree = [&]<int Tp>() {
        if constexpr (model::tensor_parallel_fits<Cfg, Tp>()) {
            fitting += (fitting.empty() ? "" : ", ") + std::to_string(Tp);
            if (options.tensor_parallel == Tp) {
                using Parallel = model::TensorParallel<Tp, distributed::MpiCommunicator>;
                result = run<Cfg>(file, options, Llama<Cfg, Parallel>::bind(file, Parallel(comm)),
                                  ranks);
            }
        }
    };
    (try_degree.template operator()<Degrees>(), ...);
    if (!result) {
        throw RequestError("--tp " + std::to_string(options.tensor_parallel) +
                           ": this model's heads, KV heads and FFN split evenly over " +
                           (fitting.empty() ? std::string("no compiled-in degree") : fitting));
    }
    return *result;
}

// Pipeline stage counts this program is compiled for; a shape gets those that split its layers
// into equal stages (model/pipeline_parallel.hpp).
template <tinfer::ModelConfig Cfg, int... Stages>
int run_pipeline_parallel(tinfer::gguf::File const& file, Options const& options,
                          tinfer::distributed::MpiCommunicator& comm) {
    using namespace tinfer;
    if (comm.size() != options.pipeline_parallel) {
        throw Error("--pp " + std::to_string(options.pipeline_parallel) +
                    " needs as many MPI ranks; this run has " + std::to_string(comm.size()) +
                    " (mpirun -n N ... --pp N)");
    }
    Ranks ranks{.prints = comm.rank() == 0, .share_token = [](std::int32_t& token) {
                    MPI_Bcast(&token, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
                }};
    std::optional<int> result;
    std::string fitting;
    auto const try_stages = [&]<int S>() {
        if constexpr (model::pipeline_fits<Cfg, S>()) {
            fitting += (fitting.empty() ? "" : ", ") + std::to_string(S);
            if (options.pipeline_parallel == S) {
                using Parallel = model::PipelineParallel<S, distributed::MpiCommunicator>;
                result = run<Cfg>(
                    file, options,
                    Llama<Cfg, Parallel>::bind(file, Parallel(comm, options.micro_batches)), ranks);
            }
        }
    };
    (try_stages.template operator()<Stages>(), ...);
    if (!result) {
        throw RequestError("--pp " + std::to_string(options.pipeline_parallel) +
                           ": this model's layers split into equal stages of one layer pattern "
                           "over " +
                           (fitting.empty() ? std::string("no compiled-in stage count") : fitting));
    }
    return *result;
}
#endif

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Generate text with a GGUF model on tinfer's CPU kernels"};
    app.add_option("--model", options.model, "GGUF file")->capture_default_str();
    app.add_option("--prompt", options.prompt, "Prompt text (a user message with --chat)")
        ->required();
    app.add_flag("--chat", options.chat, "Wrap the prompt in the model's chat template");
    app.add_option("--system", options.system, "System message for --chat");
    app.add_option("--max-tokens", options.max_tokens, "Most tokens to generate")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    tinfer::examples::add_sampling_options(app, options.sampling);
    app.add_option("--threads", options.threads, "CPU threads (default: all)");
    app.add_option("--precision", options.precision,
                   "Activations of the matrix products: int8 (quantized per block of 32, as "
                   "llama.cpp; faster) or f32 (exact)")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    app.add_option("--stop", options.stop, "Stop string (repeatable); never printed");
    auto* grammar_option = app.add_option("--grammar", options.grammar_file,
                                          "Constrain the output to a GBNF-like grammar (file)");
    app.add_option("--json-schema", options.json_schema_file,
                   "Constrain the output to JSON following a JSON Schema (file)")
        ->excludes(grammar_option);
    app.add_option("--tp", options.tensor_parallel,
                   "Tensor-parallel degree: run under mpirun with as many ranks; rank 0 prints")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    auto* pp_option =
        app.add_option("--pp", options.pipeline_parallel,
                       "Pipeline stages: run under mpirun with as many ranks; rank 0 prints")
            ->capture_default_str()
            ->check(CLI::PositiveNumber);
    app.add_option("--micro-batches", options.micro_batches,
                   "Pieces a step's rows are cut into under --pp, so the stages overlap")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->needs(pp_option);
    CLI11_PARSE(app, argc, argv);

    std::signal(SIGINT, [](int) { interrupted = true; });
    try {
        if (options.prompt.empty()) throw tinfer::RequestError("the prompt is empty");
        auto const file = tinfer::gguf::File::open(options.model);
        if (options.tensor_parallel > 1 && options.pipeline_parallel > 1)
            throw tinfer::RequestError("--tp and --pp together are not supported");
        if (options.pipeline_parallel > 1) {
#ifdef TINFER_WITH_MPI
            tinfer::distributed::MpiEnvironment mpi(&argc, &argv);
            tinfer::distributed::MpiCommunicator comm;
            return tinfer::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
                return run_pipeline_parallel<Cfg, 2>(file, options, comm);
            });
#else
            throw tinfer::RequestError("--pp needs a build with MPI (TINFER_WITH_MPI)");
#endif
        }
        if (options.tensor_parallel > 1) {
#ifdef TINFER_WITH_MPI
            tinfer::distributed::MpiEnvironment mpi(&argc, &argv);
            tinfer::distributed::MpiCommunicator comm;
            return tinfer::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
                return run_tensor_parallel<Cfg, 2, 3, 4, 8>(file, options, comm);
            });
#else
            throw tinfer::RequestError("--tp needs a build with MPI (TINFER_WITH_MPI)");
#endif
        }
        return tinfer::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            return run<Cfg>(file, options, tinfer::Llama<Cfg>::bind(file));
        });
    } catch (std::exception const& e) {
        std::cerr << "generate: " << e.what() << "\n";
        return 1;
    }
}
