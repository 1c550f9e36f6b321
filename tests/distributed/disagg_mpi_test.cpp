// Prefill/decode disaggregation on the real model (SmolLM2-135M-Instruct), two processes:
// rank 0 runs PrefillWorker, rank 1 runs DecodeWorker, and
//  - every request (the golden prompts greedy; sampled ones with fresh seeds, penalties and
//    filters; prompts repeated so the prefill side takes blocks from its prefix cache; a
//    request that ends at its first token; one that ends on a stop token) generates token for
//    token what colocated serving generates: one process, the same cache type, the whole prompt
//    in one forward call, one request at a time (computed on rank 1, independently of
//    the workers);
//  - the bytes each request puts on the wire, counted by a communicator wrapper and not by the
//    workers, are the 66-byte header plus ceil(tokens / block) whole blocks; compared with the
//    KV-size formula tokens x kv_bytes_per_token, the difference is the unused part of the last
//    block, always less than one block;
//  - a transfer whose codec or block size differs from the decode cache's is refused with a
//    KvLayoutMismatch naming the field, and the transfers behind it still arrive intact;
//  - neither cache leaks a block.
// Few generated tokens per request keep it under a minute on two cores.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include <tinfer/config/presets.hpp>
#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>

#include "../reference/golden_logits.hpp"
#include "mpi_testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;

namespace {

constexpr ModelConfig smollm2 = presets::smollm2_135m;
using Model = Llama<smollm2>;
constexpr int block_size = 16;
using Cache = kv::PagedKvCache<smollm2, block_size, kv::Bf16Codec>;
// The formula's view of this cache: the model's shape with bf16 K and V.
constexpr ModelConfig shipped_shape = with_kv(smollm2, DType::bf16);
constexpr int prefill_rank = 0;
constexpr int decode_rank = 1;
constexpr int threads_per_rank = 1;  // two ranks on two cores
// Smaller than the long prompts, so their prefill runs in several chunks that straddle blocks.
constexpr int prefill_chunk_tokens = 48;
constexpr int decode_batch = 4;
// The decode cache holds the longest golden request and a mid-sized one, not every request at
// once: later transfers must wait for finished requests' blocks.
constexpr int decode_cache_blocks = 40;
constexpr std::size_t prefill_cache_bytes = 64 * Cache::bytes_per_block;

// Counts what goes through a communicator, so the test measures the wire itself rather than
// trusting the workers' own accounting.
template <Communicator Inner>
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
        bytes_sent += bytes.size();
        inner_->send(bytes, to, tag);
    }
    void recv(std::span<std::byte> bytes, int from, int tag) {
        inner_->recv(bytes, from, tag);
        bytes_received += bytes.size();
    }
    void barrier() { inner_->barrier(); }

    std::size_t bytes_sent = 0;
    std::size_t bytes_received = 0;

  private:
    Inner* inner_;
};

struct Expected {
    std::vector<std::int32_t> tokens;
    FinishReason finish = FinishReason::length;
    std::vector<float> prompt_kv;  // [layers][K, V][kv_heads][prompt][head_dim], decoded
};

// A sequence's K and V for its first `tokens` positions, every layer and head, as the cache
// decodes them.
std::vector<float> kv_of(Cache const& cache, int seq, int tokens) {
    std::size_t const per_head = static_cast<std::size_t>(tokens) * smollm2.head_dim;
    std::vector<float> out(static_cast<std::size_t>(smollm2.layers) * 2 * smollm2.kv_heads *
                           per_head);
    float* next = out.data();
    for (int layer = 0; layer < smollm2.layers; ++layer) {
        auto const view = cache.view(seq, layer);
        for (int h = 0; h < smollm2.kv_heads; ++h, next += per_head) {
            view.load_keys(h, 0, tokens, next);
        }
        for (int h = 0; h < smollm2.kv_heads; ++h, next += per_head) {
            view.load_values(h, 0, tokens, next);
        }
    }
    return out;
}

// Colocated serving, written here without the workers: one request alone in a cache of the
// same type, the whole prompt in one forward call, then one token per step.
// A request as the router hands it to both workers: its id and the library's request.
struct Routed {
    std::uint64_t id;
    GenerationRequest request;
};

