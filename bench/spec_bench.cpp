// spec_bench: what speculative decoding buys on the real model, greedy, one request at a time.
//   lookup:  prompt lookup (the engine's default drafter) through the whole Engine, gamma swept,
//            on (a) repeating a given passage, where the output copies the prompt, and (b) free
//            chat, where it rarely does; against the same engine without drafts.
//   layers:  self-speculation by layer skipping: the first k of the target's layers, then its
//            final norm and LM head, draft gamma tokens; one full pass verifies them. Run as a
//            loop over the model and paged cache directly (the engine's Drafter sees tokens
//            only, not the cache), against the same loop without drafts.
// Decode speed is measured from the first generated token to the last (the prompt's pass is not
// in it), as tokens after the first per second. Every speculative run's tokens are checked
// against the run without drafts (greedy speculation must not change them).
// Tables print as Markdown, for docs/speculative.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/config/presets.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/engine/speculative.hpp>

namespace {

using namespace tinfer;
using Model = Llama<presets::smollm2_135m>;
using Serving = sched::Scheduler<sched::ContinuousBatching<8, 1024>, sched::ChunkedPrefill<512>,
                                 sched::PreemptByRecompute, sched::Fcfs>;
using Tokens = std::vector<std::int32_t>;
using Clock = std::chrono::steady_clock;

struct Options {
    std::string model;
    std::string passage = "tests/data/text/gettysburg_address.txt";
    int passage_words = 120;
    int threads = 1;
    int tokens = 64;
    std::vector<int> gammas{1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<int> layer_gammas{1, 2, 3, 4};
    std::vector<int> draft_layers{8, 15};
    bool lookup = true;
    bool layers = true;
};

struct Run {
    Tokens tokens;
    double decode_seconds = 0;  // first generated token to last
    spec::SpeculationStats stats;

