// The engine on a small synthetic model (seeded random weights, a vocabulary of "t0", "t1", ...;
// tests/support/synthetic_model.hpp), where each step takes milliseconds, so the figures the
// engine reports can be checked against the test's own measurements:
//   - metrics: TTFT, TPOT, end-to-end latency, queue time, tokens/s, requests/s, mean KV
//     utilization and peak KV usage, exactly with a manual clock injected through
//     EngineOptions::clock, and as ordering and bounds around the test's own readings of the
//     steady clock when the real clock runs;
//   - a stop on EOS (FinishReason::stop_token) at the token the file names as EOS;
//   - swap preemption: blocks counted out to the host pool and back, as the test counts them
//     from the scheduler's swapped set, and greedy tokens unchanged by it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>

#include "step_until.hpp"
#include "synthetic_model.hpp"
#include "testing.hpp"

using namespace tinfer;
namespace s = tinfer::sched;
using Clock = s::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

constexpr ModelConfig tiny{.layers = 2,
                           .hidden = 64,
                           .heads = 4,
                           .kv_heads = 2,
                           .head_dim = 16,
                           .ffn = 96,
                           .vocab = 32,
                           .max_context = 256,
                           .rope_base = 10000.0,
                           .norm_eps = 1e-5,
                           // Its own LM head: a tied one makes greedy decoding repeat the last
                           // token of a random model forever.
                           .arch = {.lm_head = LmHead::separate}};
using Model = model::Llama<tiny>;
constexpr int block_size = 16;
constexpr std::size_t block_bytes = kv::PagedKvCache<tiny, block_size>::bytes_per_block;

// At most two running: of three requests, the third waits for one to finish (a queue time).
using Serving =
    s::Scheduler<s::ContinuousBatching<2, 256>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using Swapping =
    s::Scheduler<s::ContinuousBatching<4, 256>, s::WholePrompt, s::PreemptBySwap, s::Fcfs>;

constexpr std::uint64_t weights_seed = 20261201;

// The file's bytes outlive every engine built on them (File::from_bytes does not copy).
std::vector<std::byte> const& model_bytes(std::optional<std::int32_t> eos = std::nullopt) {
    static std::map<std::optional<std::int32_t>, std::vector<std::byte>> files;
    auto& bytes = files[eos];
    if (bytes.empty())
        bytes = testing::SyntheticModel(tiny, weights_seed).with_tokenizer(eos).bytes();
    return bytes;
}

gguf::File model_file(std::optional<std::int32_t> eos = std::nullopt) {
    return gguf::File::from_bytes(model_bytes(eos));
}

GenerationRequest greedy(std::vector<std::int32_t> prompt, int max_tokens, bool ignore_eos = true) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = ignore_eos;
    r.sampling.temperature = 0;
    return r;
}

std::vector<std::int32_t> prompt_of(std::uint64_t seed, int length) {
    auto rng = testing::seeded_rng(seed);
    std::uniform_int_distribution<std::int32_t> token(0, tiny.vocab - 1);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(length));
    for (auto& t : prompt) t = token(rng);
    return prompt;
}

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

// A clock the test moves by hand; the engine reads it through EngineOptions::clock.
struct ManualClock {
    Clock::time_point now{Clock::duration(std::chrono::seconds(1000))};
    s::ClockSource source() {
        return [this] { return now; };
    }
};

// What the test itself sees of one request: its own clock readings around submit, each token
// event and the end of the step that finished it, and its own token count.
struct Observed {
    int prompt_length = 0;
    Clock::time_point submitted{}, first_token{}, last_token{};
    Clock::time_point first_step_start{};   // the step that brought its first token
    Clock::time_point finished_step_end{};  // the step that brought its final event
    int tokens = 0;
    bool finished = false;
};

// The test's own account of the run, next to the engine's.
struct Run {
    std::map<s::RequestId, Observed> requests;
    int steps = 0;
    double utilization_sum = 0;  // of the test's own per-step figure
    double peak_usage = 0;
    Clock::time_point first_step_end{};
    std::int64_t tokens = 0;
};

// A request and the step before which the test submits it.
struct Arrival {
    GenerationRequest request;
    int before_step = 0;
};

