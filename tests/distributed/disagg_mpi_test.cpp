// Prefill/decode disaggregation on the real model (SmolLM2-135M-Instruct), two processes, each
// an Engine: rank 0's hands every request off after its first token (PrefillRole), rank 1's
// adopts the KV blocks and decodes (DecodeRole), its token events coming back to rank 0's
// callbacks. Checked:
//  - every request (the golden prompts greedy; sampled ones with fresh seeds, penalties and
//    filters; prompts repeated so the prefill side takes blocks from its prefix cache; a
//    request that ends at its first token; one that ends on a stop token) streams token for
//    token, and text for text, what colocated serving streams: one Engine of the same type
//    serving the same requests (run on rank 0 afterwards);
//  - the KV of each hand-off, counted on the wire by a communicator wrapper and not by the
//    roles, is the 66-byte header plus ceil(tokens / block) whole blocks; compared with the
//    KV-size formula tokens x kv_bytes_per_token, the difference is the unused part of the last
//    block, always less than one block;
//  - a transfer whose codec or block size differs from the decode cache's is refused with a
//    KvLayoutMismatch naming the field, its request told so, and the transfers behind it still
//    arrive intact;
//  - the decode cache is smaller than the load (hand-offs wait in host memory for room), and
//    neither cache leaks a block.
// Few generated tokens per request keep it well under a minute on two cores.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "mpi_testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;

namespace {

constexpr ModelConfig smollm2 = presets::smollm2_135m;
constexpr int block_size = 16;
// Smaller than the long prompts, so their prefill runs in several chunks that straddle blocks.
constexpr int prefill_chunk_tokens = 48;
constexpr int max_batch = 4;
using Serving = sched::Scheduler<sched::ContinuousBatching<max_batch, 256>,
                                 sched::ChunkedPrefill<prefill_chunk_tokens>,
                                 sched::PreemptByRecompute, sched::Fcfs>;
using ServingEngine =
    Engine<model::Llama<smollm2>, Serving, Host, PagedKv<block_size, kv::Bf16Codec>>;
using Cache = ServingEngine::Cache;
// The formula's view of this cache: the model's shape with bf16 K and V.
constexpr DType shipped_kv = DType::bf16;
constexpr int prefill_rank = 0;
constexpr int decode_rank = 1;
constexpr int threads_per_rank = 1;  // two ranks on two cores
// The decode cache holds the longest golden request (27 blocks) and little beside it, not
// every request at once: later hand-offs wait in host memory for finished requests' blocks.
constexpr int decode_cache_blocks = 32;
constexpr int prefill_cache_blocks = 64;
// Ids of the malformed hand-offs the test sends itself: far from the engine's own ids.
constexpr std::uint64_t malformed_id = 1'000'000;

// Counts what goes through a communicator, message by message, so the test measures the wire
// itself rather than trusting the roles' own accounting.
template <PollingCommunicator Inner>
class CountingCommunicator {
  public:
    using Backend = typename Inner::Backend;
    explicit CountingCommunicator(Inner& inner) : inner_(&inner) {}

    int rank() const { return inner_->rank(); }
    int size() const { return inner_->size(); }
    void all_reduce_sum(std::span<float> data) { inner_->all_reduce_sum(data); }
    void all_gather(std::span<float const> mine, std::span<float> all) {
        inner_->all_gather(mine, all);
    }
    void send(std::span<std::byte const> bytes, int to, int tag) {
        sent.push_back(bytes.size());
        inner_->send(bytes, to, tag);
    }
    void recv(std::span<std::byte> bytes, int from, int tag) { inner_->recv(bytes, from, tag); }
    bool has_message(int from, int tag) { return inner_->has_message(from, tag); }
    void barrier() { inner_->barrier(); }

    std::vector<std::size_t> sent;  // sizes of the messages sent, in order