Expected generate_colocated(Model const& model, Routed const& routed) {
    GenerationRequest const& request = routed.request;
    std::vector<std::int32_t> const& prompt = request.prompt_tokens;
    Cache cache(static_cast<std::size_t>(Cache::blocks_for(kv_positions_of(request))) *
                Cache::bytes_per_block);
    int const n = static_cast<int>(prompt.size());
    int const seq = cache.admit(kv_positions_of(request));
    Model::Workspace workspace(n, threads_per_rank);
    kernels::SamplingWorkspace sampling(smollm2.vocab);
    std::vector<float> logits(smollm2.vocab);
    Expected out;
    if (!cache.reserve(seq, n)) throw Error("reference: no room for the prompt");
    SequenceChunk const prefill{.slot = seq, .first_position = 0, .tokens = prompt};
    model.forward(std::span(&prefill, 1), cache, workspace, logits);
    out.prompt_kv = kv_of(cache, seq, n);
    for (;;) {
        kernels::TokenHistory const history{prompt, out.tokens};
        auto const step = static_cast<std::uint32_t>(out.tokens.size());
        out.tokens.push_back(
            kernels::sample_token(logits, request.sampling, history, routed.id, step, sampling)
                .token);
        if (std::ranges::find(request.stop_token_ids, out.tokens.back()) !=
            request.stop_token_ids.end()) {
            out.finish = FinishReason::stop_token;
            return out;
        }
        if (static_cast<int>(out.tokens.size()) == request.max_tokens) return out;
        int const position = n + static_cast<int>(out.tokens.size()) - 1;
        if (!cache.reserve(seq, position + 1)) throw Error("reference: no room to decode");
        SequenceChunk const decode{
            .slot = seq, .first_position = position, .tokens = std::span(&out.tokens.back(), 1)};
        model.forward(std::span(&decode, 1), cache, workspace, logits);
    }
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
                 Model const& model, std::vector<Routed> const& requests) {
    for (KvTransferHeader const& bad : mismatched_headers(requests.front())) {
        std::vector<std::byte> const payload(bad.payload_bytes());
        send_kv(comm, bad, payload, decode_rank, default_kv_transfer_tag);
    }

    Cache cache(prefill_cache_bytes);
    PrefillWorker prefill(model, cache, comm,
                          {.decode_rank = decode_rank,
                           .chunk_tokens = prefill_chunk_tokens,
                           .threads = threads_per_rank});
    std::printf("%8s %7s %7s %7s %10s %12s %10s %9s\n", "request", "tokens", "cached", "blocks",
                "shipped", "formula", "padding", "overhead");
    std::vector<std::vector<std::int32_t>> seen_prompts;
    for (Routed const& routed : requests) {
        std::size_t const sent_before = comm.bytes_sent;
        PrefillReport const report = prefill.serve(routed.id, routed.request);
        std::size_t const shipped = comm.bytes_sent - sent_before;
        std::vector<std::int32_t> const& prompt = routed.request.prompt_tokens;

        int const n = static_cast<int>(prompt.size());
        std::size_t const blocks = static_cast<std::size_t>(Cache::blocks_for(n));
        std::size_t const payload = blocks * Cache::bytes_per_block;
        double const formula = shipped_shape.kv_bytes(n);
        std::string const which = "request " + std::to_string(routed.id);
        checks.expect(shipped == kv_transfer_header_bytes + payload,
                      which + ": " + std::to_string(shipped) + " bytes on the wire, expected " +
                          std::to_string(kv_transfer_header_bytes) + " + " +
                          std::to_string(blocks) + " blocks x " +
                          std::to_string(Cache::bytes_per_block));
        checks.expect(report.bytes_shipped == shipped, which + ": the worker's own byte count");
        checks.expect(report.tokens == n, which + ": every prompt position shipped");
        double const padding = static_cast<double>(payload) - formula;
        checks.expect(padding >= 0 && padding < static_cast<double>(Cache::bytes_per_block) &&
                          (n % block_size != 0 || padding == 0),
                      which +
                          ": the payload exceeds tokens x kv_bytes_per_token by the unused "
                          "slots of the last block only");
        // A prompt seen before starts from its cached full blocks (one position is always
        // recomputed, for the logits).
        bool const repeated = std::ranges::find(seen_prompts, prompt) != seen_prompts.end();
        int const cacheable = (n - 1) / block_size * block_size;
        checks.expect(report.cached_tokens == (repeated ? cacheable : 0),
                      which + ": " + std::to_string(report.cached_tokens) +
                          " prompt tokens from the prefix cache, expected " +
                          std::to_string(repeated ? cacheable : 0));
        seen_prompts.push_back(prompt);
        std::printf("%8llu %7d %7d %7zu %10zu %12.0f %10.0f %8.2f%%\n",
                    static_cast<unsigned long long>(routed.id), n, report.cached_tokens, blocks,
                    shipped, formula, padding + kv_transfer_header_bytes,
                    100.0 * (static_cast<double>(shipped) - formula) / formula);
    }
    std::printf(
        "KV bytes per token %.0f (formula) = %zu (cache); block of %d tokens = %zu bytes; "
        "header %zu bytes\n",
        shipped_shape.kv_bytes_per_token(), Cache::bytes_per_token, block_size,
        Cache::bytes_per_block, kv_transfer_header_bytes);
    std::fflush(stdout);
    checks.expect(static_cast<double>(Cache::bytes_per_token) == shipped_shape.kv_bytes_per_token(),
                  "a cache token holds exactly the formula's bytes");
    checks.expect(cache.live_sequences() == 0, "the prefill side releases every request");
    checks.expect(cache.used_blocks() == cache.prefix_cache().evictable_blocks(cache.pool()),
                  "the prefill side holds only prefix-cache blocks afterwards");
}