// Submits each request before its step and steps the engine to idle. `now` reads the clock the
// engine uses; `advance` moves it (a manual clock) or does nothing (the steady clock): by
// `callback_time` inside every token callback, and by a different amount after every step, so
// that no two events the metrics distinguish share a timestamp.
template <class E, class Now, class Advance>
Run run_observed(E& engine, std::vector<Arrival> const& arrivals, Now now, Advance advance) {
    Run run;
    std::vector<s::RequestId> ended_this_step;
    Clock::time_point step_start{};
    auto const submit = [&](GenerationRequest const& request) {
        Clock::time_point const submitted = now();
        s::RequestId const id = engine.submit(request, [&](TokenEvent const& e) {
            Observed& o = run.requests.at(e.id);
            Clock::time_point const t = now();
            if (e.token >= 0) {
                if (o.tokens == 0) {
                    o.first_token = t;
                    o.first_step_start = step_start;
                }
                o.last_token = t;
                ++o.tokens;
                ++run.tokens;
            }
            if (e.finish) {
                BOOST_TEST(!o.finished, "request " << e.id << " finished twice");
                o.finished = true;
                ended_this_step.push_back(e.id);
            }
            advance(microseconds(700 + 100 * static_cast<int>(static_cast<std::uint64_t>(e.id))));
        });
        run.requests[id] = {.prompt_length = static_cast<int>(request.prompt_tokens.size()),
                            .submitted = submitted};
        // Time passes before the next step takes it in: TTFT and latency must count it.
        advance(milliseconds(2));
    };
    std::size_t next = 0;
    bool working = true;
    testing::step_until(
        [&] { return !working && next == arrivals.size(); },
        [&] {
            for (; next < arrivals.size() && arrivals[next].before_step == run.steps; ++next)
                submit(arrivals[next].request);
            step_start = now();
            ended_this_step.clear();
            working = engine.step();
            Clock::time_point const step_end = now();
            if (run.steps == 0) run.first_step_end = step_end;
            ++run.steps;
            for (s::RequestId const id : ended_this_step)
                run.requests.at(id).finished_step_end = step_end;
            // KV held after the step, from the test's own token counts: a running request's
            // cache holds its prompt and every token but the latest (which the next step runs).
            std::int64_t live = 0, blocks = 0;
            for (auto const& [id, o] : run.requests) {
                if (o.tokens == 0 || o.finished) continue;
                int const held = o.prompt_length + o.tokens - 1;
                live += held;
                blocks += (held + block_size - 1) / block_size;
            }
            BOOST_TEST(engine.cache().live_tokens() == live, "step " << run.steps);
            BOOST_TEST(engine.cache().used_blocks() == blocks, "step " << run.steps);
            run.utilization_sum +=
                blocks == 0 ? 1.0
                            : static_cast<double>(live) / static_cast<double>(blocks * block_size);
            run.peak_usage = std::max(run.peak_usage,
                                      static_cast<double>(blocks) / engine.cache().total_blocks());
            advance(milliseconds(10 + 3 * run.steps));
        },
        200, "every request finishing");
    for (auto const& [id, o] : run.requests) BOOST_TEST(o.finished, "request " << id);
    return run;
}

std::vector<Arrival> three_arrivals() {
    // Prompts that cross block boundaries as they grow (20 -> 25, 7 -> 15, 33 -> 37 tokens); the
    // third arrives later, and waits for a running one to finish.
    return {{greedy(prompt_of(1, 20), 6), 0},
            {greedy(prompt_of(2, 7), 9), 0},
            {greedy(prompt_of(3, 33), 5), 2}};
}

EngineOptions options(s::ClockSource clock = {}) {
    return {.kv_budget_bytes = 64 * block_bytes,
            .threads = 1,
            .prefix_caching = false,  // blocks go back when a request ends: counted exactly
            .clock = std::move(clock)};
}