  private:
    Inner* inner_;
};

// A request as the test sends it (the id only names it in messages).
struct Routed {
    std::uint64_t id;
    GenerationRequest request;
};

// What a request's callback heard.
struct Heard {
    std::vector<std::int32_t> tokens;
    std::string text;
    std::optional<FinishReason> finish;
    std::string error;
    int finishes = 0;
};

EngineOptions options_with(int cache_blocks, bool prefix_caching) {
    return {.kv_budget_bytes = static_cast<std::size_t>(cache_blocks) * Cache::bytes_per_block,
            .threads = threads_per_rank,
            .prefix_caching = prefix_caching};
}

ServingEngine make_engine(char const* model_path, int cache_blocks, bool prefix_caching) {
    return ServingEngine(gguf::File::open(model_path), options_with(cache_blocks, prefix_caching),
                         Serving{});
}

std::vector<Routed> make_requests(std::vector<testing::GoldenPrompt> const& golden,
                                  std::uint64_t seed) {
    auto const prompt_named = [&](std::string const& name) -> testing::GoldenPrompt const& {
        auto const it = std::ranges::find(golden, name, &testing::GoldenPrompt::name);
        if (it == golden.end()) throw Error("golden prompt '" + name + "' is missing");
        return *it;
    };
    std::vector<Routed> requests;
    // The golden prompts, greedy, finishing at different steps so the batch changes shape.
    int new_tokens = 6;
    for (auto const& p : golden) {
        kernels::SamplingParams greedy;
        greedy.temperature = 0;
        requests.push_back(
            {100 + requests.size(),
             {.prompt_tokens = p.prompt, .max_tokens = new_tokens++, .sampling = greedy}});
    }
    // Sampled, with filters and penalties (the decode side needs the prompt for those). The
    // prompts repeat earlier ones: their prefill starts from the prefix cache.
    kernels::SamplingParams nucleus;
    nucleus.temperature = 0.9f;
    nucleus.top_k = 40;
    nucleus.top_p = 0.95f;
    nucleus.repetition_penalty = 1.3f;
    nucleus.seed = seed;
    requests.push_back(
        {200,
         {.prompt_tokens = prompt_named("chat").prompt, .max_tokens = 8, .sampling = nucleus}});
    kernels::SamplingParams hot;
    hot.temperature = 1.2f;
    hot.min_p = 0.02f;
    hot.frequency_penalty = 0.5f;
    hot.presence_penalty = 0.3f;
    hot.seed = seed + 1;
    requests.push_back(
        {201, {.prompt_tokens = prompt_named("plain").prompt, .max_tokens = 8, .sampling = hot}});
    // Finished by its first token, which the prefill side samples.
    requests.push_back(
        {300, {.prompt_tokens = prompt_named("code").prompt, .max_tokens = 1, .sampling = hot}});
    // Greedy until the third token of the golden continuation (or earlier, if it comes
    // sooner): ends on a stop token, not on length.
    kernels::SamplingParams greedy;
    greedy.temperature = 0;
    auto const& chat = prompt_named("chat");
    requests.push_back({301,
                        {.prompt_tokens = chat.prompt,
                         .max_tokens = 16,
                         .stop_token_ids = {chat.greedy.at(2)},
                         .sampling = greedy}});
    return requests;
}

std::string tokens_text(std::vector<std::int32_t> const& tokens) {
    std::string text;
    for (auto const t : tokens) {
        if (!text.empty()) text += ' ';
        text += std::to_string(t);
    }
    return text;
}

// Transfers built to be refused: the header of a real request with one field changed, and a
// payload of the size that header describes.
std::vector<KvTransferHeader> mismatched_headers(Routed const& routed) {
    std::vector<std::int32_t> const& prompt = routed.request.prompt_tokens;
    KvTransferHeader const good =
        KvBlockLayout<Cache>::header(routed.id, static_cast<int>(prompt.size()), prompt.back());
    KvTransferHeader int8_keys = good;
    int8_keys.key_codec = codec_id(kv::Int8Codec::name);
    int8_keys.key_vector_bytes = kv::Int8Codec::vector_bytes<smollm2.head_dim>;
    KvTransferHeader larger_blocks = good;
    larger_blocks.block_size = 2 * block_size;
    return {int8_keys, larger_blocks};
}

void run_prefill(testing::mpi::Checks& checks, CountingCommunicator<MpiCommunicator>& comm,
                 char const* model_path, std::vector<Routed> const& requests) {
    // The malformed hand-offs go first; the decode rank must refuse each and stay in step.
    std::vector<KvTransferHeader> const malformed = mismatched_headers(requests.front());
    for (std::size_t i = 0; i < malformed.size(); ++i) {
        KvTransferHeader bad = malformed[i];
        bad.request_id = malformed_id + i;
        std::vector<std::byte> const payload(bad.payload_bytes());
        send_handoff(comm, bad.request_id, requests.front().request, bad, payload, decode_rank,
                     default_kv_transfer_tag);
    }
    std::size_t const sent_before = comm.sent.size();

    ServingEngine engine = make_engine(model_path, prefill_cache_blocks, /*prefix_caching=*/true);
    PrefillRole prefill(engine, comm, {.peer = decode_rank});
    std::map<sched::RequestId, std::size_t> index_of;
    std::vector<Heard> heard(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        index_of[engine.submit(requests[i].request, [&heard, i](TokenEvent const& e) {
            Heard& h = heard[i];
            if (e.token >= 0) h.tokens.push_back(e.token);
            h.text += e.text;
            if (e.finish) {
                h.finish = e.finish;
                ++h.finishes;
            }
            if (!e.error.empty()) h.error = e.error;
        })] = i;
    }
    // Bounded: a request whose end never comes back fails the test instead of hanging it (a
    // few times the run's length on two loaded cores).
    checks.expect(prefill.run_until_idle(std::chrono::seconds(200)),
                  "every request ended within 200 s");

    // The refusals came back as events for the malformed hand-offs, naming what differs.
    std::vector<std::string> const must_name = {"key codec id", "block_size 32, this cache has 16"};
    auto const& unrouted = prefill.unrouted_events();
    checks.expect(unrouted.size() == must_name.size(), std::to_string(unrouted.size()) +
                                                           " refusals came back, expected " +
                                                           std::to_string(must_name.size()));
    for (std::size_t i = 0; i < std::min(unrouted.size(), must_name.size()); ++i) {
        std::string const& error = unrouted[i].error;
        checks.expect(
            unrouted[i].finish == FinishReason::aborted &&
                static_cast<std::uint64_t>(unrouted[i].id) == malformed_id + i &&
                error.find(must_name[i]) != std::string::npos &&
                (i != 0 || error.find("bf16") != std::string::npos),
            "a mismatched transfer is refused naming '" + must_name[i] + "': got '" + error + "'");
    }

    // The wire: a KV header (66 bytes) then its payload of whole blocks, once per hand-off.
    std::vector<std::size_t> payloads;
    for (std::size_t m = sent_before; m + 1 < comm.sent.size(); ++m)
        if (comm.sent[m] == kv_transfer_header_bytes) payloads.push_back(comm.sent[m + 1]);
    std::vector<std::size_t> expected_payloads;
    std::printf("%8s %7s %7s %7s %10s %12s %10s %9s\n", "request", "tokens", "cached", "blocks",
                "shipped", "formula", "padding", "overhead");
    std::vector<sched::RequestMetrics> const metrics = engine.take_finished_metrics();
    std::vector<std::vector<std::int32_t>> seen_prompts;
    int prefix_hits = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        std::vector<std::int32_t> const& prompt = requests[i].request.prompt_tokens;
        int const n = static_cast<int>(prompt.size());
        std::string const which = "request " + std::to_string(requests[i].id);
        bool const repeated = std::ranges::find(seen_prompts, prompt) != seen_prompts.end();
        seen_prompts.push_back(prompt);
        auto const m = std::ranges::find_if(
            metrics, [&](sched::RequestMetrics const& r) { return index_of.at(r.id) == i; });
        if (!checks.expect(m != metrics.end(), which + ": the prefill engine saw it end")) continue;
        // A prompt seen before may start from its cached full blocks (one position is always
        // recomputed, for the logits); whether its twin has left by then is the scheduler's.
        int const cacheable = (n - 1) / block_size * block_size;
        checks.expect(
            m->cached_prompt_tokens == 0 || (repeated && m->cached_prompt_tokens == cacheable),
            which + ": " + std::to_string(m->cached_prompt_tokens) +
                " prompt tokens from the prefix cache");
        prefix_hits += m->cached_prompt_tokens > 0;
        bool const handed_off = heard[i].tokens.size() >= 2;
        checks.expect(m->finish_reason == (handed_off ? "handed_off" : name_of(*heard[i].finish)),
                      which + ": ended on the prefill side as '" + m->finish_reason + "'");
        if (!handed_off) continue;
        std::size_t const blocks = static_cast<std::size_t>(Cache::blocks_for(n));
        std::size_t const payload = blocks * Cache::bytes_per_block;
        expected_payloads.push_back(payload);
        double const formula = smollm2.kv_bytes(n, shipped_kv);
        double const padding = static_cast<double>(payload) - formula;
        checks.expect(padding >= 0 && padding < static_cast<double>(Cache::bytes_per_block) &&
                          (n % block_size != 0 || padding == 0),
                      which +
                          ": the payload exceeds tokens x kv_bytes_per_token by the unused "
                          "slots of the last block only");
        std::size_t const shipped = kv_transfer_header_bytes + payload;
        std::printf("%8llu %7d %7d %7zu %10zu %12.0f %10.0f %8.2f%%\n",
                    static_cast<unsigned long long>(requests[i].id), n, m->cached_prompt_tokens,
                    blocks, shipped, formula, padding + kv_transfer_header_bytes,
                    100.0 * (static_cast<double>(shipped) - formula) / formula);
    }
    checks.expect(prefix_hits >= 1, "a repeated prompt started from the prefix cache");
    std::ranges::sort(payloads);
    std::ranges::sort(expected_payloads);
    checks.expect(payloads == expected_payloads,
                  "the wire carried one header + whole-blocks payload per hand-off (" +
                      std::to_string(payloads.size()) + " seen, " +
                      std::to_string(expected_payloads.size()) + " expected)");
    checks.expect(prefill.stats().handoffs == static_cast<int>(expected_payloads.size()),
                  "the role's own count of hand-offs");
    std::printf(
        "KV bytes per token %.0f (formula) = %zu (cache); block of %d tokens = %zu bytes; "
        "header %zu bytes\n",
        smollm2.kv_bytes_per_token(shipped_kv), Cache::bytes_per_token, block_size,
        Cache::bytes_per_block, kv_transfer_header_bytes);
    checks.expect(
        static_cast<double>(Cache::bytes_per_token) == smollm2.kv_bytes_per_token(shipped_kv),
        "a cache token holds exactly the formula's bytes");
    checks.expect(engine.cache().live_sequences() == 0, "the prefill side releases every request");
    checks.expect(engine.cache().used_blocks() == engine.cache().prefix_only_blocks(),
                  "the prefill side holds only prefix-cache blocks afterwards");
    prefill.shutdown();

