// spec_bench: what speculative decoding buys on the real model, greedy, one request at a time,
// every drafter through the whole Engine:
//   lookup:      prompt lookup (the engine's default drafter, 3- down to 1-token suffixes);
//   layers8/15:  self-speculation by layer skipping (spec::LayerSkipDrafter): the first 8 or 15
//                of the target's 30 layers, then its final norm and LM head, with their own KV;
//   self:        a separate draft model (spec::DraftModelDrafter) that is SmolLM2 itself, all
//                30 layers, bound to the same file: every draft is accepted, and it must still
//                lose (each draft costs a full single-token pass);
// each on (a) repeating a given passage, where the output copies the prompt, and (b) free chat,
// where it rarely does, gamma swept, against the same engine without drafts (gamma 0).
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

#include <tinfer/engine/engine.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/speculative/model_drafters.hpp>
#include <tinfer/speculative/speculative.hpp>

namespace {

using namespace tinfer;
using Model = model::Llama<presets::smollm2_135m>;
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
    std::vector<std::string> drafters{"lookup", "layers8", "layers15", "self"};
    std::string precision = "f32";  // activations of every pass: f32 or int8
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
    char acceptance[16] = "–";
    if (gamma) std::snprintf(acceptance, sizeof acceptance, "%.2f", run.stats.acceptance_rate());
    std::printf("| %s | %s | %d | %s | %.2f | %.1f | %.2f | %s |\n", workload, drafter, gamma,
                acceptance, gamma ? run.stats.tokens_per_target_pass() : 1.0, run.decode_rate(),
                run.decode_rate() / baseline.decode_rate(), same ? "yes" : "NO");
    std::fflush(stdout);
}

void print_header() {
    std::printf(
        "| workload | drafter | gamma | acceptance | tokens/pass | decode t/s | speed-up "
        "| same tokens |\n|---|---|---|---|---|---|---|---|\n");
}

struct Workload {
    char const* name;
    std::vector<tok::ChatMessage> messages;
};

std::vector<Workload> workloads(Options const& o) {
    std::string const passage = first_words(o.passage, o.passage_words);
    return {
        {"repeat passage",
         {{"user", "Repeat the following text exactly, word for word:\n\n" + passage}}},
        {"free chat",
         {{"user",
           "Tell me a short story about a lighthouse keeper who finds a message in a "
           "bottle."}}},
    };
}

// One drafter's sweep: per workload, the baseline (gamma 0, same engine), then every gamma.
template <class Drafter>
void sweep(Options const& o, char const* name, Drafter drafter) {
    Engine<Model, Serving, Host, PagedKv<>, Drafter> engine(
        gguf::File::open(o.model),
        {.kv_budget_bytes = std::size_t{64} << 20,
         .threads = o.threads,
         .int8_activations = o.precision == "int8"},
        std::move(drafter));
    for (Workload const& w : workloads(o)) {
        run_engine(engine, w.messages, 2, 0);  // warm-up: page in the weights
        run_engine(engine, w.messages, 4, 1);  // and the drafter's
        Run const baseline = run_engine(engine, w.messages, o.tokens, 0);
        print_row(w.name, "none", 0, baseline, baseline);
        for (int const gamma : o.gammas)
            print_row(w.name, name, gamma, run_engine(engine, w.messages, o.tokens, gamma),
                      baseline);
    }
}

bool wanted(Options const& o, std::string const& name) {
    return std::ranges::find(o.drafters, name) != o.drafters.end();
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
    app.add_option("--gammas", o.gammas, "Drafts per round");
    app.add_option("--drafters", o.drafters, "Drafters to run: lookup layers8 layers15 self");
    app.add_option("--precision", o.precision,
                   "Activations of the engine's passes, drafters' included: f32 or int8")
        ->check(CLI::IsMember({"f32", "int8"}));
    CLI11_PARSE(app, argc, argv);
    try {
        print_header();
        if (wanted(o, "lookup")) sweep(o, "prompt lookup", DefaultDrafter{});
        if (wanted(o, "layers8")) sweep(o, "first 8 layers", spec::LayerSkipDrafter<Model, 8>{});
        if (wanted(o, "layers15")) sweep(o, "first 15 layers", spec::LayerSkipDrafter<Model, 15>{});
        if (wanted(o, "self"))
            sweep(o, "SmolLM2 itself", spec::DraftModelDrafter<Model>(gguf::File::open(o.model)));
    } catch (std::exception const& e) {
        std::fprintf(stderr, "spec_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