s::RequestMetrics const& metrics_of(std::vector<s::RequestMetrics> const& done, s::RequestId id) {
    auto const found = std::ranges::find(done, id, &s::RequestMetrics::id);
    BOOST_REQUIRE_MESSAGE(found != done.end(), "no metrics for request " << id);
    return *found;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(engine_metrics)

// With the clock injected, every figure equals the one the test computes from its own clock
// readings, to the nanosecond.
BOOST_AUTO_TEST_CASE(metrics_equal_the_tests_own_measurements_under_a_manual_clock) {
    ManualClock clock;
    Engine<Model, Serving> engine(model_file(), options(clock.source()));
    Run const run = run_observed(
        engine, three_arrivals(), [&] { return clock.now; },
        [&](Clock::duration d) { clock.now += d; });

    auto const& done = engine.metrics().finished();
    BOOST_REQUIRE_EQUAL(done.size(), run.requests.size());
    Clock::time_point first_arrival = Clock::time_point::max();
    for (auto const& [id, o] : run.requests) {
        BOOST_TEST_CONTEXT("request " << id) {
            s::RequestMetrics const& m = metrics_of(done, id);
            BOOST_TEST(m.generated_tokens == o.tokens);
            BOOST_TEST(m.prompt_tokens == o.prompt_length);
            BOOST_TEST(m.finish_reason == "length");
            // Arrival is the submit time, not when the next step took the request in (2 ms
            // later on this clock).
            BOOST_TEST((m.arrival == o.submitted));
            BOOST_TEST((m.first_token == o.first_token));
            BOOST_TEST((m.first_scheduled == o.first_step_start));
            BOOST_TEST((m.finished == o.finished_step_end));
            BOOST_TEST(*m.ttft() == seconds(o.first_token - o.submitted));
            BOOST_TEST(*m.tpot() == seconds(o.finished_step_end - o.first_token) / (o.tokens - 1));
            BOOST_TEST(*m.end_to_end() == seconds(o.finished_step_end - o.submitted));
            BOOST_TEST(*m.queue_time() == seconds(o.first_step_start - o.submitted));
            first_arrival = std::min(first_arrival, o.submitted);
        }
    }
    // The third request waited for a running one to finish.
    BOOST_TEST(*metrics_of(done, s::RequestId{3}).queue_time() > 0);

    clock.now += milliseconds(5);  // the summary reads the clock when asked
    s::RunSummary const summary = engine.metrics().summary();
    double const elapsed = seconds(clock.now - first_arrival);
    BOOST_TEST(summary.seconds == elapsed);
    BOOST_TEST(summary.generated_tokens == run.tokens);
    BOOST_TEST(summary.finished_requests == 3);
    BOOST_TEST(summary.tokens_per_second() == static_cast<double>(run.tokens) / elapsed);
    BOOST_TEST(summary.requests_per_second() == 3 / elapsed);
    BOOST_TEST(summary.steps == run.steps);
    BOOST_TEST(summary.mean_kv_utilization == run.utilization_sum / run.steps);
    BOOST_TEST(summary.peak_kv_usage == run.peak_usage);
    BOOST_TEST(summary.preemptions == 0);
}

// On the steady clock: each figure lies within what the test's own readings before submit,
// at each token and after each step allow, whatever the machine's load.
BOOST_AUTO_TEST_CASE(metrics_lie_within_the_tests_own_clock_readings_on_the_steady_clock) {
    Engine<Model, Serving> engine(model_file(), options());
    Run const run = run_observed(
        engine, three_arrivals(), [] { return Clock::now(); }, [](Clock::duration) {});

    auto const& done = engine.metrics().finished();
    BOOST_REQUIRE_EQUAL(done.size(), run.requests.size());
    Clock::time_point first_submit = Clock::time_point::max();
    for (auto const& [id, o] : run.requests) {
        BOOST_TEST_CONTEXT("request " << id) {
            s::RequestMetrics const& m = metrics_of(done, id);
            BOOST_TEST(m.generated_tokens == o.tokens);
            // Readings in the order they happen: submit <= arrival <= first scheduled <= first
            // token <= its callback; last callback <= finished <= the end of its step.
            BOOST_TEST((o.submitted <= m.arrival));
            BOOST_TEST((m.arrival <= *m.first_scheduled));
            BOOST_TEST((o.first_step_start <= *m.first_scheduled));
            BOOST_TEST((*m.first_scheduled <= *m.first_token));
            BOOST_TEST((*m.first_token <= o.first_token));
            BOOST_TEST((o.last_token <= *m.finished));
            BOOST_TEST((*m.finished <= o.finished_step_end));
            BOOST_TEST(*m.ttft() >= 0);
            BOOST_TEST(*m.ttft() <= seconds(o.first_token - o.submitted));
            BOOST_TEST(*m.end_to_end() >= seconds(o.last_token - o.first_token));
            BOOST_TEST(*m.end_to_end() <= seconds(o.finished_step_end - o.submitted));
            BOOST_TEST(*m.end_to_end() >= *m.ttft());
            double const decode_time = *m.tpot() * (o.tokens - 1);
            BOOST_TEST(decode_time >= seconds(o.last_token - o.first_token) * (1 - 1e-12));
            BOOST_TEST(decode_time <= seconds(o.finished_step_end - o.submitted) * (1 + 1e-12));
            first_submit = std::min(first_submit, o.submitted);
        }
    }
    Clock::time_point const before = Clock::now();
    s::RunSummary const summary = engine.metrics().summary();
    Clock::time_point const after = Clock::now();
    // The run starts at the first arrival: after the first submit, before the first step ended.
    BOOST_TEST(summary.seconds >= seconds(before - run.first_step_end));
    BOOST_TEST(summary.seconds <= seconds(after - first_submit));
    BOOST_TEST(summary.generated_tokens == run.tokens);
    BOOST_TEST(summary.finished_requests == 3);
    BOOST_TEST(summary.tokens_per_second() >= run.tokens / seconds(after - first_submit));
    BOOST_TEST(summary.tokens_per_second() <= run.tokens / seconds(before - run.first_step_end));
    BOOST_TEST(summary.requests_per_second() >= 3 / seconds(after - first_submit));
    BOOST_TEST(summary.requests_per_second() <= 3 / seconds(before - run.first_step_end));
    // KV figures do not depend on the clock: exact here too.
    BOOST_TEST(summary.steps == run.steps);
    BOOST_TEST(summary.mean_kv_utilization == run.utilization_sum / run.steps);
    BOOST_TEST(summary.peak_kv_usage == run.peak_usage);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(engine_stops)

// The file names as EOS a token that seeded sampling reaches at its k-th step (a random model's
// greedy decoding soon cycles through two tokens; seeded draws depend on the seed and step only,
// so the tokens before EOS are the same with and without it): the request stops there with
// stop_token, EOS being its last token and contributing no text; with ignore_eos it goes on to
// max_tokens and yields exactly the tokens of a file without EOS.
BOOST_AUTO_TEST_CASE(a_request_stops_on_the_files_eos_token) {
    constexpr int max_tokens = 16;
    auto const request = [&](bool ignore_eos) {
        GenerationRequest r = greedy(prompt_of(11, 9), max_tokens, ignore_eos);
        r.sampling.temperature = 1;
        r.sampling.seed = 5;
        return r;
    };
    std::vector<std::int32_t> free_run;
    {
        Engine<Model, Serving> engine(model_file(), options());
        Completion const c = engine.generate({request(true)}).front();
        BOOST_TEST((c.finish == FinishReason::length));
        free_run = c.tokens;
    }
    BOOST_REQUIRE_EQUAL(free_run.size(), static_cast<std::size_t>(max_tokens));
    // EOS: the first token that does not occur before it, from the third on.
    std::size_t k = 2;
    auto const seen_before = [&](std::size_t i) {
        auto const end = free_run.begin() + static_cast<std::ptrdiff_t>(i);
        return std::find(free_run.begin(), end, free_run[i]) != end;
    };
    while (k < free_run.size() && seen_before(k)) ++k;
    BOOST_REQUIRE_MESSAGE(k < free_run.size(), "sampling repeats its first two tokens");
    std::int32_t const eos = free_run[k];
    BOOST_TEST_MESSAGE("EOS = t" << eos << ", the sampled run's token " << k);

    Engine<Model, Serving> engine(model_file(eos), options());
    BOOST_TEST((engine.tokenizer().eos_id() == eos));
    auto const results = engine.generate({request(false), request(true)});
    Completion const& stopped = results[0];
    BOOST_TEST((stopped.finish == FinishReason::stop_token));
    std::vector<std::int32_t> const until_eos(
        free_run.begin(), free_run.begin() + static_cast<std::ptrdiff_t>(k + 1));
    BOOST_TEST(stopped.tokens == until_eos);
    BOOST_TEST(stopped.text.find("t" + std::to_string(eos)) == std::string::npos);
    Completion const& ignoring = results[1];
    BOOST_TEST((ignoring.finish == FinishReason::length));
    BOOST_TEST(ignoring.tokens == free_run);
    BOOST_TEST(metrics_of(engine.metrics().finished(), stopped.id).finish_reason == "stop_token");
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(engine_swapping)

// Four requests of 20 + 20 tokens (3 blocks each at the end) on a pool of 8 blocks: the latest
// arrivals are swapped to the host pool and back. The engine's swap counters equal what the test
// counts from the scheduler's swapped set after each step (blocks: what the request's cache held
// when it left, from the test's own token counts), every swap-out comes back, and each request's
// greedy tokens are those it gets on a pool with room for all.
BOOST_AUTO_TEST_CASE(swap_preemption_moves_counted_blocks_out_and_back) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 4; ++i) requests.push_back(greedy(prompt_of(40 + i, 20), 20));
    std::vector<std::vector<std::int32_t>> roomy;
    {
        Engine<Model, Swapping> engine(model_file(), options());
        for (Completion const& c : engine.generate(requests)) roomy.push_back(c.tokens);
        BOOST_TEST(engine.metrics().summary().preemptions == 0);
    }

    Engine<Model, Swapping> engine(
        model_file(), {.kv_budget_bytes = 8 * block_bytes, .threads = 1, .prefix_caching = false});
    std::map<s::RequestId, std::vector<std::int32_t>> tokens;
    std::map<s::RequestId, int> prompt_length;
    for (GenerationRequest const& r : requests) {
        s::RequestId const id = engine.submit(r, [&](TokenEvent const& e) {
            if (e.token >= 0) tokens[e.id].push_back(e.token);
        });
        prompt_length[id] = static_cast<int>(r.prompt_tokens.size());
    }
    int swap_outs = 0, swap_ins = 0;
    std::int64_t blocks_out = 0, blocks_in = 0;
    std::map<s::RequestId, int> blocks_on_host;
    std::set<s::RequestId> was_swapped;
    bool working = true;
    testing::step_until(
        [&] { return !working; },
        [&] {
            working = engine.step();
            auto const swapped_now = engine.scheduler().swapped();
            std::set<s::RequestId> const now(swapped_now.begin(), swapped_now.end());
            for (s::RequestId const id : now) {
                if (was_swapped.contains(id)) continue;
                // Preempted before the step's pass, so its token count is what the cache held.
                int const held = prompt_length[id] + static_cast<int>(tokens[id].size()) - 1;
                blocks_on_host[id] = (held + block_size - 1) / block_size;
                ++swap_outs;
                blocks_out += blocks_on_host[id];
            }
            for (s::RequestId const id : was_swapped) {
                if (now.contains(id)) continue;
                ++swap_ins;
                blocks_in += blocks_on_host.at(id);
            }
            was_swapped = now;
        },
        500, "every request finishing");

    s::RunSummary const summary = engine.metrics().summary();
    BOOST_TEST_MESSAGE("swap-outs " << summary.swap_outs << " (" << summary.swapped_out_blocks
                                    << " blocks), swap-ins " << summary.swap_ins << " ("
                                    << summary.swapped_in_blocks << " blocks)");
    BOOST_TEST(swap_outs > 0);
    BOOST_TEST(summary.swap_outs == swap_outs);
    BOOST_TEST(summary.swap_ins == swap_ins);
    BOOST_TEST(summary.swapped_out_blocks == blocks_out);
    BOOST_TEST(summary.swapped_in_blocks == blocks_in);
    BOOST_TEST(swap_ins == swap_outs);  // every request that left came back
    BOOST_TEST(blocks_in == blocks_out);
    BOOST_TEST(summary.preemptions == swap_outs);  // the host pool had room: no recompute
    for (std::size_t i = 0; i < requests.size(); ++i)
        BOOST_TEST(tokens[s::RequestId{i + 1}] == roomy[i], "request " << i + 1);
    BOOST_TEST(engine.cache().live_sequences() == 0);
    BOOST_TEST(engine.cache().used_blocks() == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(engine_choices)

// n choices of one prompt (GenerationRequest::n) against n separate requests of the same seed
// streams: what each prefills and the KV blocks each holds at its peak.
struct ChoicesRun {
    std::vector<std::vector<std::int32_t>> tokens;  // per choice, in choice order
    std::int64_t prefilled = 0;  // tokens through the model less one decode per later token
    int peak_blocks = 0;         // distinct blocks live sequences held after any step
};

constexpr int choices_block = block_size;

// Up to 16 running at once, so the n = 16 separate requests also all run together.
Serving many_at_once() {
    return Serving(s::ContinuousBatching<2, 256>{.max_seqs = 16, .max_batched_tokens = 256});
}

template <class E>
ChoicesRun run_choices(E& engine, std::vector<GenerationRequest> const& requests, int max_tokens) {
    ChoicesRun run;
    std::map<std::pair<s::RequestId, int>, std::vector<std::int32_t>> tokens;
    int finished = 0, expected = 0;
    for (GenerationRequest const& r : requests) {
        expected += r.n;
        engine.submit(r, [&](TokenEvent const& e) {
            if (e.token >= 0) tokens[{e.id, e.choice}].push_back(e.token);
            if (e.finish) ++finished;
        });
    }
    testing::step_until(
        [&] { return !engine.step(); },
        [&] { run.peak_blocks = std::max(run.peak_blocks, engine.cache().sequence_blocks()); }, 400,
        "every choice finishing");
    BOOST_TEST(finished == expected);
    for (auto& [key, t] : tokens) run.tokens.push_back(std::move(t));
    std::int64_t const decoded = static_cast<std::int64_t>(expected) * (max_tokens - 1);
    run.prefilled = engine.metrics().summary().computed_tokens - decoded;
    BOOST_TEST(engine.cache().live_sequences() == 0);
    BOOST_TEST(engine.cache().used_blocks() == 0);  // no prefix cache: every block came back
    return run;
}

// n = 1, 4, 16 on a 37-token prompt (two full blocks and 5 tokens of a third) with 12 tokens
// each: the n choices prefill the prompt once and hold its two full blocks once plus each
// choice's own (its copy of the partly filled third block onwards), where n separate requests
// prefill it n times and hold n times the blocks. Choice i samples exactly what a lone request
// with seed + i samples (the prompt's logits are shared; decode is batch invariant), so the
// choices differ from each other and repeat themselves.
BOOST_AUTO_TEST_CASE(n_choices_prefill_the_prompt_once_and_fork_its_blocks) {
    constexpr int prompt_length = 37, max_tokens = 12;
    constexpr std::uint64_t seed = 0xc401ce5;
    std::vector<std::int32_t> const prompt = prompt_of(77, prompt_length);
    auto const sampled = [&](std::uint64_t seed_of_request, int n) {
        GenerationRequest r;
        r.prompt_tokens = prompt;
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        r.sampling.temperature = 1;
        r.seed = seed_of_request;
        r.n = n;
        return r;
    };
    auto const blocks_for = [](int tokens) { return (tokens + choices_block - 1) / choices_block; };
    int const full_prompt_blocks = prompt_length / choices_block;
    int const own_blocks = blocks_for(prompt_length + max_tokens - 1) - full_prompt_blocks;
    for (int const n : {1, 4, 16}) {
        Engine<Model, Serving> shared_engine(model_file(), options(), many_at_once());
        ChoicesRun const shared = run_choices(shared_engine, {sampled(seed, n)}, max_tokens);
        std::vector<GenerationRequest> separate_requests;
        for (int i = 0; i < n; ++i)
            separate_requests.push_back(sampled(seed + static_cast<std::uint64_t>(i), 1));
        Engine<Model, Serving> separate_engine(model_file(), options(), many_at_once());
        ChoicesRun const separate = run_choices(separate_engine, separate_requests, max_tokens);
        BOOST_TEST_MESSAGE("n = " << n << ": prompt tokens prefilled " << shared.prefilled
                                  << " (separate requests: " << separate.prefilled
                                  << "), peak KV blocks " << shared.peak_blocks
                                  << " (separate: " << separate.peak_blocks << ")");
        BOOST_TEST(shared.prefilled == prompt_length, "n = " << n);
        BOOST_TEST(separate.prefilled == n * prompt_length, "n = " << n);
        BOOST_TEST(shared.peak_blocks <= full_prompt_blocks + n * own_blocks, "n = " << n);
        BOOST_TEST(separate.peak_blocks == n * blocks_for(prompt_length + max_tokens - 1));
        BOOST_REQUIRE_EQUAL(shared.tokens.size(), static_cast<std::size_t>(n));
        BOOST_REQUIRE_EQUAL(separate.tokens.size(), static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i)
            BOOST_TEST(shared.tokens[static_cast<std::size_t>(i)] ==
                           separate.tokens[static_cast<std::size_t>(i)],
                       "n = " << n << ", choice " << i << " against a lone request of seed + i");
        if (n > 1) {
            std::set<std::vector<std::int32_t>> const distinct(shared.tokens.begin(),
                                                               shared.tokens.end());
            BOOST_TEST(distinct.size() > 1, "n = " << n << ": every choice sampled alike");
        }
    }
}

// Choices count toward max_seqs: a request of n choices is admitted only where all n fit, so
// with max_seqs 4 three requests of n = 3 never run more than 4 sequences at once (the forked
// choices used to join past it: 9 at once), and every choice still runs to its end.
BOOST_AUTO_TEST_CASE(choices_count_toward_max_seqs) {
    Engine<Model, Serving> engine(
        model_file(), options(),
        Serving(s::ContinuousBatching<2, 256>{.max_seqs = 4, .max_batched_tokens = 256}));
    constexpr int requests = 3, n = 3, max_tokens = 6;
    int finished = 0, tokens = 0;
    for (int i = 0; i < requests; ++i) {
        GenerationRequest r = greedy(prompt_of(40 + static_cast<std::uint64_t>(i), 11), max_tokens);
        r.sampling.temperature = 1;
        r.seed = 7;
        r.n = n;
        engine.submit(r, [&](TokenEvent const& e) {
            tokens += e.token >= 0;
            finished += e.finish.has_value();
        });
    }
    std::size_t peak = 0;
    for (int step = 0; finished < requests * n && step < 500; ++step) {
        engine.step();
        peak = std::max(peak, engine.scheduler().running().size());
        BOOST_TEST(engine.scheduler().running().size() <= 4u, "step " << step);
    }
    BOOST_TEST(finished == requests * n);
    BOOST_TEST(tokens == requests * n * max_tokens);
    BOOST_TEST(peak == static_cast<std::size_t>(n));  // one request's choices at a time: 3 + 3 > 4
    BOOST_TEST(engine.cache().used_blocks() == 0);
}

// Without a seed the engine draws a fresh one: two identical requests sample differently (16
// tokens at temperature 1 over 32 tokens agree by chance with negligible probability), where
// two with the same seed agree.
BOOST_AUTO_TEST_CASE(unseeded_requests_get_fresh_seeds) {
    Engine<Model, Serving> engine(model_file(), options());
    GenerationRequest r = greedy(prompt_of(5, 9), 16);
    r.sampling.temperature = 1;
    auto const unseeded = engine.generate({r, r});
    BOOST_TEST(unseeded[0].tokens != unseeded[1].tokens);
    r.seed = 42;
    auto const seeded = engine.generate({r, r});
    BOOST_TEST(seeded[0].tokens == seeded[1].tokens);
}

// Aborting a request ends every choice once, whether the others still wait for the prompt's
// pass or already run on its forked KV, and every block comes back.
BOOST_AUTO_TEST_CASE(aborting_a_request_ends_every_choice_and_frees_its_blocks) {
    for (int const steps_before_abort : {0, 3}) {
        Engine<Model, Serving> engine(model_file(), options(), many_at_once());
        GenerationRequest r = greedy(prompt_of(9, 21), 40);
        r.sampling.temperature = 1;
        r.n = 5;
        std::map<int, int> finishes;
        int tokens = 0;
        s::RequestId const id = engine.submit(r, [&](TokenEvent const& e) {
            if (e.token >= 0) ++tokens;
            if (e.finish) {
                ++finishes[e.choice];
                BOOST_TEST((*e.finish == FinishReason::aborted));
            }
        });
        for (int i = 0; i < steps_before_abort; ++i) engine.step();
        if (steps_before_abort > 0) BOOST_TEST(engine.cache().live_sequences() == 5);
        engine.abort(id);
        engine.run_until_idle();
        BOOST_TEST(finishes.size() == 5u, "after " << steps_before_abort << " steps");
        for (auto const& [choice, count] : finishes) BOOST_TEST(count == 1, "choice " << choice);
        BOOST_TEST(tokens == (steps_before_abort == 0 ? 0 : 5 * steps_before_abort));
        BOOST_TEST(engine.cache().live_sequences() == 0);
        BOOST_TEST(engine.cache().used_blocks() == 0);
    }
}

BOOST_AUTO_TEST_SUITE_END()
