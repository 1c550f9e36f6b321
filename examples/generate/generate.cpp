// generate: streams SmolLM2's (or any compiled-in shape's) answer to a prompt, computed by
// tinfer's own kernels on the CPU, then reports the timings on stderr. It is a client of
// tinfer::Engine, the library's one serving loop: each prompt (each turn of --interactive) is one
// GenerationRequest, its tokens streamed through the engine's callback, its timings the engine's
// metrics (TTFT, TPOT, prompt tokens served by the prefix cache).
//
// --interactive: a multi-turn chat. Each line of stdin is a user turn; the conversation so far
//   is rendered with the chat template and submitted whole: the engine's prefix cache holds the
//   earlier turns' KV (whole blocks of 16 positions), so only what it lacks is prefilled. The
//   reply is printed on its own line. Ends at EOF.
//
// --tp N / --pp N (a build with MPI, TINFER_WITH_MPI): tensor parallelism, or N pipeline stages
// each holding a contiguous share of the layers and their KV, over the N ranks of
//   mpirun --oversubscribe --allow-run-as-root -n N generate --tp N --prompt ...
//   mpirun --oversubscribe --allow-run-as-root -n N generate --pp N --micro-batches 4 --prompt ...
// Every rank runs its own engine over its part of the model, in lockstep with rank 0's
// (examples/common/parallel_engines.hpp, as serve --tp / --pp); rank 0 submits and prints.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../common/cli_options.hpp"
#include "../common/device_option.hpp"
#include "../common/parallel_engines.hpp"
#include "../common/serving_engines.hpp"

#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/codec_pairs.hpp>
#include <tinfer/model/shipped_presets.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

namespace {

std::atomic<bool> interrupted{false};

// Past a few draft tokens prompt lookup rarely lands another (serve's cap, the same reason).
constexpr int max_speculative_tokens = 64;

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
    bool verbose = false;  // say which kernels run (kernels/isa.hpp)
    std::vector<std::string> stop;
    tinfer::kernels::SamplingParams sampling;
    tinfer::examples::ParallelSplit split;  // --tp, --pp, --micro-batches
    std::string precision = "int8";         // f32 where --device cuda (its only one) and not given
    std::string device = "cpu";             // --device: cpu or cuda
    std::string kv_cache_dtype = "fp32";    // the KV codecs, serve's names (kv/codec_pairs.hpp)
    int speculative_tokens = 0;             // γ of speculation (prompt lookup or --draft-model)
    std::string draft_model;                // a GGUF of the model's shape that drafts
    std::string grammar_file;               // --grammar: GBNF-like grammar text
    std::string
        json_schema_file;  // --json-schema: a JSON Schema (grammar/json_schema.hpp's subset)
};

// The engine's scheduler is serve's (common/serving_engines.hpp), so one reply's prefill runs
// in chunks of 256 rows, and the engines are the ones serve runs, compiled once for both.
using tinfer::examples::Serving;
// The rows of one forward call (EngineOptions::max_step_tokens): Serving's prefill chunk.
constexpr int prefill_chunk = 256;
// One process: the engine of a shape and a KV codec pair (--kv-cache-dtype). Under --tp / --pp
// the KV is float32 (examples/common/parallel_engines.hpp), as serve's.
template <tinfer::ModelConfig Cfg, class Codecs>
using EngineFor = tinfer::examples::ServingEngineFor<Cfg, Codecs>;

// Interactive chats without -c get this many positions (or the model's context if smaller):
// enough for a conversation, without sizing a float32 cache for a 32K-context model.
constexpr int default_interactive_context = 4096;