// The first requests are stepped here one decode step at a time, so the test can read each
// one's KV out of the decode cache while it runs; the rest go through run_until_idle.
constexpr std::size_t stepped_requests = 5;

void run_decode(testing::mpi::Checks& checks, CountingCommunicator<MpiCommunicator>& comm,
                Model const& model, std::vector<Routed> const& requests) {
    std::vector<Expected> colocated;
    for (Routed const& r : requests) colocated.push_back(generate_colocated(model, r));

    Cache cache(decode_cache_blocks * Cache::bytes_per_block);
    DecodeWorker decode(
        model, cache, comm,
        {.prefill_rank = prefill_rank, .max_batch = decode_batch, .threads = threads_per_rank});
    for (std::size_t i = 0; i < stepped_requests; ++i)
        decode.expect(requests[i].id, requests[i].request);

    // The refused transfers come first; each must name what differs.
    std::vector<std::string> const must_name = {"key codec id", "block_size 32, this cache has 16"};
    for (std::string const& field : must_name) {
        std::string error;
        try {
            decode.receive();
        } catch (KvLayoutMismatch const& e) {
            error = e.what();
        }
        checks.expect(
            error.find(field) != std::string::npos &&
                (field != "key codec id" || error.find("bf16") != std::string::npos),
            "a mismatched transfer is refused naming '" + field + "': got '" + error + "'");
    }
    checks.expect(decode.expected() == static_cast<int>(stepped_requests) &&
                      decode.running() == 0 && decode.waiting() == 0,
                  "refused transfers admit nothing");
    std::size_t const received_before = comm.bytes_received;

    // Stepped by hand: while a request runs, its prompt KV in the decode cache must be bitwise
    // what colocated prefill wrote (adopted, not recomputed or altered).
    std::vector<Completion> completions;
    std::vector<bool> kv_checked(stepped_requests, false);
    constexpr int step_limit = 1000;  // far more than the requests need: a stuck loop fails
    for (int steps = 0; decode.expected() + decode.running() + decode.waiting() > 0; ++steps) {
        if (!checks.expect(steps < step_limit, "the stepped decode loop finishes")) return;
        while (decode.expected() > 0 && decode.running() + decode.waiting() < decode_batch) {
            // Each receive takes one expected transfer: a loop that took none would spin here.
            int const expected_before = decode.expected();
            decode.receive();
            if (!checks.expect(decode.expected() < expected_before,
                               "a receive takes one of the expected transfers"))
                return;
        }
        for (std::size_t i = 0; i < stepped_requests; ++i) {
            auto const seq = decode.sequence_of(requests[i].id);
            if (!seq || kv_checked[i]) continue;
            kv_checked[i] = true;
            int const n = static_cast<int>(requests[i].request.prompt_tokens.size());
            checks.expect(kv_of(cache, *seq, n) == colocated[i].prompt_kv,
                          "request " + std::to_string(requests[i].id) +
                              ": the decode cache holds colocated prefill's KV, bitwise");
        }
        std::ranges::move(decode.step(), std::back_inserter(completions));
    }
    for (std::size_t i = 0; i < stepped_requests; ++i) {
        auto const found =
            std::ranges::find(completions, sched::RequestId{requests[i].id}, &Completion::id);
        // Admitted inside a step, a request has two tokens after it; a third means it was
        // running when the loop looked.
        if (found != completions.end() && found->tokens.size() >= 3) {
            checks.expect(kv_checked[i], "request " + std::to_string(requests[i].id) +
                                             ": KV compared while it ran");
        }
    }

    for (std::size_t i = stepped_requests; i < requests.size(); ++i)
        decode.expect(requests[i].id, requests[i].request);
    std::ranges::move(decode.run_until_idle(), std::back_inserter(completions));

    checks.expect(completions.size() == requests.size(), "every request finishes exactly once");
    std::size_t wire_bytes = 0;
    int stopped_on_token = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        std::uint64_t const id = requests[i].id;
        auto const found = std::ranges::find(completions, sched::RequestId{id}, &Completion::id);
        std::string const which = "request " + std::to_string(id);
        if (!checks.expect(found != completions.end(), which + " completed")) continue;
        checks.expect(found->tokens == colocated[i].tokens,
                      which + ": disaggregated [" + tokens_text(found->tokens) + "], colocated [" +
                          tokens_text(colocated[i].tokens) + "]");
        checks.expect(found->finish == colocated[i].finish, which + ": finish reason");
        int const n = static_cast<int>(requests[i].request.prompt_tokens.size());
        checks.expect(found->handoff.transferred_tokens == n, which + ": positions received");
        checks.expect(
            found->handoff.bytes_received ==
                kv_transfer_header_bytes +
                    static_cast<std::size_t>(Cache::blocks_for(n)) * Cache::bytes_per_block,
            which + ": bytes received");
        wire_bytes += found->handoff.bytes_received;
        stopped_on_token += found->finish == FinishReason::stop_token;
        std::printf("request %llu: %zu tokens (%s) [%s]\n", static_cast<unsigned long long>(id),
                    found->tokens.size(), std::string(name_of(found->finish)).c_str(),
                    tokens_text(found->tokens).c_str());
    }
    checks.expect(comm.bytes_received - received_before == wire_bytes,
                  "the wire carried exactly the completions' bytes");
    checks.expect(stopped_on_token >= 1, "a request ended on its stop token");
    auto const& stats = decode.stats();
    std::printf(
        "decode: %d steps, %lld rows, peak batch %d, %d delayed admissions, KV of %d "
        "requests compared\n",
        stats.steps, static_cast<long long>(stats.decoded_rows), stats.peak_batch,
        stats.delayed_admissions, static_cast<int>(std::ranges::count(kv_checked, true)));
    std::fflush(stdout);
    checks.expect(stats.peak_batch >= 2, "requests decoded in one batch");
    checks.expect(stats.delayed_admissions >= 1,
                  "a transfer waited for room (the decode cache is smaller than the load)");
    checks.expect(cache.live_sequences() == 0 && cache.used_blocks() == 0,
                  "the decode side frees every block");
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "disagg_mpi_test", [](testing::mpi::Checks& checks) {
        std::uint64_t const seed = testing::mpi::shared_seed();
        MpiCommunicator mpi;
        if (!checks.expect(mpi.size() == 2, "needs a prefill rank and a decode rank")) return;
        CountingCommunicator comm(mpi);

        char const* model_path = std::getenv("TINFER_MODEL_PATH");
        if (!model_path) throw Error("TINFER_MODEL_PATH is not set");
        auto const file = gguf::File::open(model_path);
        auto const model = Model::bind(file);
        auto const golden = testing::load_golden_logits(TINFER_GOLDEN_LOGITS);
        std::vector<Routed> const requests = make_requests(golden, seed);

        if (comm.rank() == prefill_rank) {
            run_prefill(checks, comm, model, requests);
        } else {
            run_decode(checks, comm, model, requests);
        }
        comm.barrier();
    });
}