    // Colocated serving: one engine of the same type, the same requests.
    ServingEngine colocated = make_engine(model_path, 4 * prefill_cache_blocks, true);
    std::vector<GenerationRequest> same;
    for (Routed const& r : requests) same.push_back(r.request);
    std::vector<Completion> const reference = colocated.generate(std::move(same));
    int stopped_on_token = 0, handed_off = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        std::string const which = "request " + std::to_string(requests[i].id);
        Heard const& h = heard[i];
        checks.expect(h.finishes == 1, which + ": finished exactly once");
        checks.expect(h.error.empty(), which + ": no error, got '" + h.error + "'");
        checks.expect(h.tokens == reference[i].tokens,
                      which + ": disaggregated [" + tokens_text(h.tokens) + "], colocated [" +
                          tokens_text(reference[i].tokens) + "]");
        checks.expect(h.text == reference[i].text, which + ": the same text streamed");
        checks.expect(h.finish == reference[i].finish, which + ": finish reason");
        stopped_on_token += h.finish == FinishReason::stop_token;
        handed_off += h.tokens.size() >= 2;
        std::printf("request %llu: %zu tokens (%s) [%s]\n",
                    static_cast<unsigned long long>(requests[i].id), h.tokens.size(),
                    h.finish ? std::string(name_of(*h.finish)).c_str() : "none",
                    tokens_text(h.tokens).c_str());
    }
    checks.expect(stopped_on_token >= 1, "a request ended on its stop token");
    checks.expect(handed_off < static_cast<int>(requests.size()),
                  "a request ended at its first token, on the prefill side");
    std::fflush(stdout);
}