    double decode_rate() const {
        return decode_seconds > 0 ? static_cast<double>(tokens.size() - 1) / decode_seconds : 0;
    }
};

std::string first_words(std::string const& path, int count) {
    std::ifstream in(path);
    if (!in) throw Error("spec_bench: cannot read the passage " + path);
    std::string word, text;
    for (int i = 0; i < count && in >> word; ++i) text += (i ? " " : "") + word;
    return text;
}

template <class Engine>
Run run_engine(Engine& engine, std::vector<tok::ChatMessage> const& messages, int tokens,
               int gamma) {
    GenerationRequest request;
    request.messages = messages;
    request.max_tokens = tokens;
    request.ignore_eos = true;
    request.sampling.temperature = 0;
    request.draft_tokens = gamma;
    Run run;
    Clock::time_point first{}, last{};
    engine.submit(request, [&](TokenEvent const& e) {
        if (e.token < 0) return;
        last = Clock::now();
        if (run.tokens.empty()) first = last;
        run.tokens.push_back(e.token);
        if (e.finish) run.stats = e.speculation;
    });
    engine.run_until_idle();
    run.decode_seconds = std::chrono::duration<double>(last - first).count();
    return run;
}

void print_row(char const* workload, char const* drafter, int gamma, Run const& run,
               Run const& baseline) {
    bool const same = run.tokens == baseline.tokens;
    std::printf("| %s | %s | %d | %.2f | %.2f | %.1f | %.2f | %s |\n", workload, drafter, gamma,
                gamma ? run.stats.acceptance_rate() : 0.0,
                gamma ? run.stats.tokens_per_target_pass() : 1.0, run.decode_rate(),
                run.decode_rate() / baseline.decode_rate(), same ? "yes" : "NO");
    std::fflush(stdout);
}

void print_header() {
    std::printf(
        "| workload | drafter | gamma | acceptance | tokens/pass | decode t/s | speed-up "
        "| same tokens |\n|---|---|---|---|---|---|---|---|\n");
}

void lookup_bench(Options const& o) {
    Engine<Model, Serving> engine(gguf::File::open(o.model),
                                  {.kv_budget_bytes = std::size_t{64} << 20, .threads = o.threads});
    struct Workload {
        char const* name;
        std::vector<tok::ChatMessage> messages;
    };
    std::string const passage = first_words(o.passage, o.passage_words);
    Workload const workloads[] = {
        {"repeat passage",
         {{"user", "Repeat the following text exactly, word for word:\n\n" + passage}}},
        {"free chat",
         {{"user",
           "Tell me a short story about a lighthouse keeper who finds a message in a "
           "bottle."}}},
    };
    print_header();
    for (Workload const& w : workloads) {
        run_engine(engine, w.messages, 2, 0);  // warm-up: page in the weights
        Run const baseline = run_engine(engine, w.messages, o.tokens, 0);
        print_row(w.name, "none", 0, baseline, baseline);
        for (int const gamma : o.gammas)
            print_row(w.name, "prompt lookup", gamma,
                      run_engine(engine, w.messages, o.tokens, gamma), baseline);
        // The baseline again: the spread between the two shows how much the load moved.
        print_row(w.name, "none (again)", 0, run_engine(engine, w.messages, o.tokens, 0), baseline);
    }
}

std::int32_t argmax(std::span<float const> row) {
    return static_cast<std::int32_t>(std::ranges::max_element(row) - row.begin());
}

// Greedy decoding of `prompt` over the paged cache; with gamma > 0 each round drafts gamma tokens
// with the first `draft_layers` layers and verifies them in one full pass.
Run run_layer_skip(Model const& model, Tokens const& prompt, int tokens, int gamma,
                   int draft_layers, int threads) {
    constexpr ModelConfig cfg = presets::smollm2_135m;
    using Cache = kv::PagedKvCache<cfg, 16>;
    Cache cache(std::size_t{64} << 20);
    int const capacity = static_cast<int>(prompt.size()) + tokens + gamma + 1;
    int const seq = cache.admit(capacity);
    Model::Workspace ws(static_cast<int>(prompt.size()) + gamma + 1, threads);
    std::vector<float> logits(static_cast<std::size_t>(gamma + 1) * cfg.vocab);
    auto const row = [&](int i) {
        return std::span<float const>(logits).subspan(static_cast<std::size_t>(i) * cfg.vocab,
                                                      cfg.vocab);
    };
    auto const forward = [&](int first, std::span<std::int32_t const> chunk_tokens, bool all_logits,
                             int layers) {
        if (!cache.reserve(seq, first + static_cast<int>(chunk_tokens.size())))
            throw Error("spec_bench: KV cache too small");
        SequenceChunk const chunk{
            .slot = seq, .first_position = first, .tokens = chunk_tokens, .all_logits = all_logits};
        model.forward(std::span<SequenceChunk const>(&chunk, 1), cache, ws, logits, layers);
    };

    Tokens context = prompt;
    forward(0, context, false, cfg.layers);
    context.push_back(argmax(row(0)));
    Run run;
    run.tokens.push_back(context.back());
    auto const start = Clock::now();
    spec::DraftProposal proposal;
    spec::SpeculativeWorkspace verifier(cfg.vocab);
    kernels::SamplingParams greedy;
    greedy.temperature = 0;
    while (static_cast<int>(run.tokens.size()) < tokens) {
        int const length = static_cast<int>(context.size());  // the cache holds length - 1
        int const drafts = std::min(gamma, tokens - static_cast<int>(run.tokens.size()) - 1);
        proposal.clear();
        Tokens round{context.back()};
        for (int i = 0; i < drafts; ++i) {
            // Draft i runs the token before it at position length - 1 + i in the first layers
            // only; the verification pass below rewrites those positions in every layer.
            std::int32_t const previous[] = {round.back()};
            forward(length - 1 + i, previous, false, draft_layers);
            round.push_back(argmax(row(0)));
            proposal.add(round.back());
        }
        forward(length - 1, round, true, cfg.layers);
        spec::SequenceView const sequence{.tokens = context, .prompt_length = prompt.size()};
        spec::Verdict const verdict =
            spec::verify_drafts(sequence, proposal,
                                std::span<float const>(logits).first(
                                    round.size() * static_cast<std::size_t>(cfg.vocab)),
                                greedy, verifier);
        Tokens kept;
        spec::append_round_tokens(kept, proposal, verdict);
        cache.truncate(seq, spec::kv_length_after_round(length, verdict));
        context.insert(context.end(), kept.begin(), kept.end());
        run.tokens.insert(run.tokens.end(), kept.begin(), kept.end());
        run.stats.record(drafts, verdict);
    }
    run.decode_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return run;
}

void layer_bench(Options const& o) {
    gguf::File const file = gguf::File::open(o.model);
    Model const model = Model::bind(file);
    tok::Tokenizer const tokenizer = tok::tokenizer_from_gguf(file);
    tok::ChatTemplate const chat = tok::chat_template_from_gguf(file);
    std::string const passage = first_words(o.passage, o.passage_words);
    struct Workload {
        char const* name;
        Tokens prompt;
    };
    auto const render = [&](std::string text) {
        std::vector<tok::ChatMessage> const messages{{"user", std::move(text)}};
        return tokenizer.encode(chat.render(messages, /*add_generation_prompt=*/true));
    };
    Workload const workloads[] = {
        {"repeat passage",
         render("Repeat the following text exactly, word for word:\n\n" + passage)},
        {"free chat", render("Tell me a short story about a lighthouse keeper who finds a message "
                             "in a bottle.")},
    };
    print_header();
    for (Workload const& w : workloads) {
        run_layer_skip(model, w.prompt, 2, 0, Model::config.layers, o.threads);  // warm-up
        Run const baseline =
            run_layer_skip(model, w.prompt, o.tokens, 0, Model::config.layers, o.threads);
        print_row(w.name, "none", 0, baseline, baseline);
        for (int const k : o.draft_layers) {
            std::string const drafter = "first " + std::to_string(k) + " layers";
            for (int const gamma : o.layer_gammas)
                print_row(w.name, drafter.c_str(), gamma,
                          run_layer_skip(model, w.prompt, o.tokens, gamma, k, o.threads), baseline);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"spec_bench: speculative decoding's acceptance and decode speed-up"};
    app.add_option("-m,--model", o.model, "GGUF model (SmolLM2-135M)")->required();
    app.add_option("--passage", o.passage, "Text file whose first words the model repeats");
    app.add_option("--passage-words", o.passage_words, "Words of the passage to use");
    app.add_option("-t,--threads", o.threads, "Threads");
    app.add_option("-n,--tokens", o.tokens, "Tokens generated per run");
    app.add_option("--gammas", o.gammas, "Drafts per round for prompt lookup");
    app.add_option("--layer-gammas", o.layer_gammas, "Drafts per round for layer skipping");
    app.add_option("--draft-layers", o.draft_layers, "Layers the self-speculative drafter runs");
    app.add_flag("!--no-lookup", o.lookup, "Skip the prompt-lookup table");
    app.add_flag("!--no-layers", o.layers, "Skip the layer-skipping table");
    CLI11_PARSE(app, argc, argv);
    try {
        if (o.lookup) lookup_bench(o);
        if (o.lookup && o.layers) std::printf("\n");
        if (o.layers) layer_bench(o);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "spec_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