std::string read_file(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw tinfer::RequestError("cannot read '" + path + "'");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One generated reply, as the engine streamed and measured it.
struct Reply {
    std::vector<std::int32_t> tokens;
    std::string text;  // as printed: a stop string and what follows it are not in it
    std::string finish;
    std::string error;  // why the engine ended it without a reply, if it did
    tinfer::spec::SpeculationStats speculation;
    tinfer::sched::RequestMetrics metrics;
};

template <class ServingEngine>
int run(tinfer::gguf::File file, Options const& options,
        tinfer::examples::LockstepRanks* ranks = nullptr) {
    using namespace tinfer;
    constexpr ModelConfig Cfg = ServingEngine::config;
    using Parallel = typename ServingEngine::Parallel;
    bool const chat_mode = options.chat || options.interactive;
    // --chat-template replaces the file's template before that is parsed, so a file whose
    // template the interpreter refuses is still usable with one; without a chat, the file's
    // template is never read (the prompt is plain text).
    std::optional<tok::ChatTemplate> chat_template =
        chat_mode ? examples::chat_template_option(options.chat_template, file)
                  : tok::ChatTemplate::builtin("chatml");
    if (!chat_template) chat_template = tok::chat_template_from_gguf(file);
    kernels::validate(options.sampling, Cfg.vocab);
    std::string const first_prompt =
        options.prompt_file.empty() ? options.prompt : read_file(options.prompt_file);
    std::vector<tok::ChatMessage> messages;
    if (chat_mode && !options.system.empty()) messages.push_back({"system", options.system});
    auto const encode = [](tok::Tokenizer const& tokenizer, std::string const& text) {
        std::vector<std::int32_t> tokens = tokenizer.encode_prompt(text);
        if (tokens.empty()) throw RequestError("the prompt encodes to no tokens");
        return tokens;
    };

    // The KV cache's positions: -c, else what one prompt and its reply need (a chat grows up
    // to 4096). Every rank sizes its cache alike (the ranks' schedulers must see the same
    // capacity), so every rank encodes the prompt; only rank 0 submits it.
    std::vector<std::int32_t> prompt;
    if (!options.interactive) {
        std::string text = first_prompt;
        if (chat_mode) {
            messages.push_back({"user", first_prompt});
            text = chat_template->render(messages, /*add_generation_prompt=*/true);
        }
        prompt = encode(tok::tokenizer_from_gguf(file), text);
    }
    int const context =
        options.context_size > 0 ? std::min(options.context_size, Cfg.max_context)
        : options.interactive
            ? std::min(default_interactive_context, Cfg.max_context)
            : std::min<int>(Cfg.max_context, static_cast<int>(prompt.size()) + options.max_tokens);
    if (options.context_size > Cfg.max_context && (!ranks || ranks->rank() == 0))
        std::fprintf(stderr, "[tinfer] --ctx-size %d is past the model's context; using %d\n",
                     options.context_size, context);
    int const threads = options.threads > 0 ? options.threads : omp_get_num_procs();
    using Cache = typename ServingEngine::Cache;
    // Room for the context's blocks, a speculative round's drafts past it, and a block the
    // prefix cache may still pin while a new turn starts.
    std::size_t const kv_bytes =
        static_cast<std::size_t>(Cache::blocks_for(context + options.speculative_tokens) + 2) *
        Cache::bytes_per_block;
    ServingEngine engine =
        examples::make_engine<ServingEngine>(std::move(file),
                                             {.kv_budget_bytes = kv_bytes,
                                              .threads = threads,
                                              // a prefill chunk's rows: the workspace (and its
                                              // logits rows) need no more
                                              .max_step_tokens = prefill_chunk,
                                              .prefix_caching = true,
                                              .int8_activations = options.precision == "int8",
                                              .chat_template = std::move(chat_template)},
                                             ranks, options.draft_model);
    if (std::optional<int> const follower_exit = examples::join_lockstep(engine, ranks, "generate"))
        return *follower_exit;

    // Structured output: tokens that cannot continue the grammar are masked before sampling;
    // the grammar is compiled once, each reply's request starts a matcher of its own.
    std::shared_ptr<grammar::Constraint const> constraint;
    if (!options.grammar_file.empty() || !options.json_schema_file.empty()) {
        grammar::Grammar g = options.grammar_file.empty()
                                 ? grammar::json_schema_to_grammar(
                                       std::string_view(read_file(options.json_schema_file)))
                                 : grammar::Grammar::parse(read_file(options.grammar_file));
        constraint = grammar::constrain(std::move(g),
                                        grammar::Vocabulary::of(engine.tokenizer(), Cfg.vocab));
    }

    // Submits `prompt` as one request and steps the engine until it ends; prints as it goes.
    auto const reply_to = [&](std::vector<std::int32_t> const& prompt) {
        if (static_cast<int>(prompt.size()) >= context)
            throw RequestError("the prompt has " + std::to_string(prompt.size()) +
                               " tokens; the context holds " + std::to_string(context) +
                               (options.context_size > 0 ? "" : " (raise it with -c)"));
        GenerationRequest request{
            .prompt_tokens = prompt,
            .max_tokens = std::min(options.max_tokens, context - static_cast<int>(prompt.size())),
            .stop = options.stop,
            .sampling = options.sampling,
            // Seeded by --seed always: the same flags give the same text.
            .seed = options.sampling.seed,
            .draft_tokens = options.speculative_tokens,
            .grammar = constraint};
        Reply reply;
        bool done = false;
        auto const id = engine.submit(std::move(request), [&](TokenEvent const& e) {
            if (e.token >= 0) reply.tokens.push_back(e.token);
            std::cout << e.text << std::flush;
            reply.text += e.text;
            if (!e.error.empty()) reply.error = e.error;
            if (e.finish) {
                reply.finish = std::string(name_of(*e.finish));
                reply.speculation = e.speculation;
                done = true;
            }
        });
        // Bounded: the request ends by max_tokens at the latest; SIGINT aborts it.
        for (bool aborted = false; !done;) {
            if (interrupted && !aborted) {
                engine.abort(id);
                aborted = true;
            }
            engine.step();
        }
        std::cout << std::endl;
        // Refused after it was queued (it cannot fit the KV cache, a grammar dead end).
        if (!reply.error.empty()) throw RequestError(reply.error);
        if (interrupted) reply.finish = "interrupted";
        for (sched::RequestMetrics& m : engine.take_finished_metrics())
            if (m.id == id) reply.metrics = std::move(m);
        return reply;
    };

    auto const report = [&](Reply const& reply) {
        sched::RequestMetrics const& m = reply.metrics;
        int const prefilled = m.prompt_tokens - m.cached_prompt_tokens;
        int const generated = m.generated_tokens;
        double const ttft = m.ttft().value_or(0.0);
        double const tpot = m.tpot().value_or(0.0);
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        std::string const split =
            std::string(model::is_pipeline_parallel<Parallel> ? "pipeline" : "tensor") +
            " parallel " + std::to_string(Parallel::degree);
        std::fprintf(stderr,
                     "\n[tinfer] prompt tokens %d (%d reused from the KV cache), generated "
                     "tokens %d (%s), threads %d, %s, %s activations, KV %s\n"
                     "[tinfer] TTFT %.1f ms, TPOT %.1f ms\n"
                     "[tinfer] prefill %.1f tokens/s, decode %.1f tokens/s, peak RSS %.1f MiB\n",
                     m.prompt_tokens, m.cached_prompt_tokens, generated, reply.finish.c_str(),
                     threads, split.c_str(), options.precision.c_str(),
                     options.kv_cache_dtype.c_str(), ttft * 1e3, tpot * 1e3,
                     ttft > 0 ? prefilled / ttft : 0.0, tpot > 0 ? 1.0 / tpot : 0.0,
                     usage.ru_maxrss / 1024.0);
        if (options.speculative_tokens > 0)
            std::fprintf(stderr,
                         "[tinfer] speculative decoding: %ld of %ld draft tokens accepted in "
                         "%ld rounds\n",
                         reply.speculation.accepted, reply.speculation.drafted,
                         reply.speculation.rounds);
    };

    if (!options.interactive) {
        report(reply_to(prompt));
        examples::finish_lockstep(ranks);
        return interrupted ? 130 : 0;
    }

    // Interactive: the prompt (if any) is the first user turn, then each non-empty stdin line.
    bool const terminal = isatty(STDIN_FILENO) != 0;
    std::string line = first_prompt;
    for (bool from_options = !line.empty(); !interrupted; from_options = false) {
        if (!from_options) {
            if (terminal) std::cerr << "> " << std::flush;
            if (!std::getline(std::cin, line)) break;  // EOF ends the chat
            if (line.empty()) continue;
        }
        messages.push_back({"user", line});
        Reply const reply =
            reply_to(encode(engine.tokenizer(), engine.chat_template().render(
                                                    messages, /*add_generation_prompt=*/true)));
        messages.push_back({"assistant", reply.text});
        report(reply);
    }
    examples::finish_lockstep(ranks);
    return interrupted ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options options;
    options.model = tinfer::examples::default_model_path().string();
    CLI::App app{"Generate text with a GGUF model on tinfer's CPU (or CUDA) kernels"};
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
        ->check(tinfer::examples::at_least(1));
    app.add_option("-c,--ctx-size", options.context_size,
                   "KV cache positions, prompt and reply together (0: prompt + max tokens; "
                   "interactive: up to 4096)")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(0));
    tinfer::examples::add_sampling_options(app, options.sampling);
    app.add_option("--threads", options.threads, "CPU threads (0: all)")
        ->check(tinfer::examples::at_least(0));
    app.add_flag("-v,--verbose", options.verbose,
                 "Say which CPU kernels run (AVX-512, AVX2 or portable; TINFER_ISA caps it)");
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
    app.add_option("--kv-cache-dtype", options.kv_cache_dtype,
                   "Codecs of the KV cache, 'K' for both or 'K,V' (the compiled-in pairs; "
                   "fp32 only under --tp / --pp)")
        ->capture_default_str()
        ->check(tinfer::examples::one_of(tinfer::kv::kv_codec_pair_names()));
    app.add_option("--speculative-tokens", options.speculative_tokens,
                   "Speculative decoding, by prompt lookup (n-grams of 3 down to 1 tokens) or "
                   "--draft-model: "
                   "draft tokens verified per decode step (0: off); greedy output is unchanged")
        ->capture_default_str()
        ->check(CLI::Range(0, max_speculative_tokens));
    app.add_option("--draft-model", options.draft_model,
                   "A draft model for --speculative-tokens instead of prompt lookup: a GGUF of "
                   "the model's shape and vocabulary (e.g. another quantization of it); float32 "
                   "KV cache, one process")
        ->check(CLI::ExistingFile);
    tinfer::examples::add_split_options(app, options.split, "generate", "prints");
    tinfer::examples::add_device_option(app, options.device);
    CLI11_PARSE(app, argc, argv);
    // The CUDA backend multiplies float32 activations only: its default precision.
    if (options.device == "cuda" && app.count("--precision") == 0) options.precision = "f32";

    std::signal(SIGINT, [](int) { interrupted = true; });
    try {
        if (options.prompt.empty() && options.prompt_file.empty() && !options.interactive)
            throw tinfer::RequestError("give a prompt: --prompt TEXT, -f FILE or --interactive");
        // Without a chat these would be dropped in silence, and the user left wondering.
        if (!options.chat && !options.interactive)
            for (char const* const flag : {"--system", "--chat-template"})
                if (app.count(flag) > 0)
                    throw tinfer::RequestError(std::string(flag) +
                                               " applies to a chat: add --chat or --interactive");
        if (options.split.split()) {
            char const* const flag = options.split.pipeline > 1 ? "--pp" : "--tp";
            if (options.interactive)
                throw tinfer::RequestError(std::string("--interactive runs on one rank; drop ") +
                                           flag);
            if (options.kv_cache_dtype != "fp32")
                throw tinfer::RequestError("--kv-cache-dtype " + options.kv_cache_dtype +
                                           " is not supported under " + flag + ": fp32 only");
            if (!options.grammar_file.empty() || !options.json_schema_file.empty())
                throw tinfer::RequestError(
                    std::string("--grammar / --json-schema cannot be combined with ") + flag +
                    ": the ranks' lockstep carries a request's tokens and settings, not its "
                    "grammar");
        }
        tinfer::examples::check_draft_model_options(options.draft_model, options.speculative_tokens,
                                                    options.kv_cache_dtype, options.split);
        tinfer::examples::check_device_options(options.device,
                                               {.kv_cache_dtype = options.kv_cache_dtype,
                                                .precision = options.precision,
                                                .draft_model = !options.draft_model.empty(),
                                                .split = options.split.split()});
        if (options.verbose)
            std::fprintf(stderr, "[tinfer] CPU kernels: %s\n",
                         tinfer::kernels::describe_isa().c_str());
        auto file = tinfer::gguf::File::open(options.model);
        if (options.device == "cuda") {
            return tinfer::examples::with_cuda_engine(
                file, [&]<class Engine>() { return run<Engine>(std::move(file), options); });
        }
        if (options.split.split()) {
            return tinfer::examples::with_parallel_engine<Serving>(
                file, options.split, "generate",
                [&]<class Engine>(tinfer::examples::LockstepRanks& ranks) {
                    return run<Engine>(std::move(file), options, &ranks);
                });
        }
        return tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            if (!options.draft_model.empty())
                return run<tinfer::examples::DraftedServingEngineFor<Cfg>>(std::move(file),
                                                                           options);
            return tinfer::kv::with_kv_codecs(options.kv_cache_dtype, [&]<class Codecs>() {
                return run<EngineFor<Cfg, Codecs>>(std::move(file), options);
            });
        });
    } catch (std::exception const& e) {
        std::cerr << "generate: " << e.what() << "\n";
        return 1;
    }
}