void run_decode(testing::mpi::Checks& checks, CountingCommunicator<MpiCommunicator>& comm,
                char const* model_path, std::vector<Routed> const& requests) {
    ServingEngine engine = make_engine(model_path, decode_cache_blocks, /*prefix_caching=*/false);
    DecodeRole decode(engine, comm, {.peer = prefill_rank});
    decode.serve();
    checks.expect(decode.refusals().size() == 2, "the two malformed hand-offs were refused");
    auto const& summary = engine.metrics().summary();
    std::printf("decode: %d adopted, %lld steps, peak KV usage %.2f, %lld preemptions\n",
                decode.adopted(), static_cast<long long>(summary.steps), summary.peak_kv_usage,
                static_cast<long long>(summary.preemptions));
    std::fflush(stdout);
    // Every request but those ending at their first token (rank 0 counts them exactly).
    checks.expect(decode.adopted() >= static_cast<int>(requests.size()) - 2,
                  "the decode engine adopted the hand-offs");
    checks.expect(summary.peak_kv_usage > 0.75, "the decode cache filled up");
    checks.expect(engine.cache().live_sequences() == 0 && engine.cache().used_blocks() == 0,
                  "the decode side frees every block");
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(
        argc, argv, "disagg_mpi_test",
        [](testing::mpi::Checks& checks) {
            std::uint64_t const seed = testing::mpi::shared_seed();
            MpiCommunicator mpi;
            if (!checks.expect(mpi.size() == 2, "needs a prefill rank and a decode rank")) return;
            CountingCommunicator comm(mpi);

            char const* model_path = std::getenv("TINFER_MODEL_PATH");
            if (!model_path) throw Error("TINFER_MODEL_PATH is not set");
            auto const golden = testing::load_golden_logits(TINFER_GOLDEN_LOGITS);
            std::vector<Routed> const requests = make_requests(golden, seed);

            if (comm.rank() == prefill_rank) {
                run_prefill(checks, comm, model_path, requests);
            } else {
                run_decode(checks, comm, model_path, requests);
            }
            comm.barrier();
        },
        MPI_THREAD_MULTIPLE);  // PrefillRole receives on a thread of its own
}
