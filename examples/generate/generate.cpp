// generate: streams SmolLM2's (or any compiled-in shape's) answer to a prompt, computed by
// tinfer's own kernels on the CPU, then reports the timings on stderr.
//
// --interactive: a multi-turn chat. Each line of stdin is a user turn; the conversation so far
//   is rendered with the chat template, only the tokens that differ from what the KV cache
//   already holds are prefilled, and the reply is printed on its own line. Ends at EOF.
//
// --tp N (a build with MPI, TINFER_WITH_MPI): tensor parallelism over the N ranks of
//   mpirun --oversubscribe --allow-run-as-root -n N generate --tp N --prompt ...
// Every rank computes its share of every layer; rank 0 samples and prints.
// --pp N: pipeline parallelism over N ranks, each a contiguous stage of the layers holding only
//   their KV; a prefill chunk runs as --micro-batches pieces so the stages overlap:
//   mpirun --oversubscribe --allow-run-as-root -n N generate --pp N --prompt ...
#include <sys/resource.h>
#include <unistd.h>

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

#include <tinfer/engine/output_stream.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/model/shipped_presets.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#ifdef TINFER_WITH_MPI
#include <mpi.h>

#include <tinfer/distributed/mpi_communicator.hpp>
#endif

namespace {

std::atomic<bool> interrupted{false};

struct Options {
    std::string model;
    std::string prompt;
    std::string prompt_file;  // -f: the prompt read from a file
    std::string system;
    bool chat = false;
    bool interactive = false;   // -i: multi-turn chat over stdin (implies --chat)
    std::string chat_template;  // a Jinja file or a built-in's name; empty: the file's own
    int max_tokens = 256;
    int context_size = 0;  // -c: KV positions; 0: prompt + max_tokens (interactive: up to 4096)
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

// Interactive chats without -c get this many positions (or the model's context if smaller):
// enough for a conversation, without sizing a float32 cache for a 32K-context model.
constexpr int default_interactive_context = 4096;

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

// One generated reply: its tokens, why it ended, and its timings.
struct Reply {
    std::vector<std::int32_t> tokens;
    std::string text;  // as printed: a stop string and what follows it are not in it
    std::string finish;
    std::size_t reused = 0;  // prompt tokens whose KV the cache already held
    Clock::time_point start, first_token, end;
};

template <tinfer::ModelConfig Cfg, class Model>
int run(tinfer::gguf::File const& file, Options const& options, Model const& model,
        Ranks const& ranks = {}) {
    using namespace tinfer;
    tok::Tokenizer const tokenizer = tok::tokenizer_from_gguf(file);
    kernels::validate(options.sampling, Cfg.vocab);
    bool const chat_mode = options.chat || options.interactive;
    std::optional<tok::ChatTemplate> chat;
    if (chat_mode) {
        // --chat-template replaces the file's template before that is parsed, so a file whose
        // template the interpreter refuses is still usable with one.
        auto chosen = examples::chat_template_option(options.chat_template, file);
        chat = chosen ? std::move(*chosen) : tok::chat_template_from_gguf(file);
    }
    std::string const first_prompt =
        options.prompt_file.empty() ? options.prompt : read_file(options.prompt_file);
    std::vector<tok::ChatMessage> messages;
    if (chat_mode && !options.system.empty()) messages.push_back({"system", options.system});

    // The KV cache's positions: -c, else what one prompt and its reply need (a chat grows).
    std::vector<std::int32_t> prompt;
    if (!options.interactive) {
        std::string text = first_prompt;
        if (chat_mode) {
            messages.push_back({"user", first_prompt});
            text = chat->render(messages, /*add_generation_prompt=*/true);
        }
        prompt = tokenizer.encode_prompt(text);
        if (prompt.empty()) throw RequestError("the prompt encodes to no tokens");
    }
    int const context =
        options.context_size > 0 ? std::min(options.context_size, Cfg.max_context)
        : options.interactive
            ? std::min(default_interactive_context, Cfg.max_context)
            : std::min<int>(Cfg.max_context, static_cast<int>(prompt.size()) + options.max_tokens);
    if (options.context_size > Cfg.max_context)
        std::fprintf(stderr, "[tinfer] --ctx-size %d is past the model's context; using %d\n",
                     options.context_size, context);

    int const threads = options.threads > 0 ? options.threads : omp_get_num_procs();
    typename Model::Workspace workspace(options.prefill_chunk, threads);
    kv::ContiguousKvCache<Model::local_config> cache(1, context);
    std::vector<std::int32_t> cached;  // the tokens whose keys and values the cache holds
    kernels::SamplingWorkspace sampling_workspace(Cfg.vocab);
    std::vector<float> logits(Cfg.vocab);
    // Structured output: tokens that cannot continue the grammar are masked before sampling;
    // the grammar is compiled once, each reply starts a matcher of its own.
    decltype(grammar::constrain(std::declval<grammar::Grammar>(),
                                grammar::Vocabulary::of(tokenizer, Cfg.vocab))) constraint;
    if (!options.grammar_file.empty() || !options.json_schema_file.empty()) {
        grammar::Grammar g = options.grammar_file.empty()
                                 ? grammar::json_schema_to_grammar(
                                       std::string_view(read_file(options.json_schema_file)))
                                 : grammar::Grammar::parse(read_file(options.grammar_file));
        constraint =
            grammar::constrain(std::move(g), grammar::Vocabulary::of(tokenizer, Cfg.vocab));
    }

    // Activations quantized to int8 for the integer kernels (as llama.cpp does), or float32.
    auto const forward = [&](SequenceChunk const& chunk) {
        if (options.precision == "int8") {
            model.template forward<kernels::Int8Activations>(std::span(&chunk, 1), cache, workspace,
                                                             logits);
        } else {
            model.forward(std::span(&chunk, 1), cache, workspace, logits);
        }
    };

    // Prefills what of `prompt` the cache lacks, then samples until a stop; prints as it goes.
    std::uint64_t request = 0;
    auto const reply_to = [&](std::vector<std::int32_t> const& prompt) {
        if (static_cast<int>(prompt.size()) >= context)
            throw RequestError("the prompt has " + std::to_string(prompt.size()) +
                               " tokens; the context holds " + std::to_string(context) +
                               (options.context_size > 0 ? "" : " (raise it with -c)"));
        int const max_new = std::min(options.max_tokens, context - static_cast<int>(prompt.size()));
        OutputStream output(
            tokenizer,
            {.max_new_tokens = max_new, .stop_token_ids = {}, .stop_strings = options.stop});
        std::optional<grammar::Matcher> matcher;
        if (constraint) matcher.emplace(constraint);
        // The cache keeps the longest prefix it shares with this prompt; one token at least is
        // computed again, for its logits.
        std::size_t reused = 0;
        while (reused < cached.size() && reused + 1 < prompt.size() &&
               cached[reused] == prompt[reused])
            ++reused;
        cache.truncate(0, static_cast<int>(reused));
        cached.assign(prompt.begin(), prompt.end());
        Reply reply;
        reply.reused = reused;
        reply.start = Clock::now();
        for (std::size_t first = reused; first < prompt.size(); first += options.prefill_chunk) {
            std::size_t const count =
                std::min<std::size_t>(options.prefill_chunk, prompt.size() - first);
            forward({.slot = 0,
                     .first_position = static_cast<int>(first),
                     .tokens = std::span(prompt).subspan(first, count)});
        }
        for (std::uint32_t step = 0;; ++step) {
            kernels::TokenHistory const history{prompt, output.tokens()};
            if (matcher && matcher->mask_logits(logits) == 0)
                throw RequestError("grammar: no token of the vocabulary continues the output");
            std::int32_t token =
                kernels::sample_token(logits, options.sampling, history,
                                      /*request_id=*/request, step, sampling_workspace)
                    .token;
            ranks.share_token(token);
            if (matcher) matcher->accept_token(token);
            auto const emitted = output.accept(token);
            if (step == 0) reply.first_token = Clock::now();
            if (ranks.prints) std::cout << emitted.text << std::flush;
            reply.text += emitted.text;
            if (emitted.finish || interrupted) break;
            forward({.slot = 0,
                     .first_position = static_cast<int>(cached.size()),
                     .tokens = std::span(&token, 1)});
            cached.push_back(token);
        }
        ++request;
        reply.end = Clock::now();
        reply.tokens = output.tokens();
        reply.finish =
            interrupted ? "interrupted" : std::string(name_of(output.finish_reason().value()));
        if (ranks.prints) std::cout << std::endl;
        return reply;
    };

    auto const report = [&](std::size_t prompt_tokens, Reply const& reply) {
        std::size_t const prefilled = prompt_tokens - reply.reused;
        if (!ranks.prints) return;
        auto const generated = static_cast<int>(reply.tokens.size());
        double const ttft = seconds_between(reply.start, reply.first_token);
        double const decode_seconds = seconds_between(reply.first_token, reply.end);
        double const tpot = generated > 1 ? decode_seconds / (generated - 1) : 0.0;
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        using Parallel = typename Model::ParallelPolicy;
        std::string const split =
            std::string(model::is_pipeline_parallel<Parallel> ? "pipeline" : "tensor") +
            " parallel " + std::to_string(Parallel::degree);
        std::fprintf(stderr,
                     "\n[tinfer] prompt tokens %zu (%zu reused from the KV cache), generated "
                     "tokens %d (%s), threads %d, %s, %s activations\n"
                     "[tinfer] TTFT %.1f ms, TPOT %.1f ms\n"
                     "[tinfer] prefill %.1f tokens/s, decode %.1f tokens/s, peak RSS %.1f MiB\n",
                     prompt_tokens, reply.reused, generated, reply.finish.c_str(), threads,
                     split.c_str(), options.precision.c_str(), ttft * 1e3, tpot * 1e3,
                     prefilled / ttft, generated > 1 ? (generated - 1) / decode_seconds : 0.0,
                     usage.ru_maxrss / 1024.0);
    };

    if (!options.interactive) {
        Reply const reply = reply_to(prompt);
        report(prompt.size(), reply);
        return interrupted ? 130 : 0;
    }

    // Interactive: the prompt (if any) is the first user turn, then each non-empty stdin line.
    bool const terminal = isatty(STDIN_FILENO) != 0;
    std::string line = first_prompt;
    for (bool from_options = !line.empty(); !interrupted; from_options = false) {
        if (!from_options) {
            if (terminal && ranks.prints) std::cerr << "> " << std::flush;
            if (!std::getline(std::cin, line)) break;  // EOF ends the chat
            if (line.empty()) continue;
        }
        messages.push_back({"user", line});
        std::vector<std::int32_t> const turn =
            tokenizer.encode_prompt(chat->render(messages, /*add_generation_prompt=*/true));
        Reply const reply = reply_to(turn);
        messages.push_back({"assistant", reply.text});
        report(turn.size(), reply);
    }
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
                result = run<Cfg>(file, options,
                                  model::Llama<Cfg, Parallel>::bind(file, Parallel(comm)), ranks);
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
                    model::Llama<Cfg, Parallel>::bind(file, Parallel(comm, options.micro_batches)),
                    ranks);
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
    auto* prompt_option =
        app.add_option("-p,--prompt", options.prompt, "Prompt text (a user message with --chat)");
    app.add_option("-f,--file", options.prompt_file, "Read the prompt from a file")
        ->excludes(prompt_option)
        ->check(CLI::ExistingFile);
    app.add_flag("--chat", options.chat, "Wrap the prompt in the model's chat template");
    app.add_flag(
        "-i,--interactive", options.interactive,
        "Chat over stdin: each line is a user turn, the conversation is kept; ends at EOF");
    app.add_option("--system", options.system, "System message for --chat / --interactive");
    app.add_option("--chat-template", options.chat_template,
                   "Chat template: a Jinja file, or chatml / smollm2 / gemma (built in); "
                   "default: the file's own");
    app.add_option("--max-tokens,-n", options.max_tokens, "Most tokens to generate (per reply)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("-c,--ctx-size", options.context_size,
                   "KV cache positions, prompt and reply together (0: prompt + max tokens; "
                   "interactive: up to 4096)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
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
        if (options.prompt.empty() && options.prompt_file.empty() && !options.interactive)
            throw tinfer::RequestError("give a prompt: --prompt TEXT, -f FILE or --interactive");
        if (options.interactive && (options.tensor_parallel > 1 || options.pipeline_parallel > 1))
            throw tinfer::RequestError("--interactive runs on one rank; drop --tp / --pp");
        auto const file = tinfer::gguf::File::open(options.model);
        if (options.tensor_parallel > 1 && options.pipeline_parallel > 1)
            throw tinfer::RequestError("--tp and --pp together are not supported");
        if (options.pipeline_parallel > 1) {
#ifdef TINFER_WITH_MPI
            tinfer::distributed::MpiEnvironment mpi(&argc, &argv);
            tinfer::distributed::MpiCommunicator comm;
            return tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
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
            return tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
                return run_tensor_parallel<Cfg, 2, 3, 4, 8>(file, options, comm);
            });
#else
            throw tinfer::RequestError("--tp needs a build with MPI (TINFER_WITH_MPI)");
#endif
        }
        return tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            return run<Cfg>(file, options, tinfer::model::Llama<Cfg>::bind(file));
        });
    } catch (std::exception const& e) {
        std::cerr << "generate: " << e.what() << "\n";
        return 1;
    }
}
