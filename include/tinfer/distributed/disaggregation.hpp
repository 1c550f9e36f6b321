#pragma once
// Prefill/decode disaggregation: a prefill worker turns prompts into KV blocks and the first
// output token, ships them to a decode worker, and forgets the request; the decode worker adopts
// the blocks into its own paged cache as they are (no recompute) and continues generation,
// batching every request it holds into one forward step.
//
// Who knows what. A router (the caller) hands the same GenerationRequest (engine/request.hpp,
// the library's one request model, with prompt_tokens: the workers hold no tokenizer) and the
// same id to both workers, as vLLM's and SGLang's disaggregation proxies do, so the KV transport
// carries only what the prefill computed: a KvTransferHeader (block layout, token count, first
// sampled token) and the blocks. The decode worker needs the prompt for the sampler's
// penalties, the sampling settings and the limits; it matches an arriving transfer to its
// request by id. Both check a request against the engine's RequestLimits and stop it with the
// engine's token-level stop rule (token_finish_reason), so a request means the same here as in
// the Engine.
//
// Same tokens as colocated serving. The sampler's draw for a request's step k depends only on
// the logits, the settings and (seed, request id, k); the forward pass is batch- and
// chunk-invariant (model/llama.hpp), and the decode cache holds bitwise the bytes the prefill
// cache wrote. So a request generates exactly the tokens it would in one process with the same
// cache type, whatever else shares its batch.
//
// Transport. Everything goes through the Communicator concept (send_kv / recv_kv_header /
// recv_kv_payload on one peer and tag), so NCCL can replace MPI; PagedKvCache exports into host
// memory, so the communicator's Backend must be Host until a device cache exports into device
// memory.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tinfer/core/backend.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/communicator.hpp>
#include <tinfer/distributed/kv_transfer.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/engine/stop_conditions.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>

namespace tinfer::distributed {

// The tag hand-offs use unless the workers are told otherwise ("KV" in ASCII).
inline constexpr int default_kv_transfer_tag = 0x4b56;

// The limits a worker checks a request against: the engine's rules, for a model of shape Cfg
// and a cache of `cache_blocks` blocks (0: no cache limit), without drafts or stop strings.
template <ModelConfig Cfg, class Cache>
RequestLimits worker_limits(int cache_blocks) {
    std::int64_t max_cached = 0;
    if (cache_blocks > 0) {
        // The largest prompt + max_tokens whose KV positions fit (no sliding window here).
        max_cached =
            static_cast<std::int64_t>(cache_blocks / Cache::group_count) * Cache::block_size + 1;
    }
    return {.vocab = Cfg.vocab,
            .max_context = Cfg.max_context,
            .max_cached_tokens = max_cached,
            .max_draft_tokens = 0,
            .speculation_refusal = "disaggregated workers do not speculate",
            .has_tokenizer = false};
}

// KV positions a request ever writes (engine/request.hpp's rule).
inline int kv_positions_of(GenerationRequest const& request) {
    return static_cast<int>(
        tinfer::kv_positions_of(request.prompt_tokens.size(), request.max_tokens));
}

// A request either worker could never serve is refused before any work (tinfer::RequestError,
// naming the request).
inline void validate_routed(std::uint64_t id, GenerationRequest const& request,
                            RequestLimits const& limits) {
    try {
        if (request.prompt_tokens.empty() && (!request.prompt.empty() || !request.messages.empty()))
            throw RequestError("disaggregated workers take prompt_tokens (they hold no tokenizer)");
        validate_request(request, request.prompt_tokens, limits);
    } catch (RequestError const& e) {
        throw RequestError("request " + std::to_string(id) + ": " + e.what());
    }
}

// ---- the block layout a cache type ships and accepts ----

// What a KvTransferHeader must say for a payload to be copied verbatim into a cache of type
// Cache: its block size, the model's layers, KV heads and head_dim, and the two codecs.
template <class Cache>
struct KvBlockLayout;

template <ModelConfig Cfg, int BlockSize, class KCodec, class VCodec>
struct KvBlockLayout<kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>> {
    using Cache = kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>;
    static constexpr std::string_view key_codec_name = KCodec::name;
    static constexpr std::string_view value_codec_name = VCodec::name;

    // The header of a transfer of `tokens` positions of this cache, KV heads first_kv_head ..
    // first_kv_head + Cfg.kv_heads - 1 (0 unless the cache is one tensor-parallel rank's).
    static KvTransferHeader header(std::uint64_t request_id, int tokens, std::int32_t first_token,
                                   int first_kv_head = 0) {
        KvTransferHeader h;
        h.request_id = request_id;
        h.tokens = static_cast<std::uint32_t>(tokens);
        h.block_size = static_cast<std::uint32_t>(BlockSize);
        h.layers = static_cast<std::uint32_t>(Cfg.layers);
        h.first_kv_head = static_cast<std::uint32_t>(first_kv_head);
        h.kv_heads = static_cast<std::uint32_t>(Cfg.kv_heads);
        h.head_dim = static_cast<std::uint32_t>(Cfg.head_dim);
        h.key_codec = codec_id(key_codec_name);
        h.value_codec = codec_id(value_codec_name);
        h.key_vector_bytes = static_cast<std::uint32_t>(Cache::key_vector_bytes);
        h.value_vector_bytes = static_cast<std::uint32_t>(Cache::value_vector_bytes);
        h.first_token = first_token;
        return h;
    }
    // The payload's block layout must be exactly the cache's block storage.
    static_assert(
        Cache::bytes_per_block == static_cast<std::size_t>(Cfg.layers) * Cfg.kv_heads * BlockSize *
                                      (Cache::key_vector_bytes + Cache::value_vector_bytes),
        "distributed::KvBlockLayout ships blocks holding every layer: a shape with sliding "
        "and global layers (a hybrid cache of several layer groups) is not supported "
        "by disaggregation yet");
};

// A transfer whose blocks are not laid out as this side's cache lays them out: reading them
// would silently decode garbage, so it is refused, naming every field that differs.
struct KvLayoutMismatch : KvTransferError {
    using KvTransferError::KvTransferError;
};

namespace disaggregation_detail {

inline std::string hex(std::uint32_t value) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

}  // namespace disaggregation_detail

// Throws KvLayoutMismatch unless `received` describes blocks this cache type stores verbatim.
template <class Cache>
void require_matching_layout(KvTransferHeader const& received, int first_kv_head = 0) {
    using Layout = KvBlockLayout<Cache>;
    using disaggregation_detail::hex;
    KvTransferHeader const ours =
        Layout::header(received.request_id, static_cast<int>(received.tokens), received.first_token,
                       first_kv_head);
    std::string differences;
    auto const compare = [&](std::string_view field, std::uint32_t got, std::uint32_t expected,
                             std::string const& shown_got, std::string const& shown_expected) {
        if (got == expected) return;
        differences += (differences.empty() ? "" : "; ") + std::string(field) + " " + shown_got +
                       ", this cache has " + shown_expected;
    };
    auto const number = [&](std::string_view field, std::uint32_t got, std::uint32_t expected) {
        compare(field, got, expected, std::to_string(got), std::to_string(expected));
    };
    auto const codec = [&](std::string_view field, std::uint32_t got, std::uint32_t expected,
                           std::string_view name) {
        compare(field, got, expected, "id " + hex(got),
                std::string(name) + " (id " + hex(expected) + ")");
    };
    number("block_size", received.block_size, ours.block_size);
    number("layers", received.layers, ours.layers);
    number("first_kv_head", received.first_kv_head, ours.first_kv_head);
    number("kv_heads", received.kv_heads, ours.kv_heads);
    number("head_dim", received.head_dim, ours.head_dim);
    codec("key codec", received.key_codec, ours.key_codec, Layout::key_codec_name);
    codec("value codec", received.value_codec, ours.value_codec, Layout::value_codec_name);
    number("key vector bytes", received.key_vector_bytes, ours.key_vector_bytes);
    number("value vector bytes", received.value_vector_bytes, ours.value_vector_bytes);
    if (!differences.empty()) {
        throw KvLayoutMismatch("KV transfer of request " + std::to_string(received.request_id) +
                               " does not match this cache's block layout: " + differences);
    }
}

// ---- workers ----

namespace disaggregation_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

template <class Model, class Cache, class Comm>
constexpr void check_worker_types() {
    static_assert(kv::KvStore<Cache>, "Cache must satisfy kv::KvStore");
    static_assert(Model::config.layers == Cache::config.layers &&
                      Model::config.kv_heads == Cache::config.kv_heads &&
                      Model::config.head_dim == Cache::config.head_dim,
                  "Cache must be a cache for Model's shape (layers, kv_heads, head_dim)");
    static_assert(std::same_as<typename Comm::Backend, Host>,
                  "PagedKvCache exports its blocks into host memory: the Communicator's Backend "
                  "must be Host");
}

}  // namespace disaggregation_detail

struct PrefillOptions {
    int decode_rank = 1;
    int tag = default_kv_transfer_tag;
    int chunk_tokens = 512;  // most prompt tokens in one forward call (workspace rows)
    int threads = 1;
    int first_kv_head = 0;       // of this rank's cache, under tensor parallelism
    bool reuse_prefixes = true;  // skip prompt blocks the prefix cache already holds
};

// What one prefill did and shipped.
struct PrefillReport {
    std::uint64_t request_id = 0;
    std::int32_t first_token = -1;
    int tokens = 0;                 // prompt positions shipped
    int cached_tokens = 0;          // of which the prefix cache supplied (not recomputed)
    std::size_t bytes_shipped = 0;  // header + payload
    double prefill_seconds = 0;     // admission to first token
    double transfer_seconds = 0;    // export and send
};

// Prefills one request at a time over its own paged cache and hands the result to one decode
// rank. The cache holds a request only while it is being prefilled (and, with reuse_prefixes,
// full prompt blocks for later prompts that share them).
template <class Model, class Cache, Communicator Comm>
class PrefillWorker {
    static constexpr ModelConfig Cfg = Model::config;

  public:
    PrefillWorker(Model const& model, Cache& cache, Comm& comm, PrefillOptions options)
        : model_(&model),
          cache_(&cache),
          comm_(&comm),
          options_(options),
          workspace_(options.chunk_tokens, options.threads),
          sampling_workspace_(Cfg.vocab),
          logits_(static_cast<std::size_t>(Cfg.vocab)) {
        disaggregation_detail::check_worker_types<Model, Cache, Comm>();
    }

    // Prefills request `id`, samples its first token, and sends header and blocks to the
    // decode rank (blocking until the communicator may reuse the buffer).
    PrefillReport serve(std::uint64_t id, GenerationRequest const& request) {
        using namespace disaggregation_detail;
        validate_routed(id, request, worker_limits<Cfg, Cache>(0));
        auto const start = Clock::now();
        std::vector<std::int32_t> const& prompt = request.prompt_tokens;
        int const prompt_tokens = static_cast<int>(prompt.size());
        kv::Admission const admission = options_.reuse_prefixes
                                            ? cache_->admit(prompt, prompt_tokens)
                                            : kv::Admission{cache_->admit(prompt_tokens), 0};
        SequenceGuard const sequence{*cache_, admission.seq};

        for (int first = admission.cached_tokens; first < prompt_tokens;
             first += options_.chunk_tokens) {
            int const count = std::min(options_.chunk_tokens, prompt_tokens - first);
            if (!cache_->reserve(sequence.seq, first + count)) {
                // Only this sequence is live and admit() checked the pool holds the prompt.
                throw Error("PrefillWorker: the KV cache could not supply blocks for request " +
                            std::to_string(id) + "'s positions up to " +
                            std::to_string(first + count));
            }
            SequenceChunk const chunk{
                .slot = sequence.seq,
                .first_position = first,
                .tokens = std::span(prompt).subspan(static_cast<std::size_t>(first),
                                                    static_cast<std::size_t>(count))};
            model_->forward(std::span(&chunk, 1), *cache_, workspace_, logits_);
        }
        if (options_.reuse_prefixes) cache_->cache_prefix(sequence.seq, prompt);

        kernels::TokenHistory const history{prompt, {}};
        std::int32_t const first_token = kernels::sample_token(logits_, request.sampling, history,
                                                               id, /*step=*/0, sampling_workspace_)
                                             .token;
        double const prefill_seconds = seconds_since(start);

        auto const transfer_start = Clock::now();
        payload_.clear();
        int const tokens = cache_->export_blocks(sequence.seq, payload_);
        if (tokens != prompt_tokens) {
            throw Error("PrefillWorker: request " + std::to_string(id) + " has " +
                        std::to_string(tokens) + " positions in every layer after prefilling " +
                        std::to_string(prompt_tokens));
        }
        KvTransferHeader const header =
            KvBlockLayout<Cache>::header(id, tokens, first_token, options_.first_kv_head);
        send_kv(*comm_, header, payload_, options_.decode_rank, options_.tag);
        return {.request_id = id,
                .first_token = first_token,
                .tokens = tokens,
                .cached_tokens = admission.cached_tokens,
                .bytes_shipped = kv_transfer_header_bytes + payload_.size(),
                .prefill_seconds = prefill_seconds,
                .transfer_seconds = seconds_since(transfer_start)};
    }

  private:
    // The sequence goes back to the pool however serve() leaves.
    struct SequenceGuard {
        Cache& cache;
        int seq;
        SequenceGuard(Cache& c, int s) : cache(c), seq(s) {}
        SequenceGuard(SequenceGuard const&) = delete;
        SequenceGuard& operator=(SequenceGuard const&) = delete;
        ~SequenceGuard() { cache.release(seq); }
    };

    Model const* model_;
    Cache* cache_;
    Comm* comm_;
    PrefillOptions options_;
    typename Model::Workspace workspace_;
    kernels::SamplingWorkspace sampling_workspace_;
    std::vector<float> logits_;       // [vocab]: the prompt's last position
    std::vector<std::byte> payload_;  // reused: one request's blocks
};

struct DecodeOptions {
    int prefill_rank = 0;
    int tag = default_kv_transfer_tag;
    int max_batch = 8;  // most requests in one decode step (workspace rows)
    int threads = 1;
    int first_kv_head = 0;  // of this rank's cache, under tensor parallelism
    // The model's end-of-generation tokens (Tokenizer::end_of_generation), which finish a
    // request as EOS does unless it sets ignore_eos; empty: only stop_token_ids and length.
    std::vector<std::int32_t> end_of_generation;
};

// Decode-loop counters.
struct DecodeStats {
    int steps = 0;                  // forward calls
    std::int64_t decoded_rows = 0;  // tokens fed, all requests together
    int peak_batch = 0;             // most requests in one step
    int delayed_admissions = 0;     // transfers that had to wait for room in cache or batch
    double forward_seconds = 0;     // inside forward calls and sampling
};

// Receives hand-offs from one prefill rank and decodes every request it holds in one batched
// forward step at a time; returns tinfer::Completion (tokens generated, the prefill worker's
// first token first; `handoff` says what crossed the wire; no text: no tokenizer here). A request
// is admitted with blocks for its whole length (kv_positions_of), so the decode loop never runs out
// of KV mid-request; a transfer that arrives while the cache is full waits in host memory, in
// arrival order.
template <class Model, class Cache, Communicator Comm>
class DecodeWorker {
    static constexpr ModelConfig Cfg = Model::config;
    using Clock = disaggregation_detail::Clock;

  public:
    DecodeWorker(Model const& model, Cache& cache, Comm& comm, DecodeOptions options)
        : model_(&model),
          cache_(&cache),
          comm_(&comm),
          options_(options),
          workspace_(options.max_batch, options.threads),
          sampling_workspace_(Cfg.vocab),
          logits_(static_cast<std::size_t>(options.max_batch) * Cfg.vocab) {
        disaggregation_detail::check_worker_types<Model, Cache, Comm>();
        chunks_.reserve(static_cast<std::size_t>(options.max_batch));
    }

    // The router announces request `id`, whose KV the prefill rank will send. A request the
    // decode cache can never hold is refused now rather than after its KV has crossed the
    // network.
    void expect(std::uint64_t id, GenerationRequest request) {
        validate_routed(id, request, worker_limits<Cfg, Cache>(cache_->total_blocks()));
        if (expected_.contains(id) || is_held(id)) {
            throw RequestError("request id " + std::to_string(id) + " is already in flight");
        }
        expected_.emplace(id, Routed{id, std::move(request)});
    }

    // Receives the next hand-off from the prefill rank (blocking) and admits it, or keeps it
    // until the cache has room. A transfer that does not fit this cache's layout, or belongs to
    // no expected request, is refused (KvLayoutMismatch, KvTransferError) after its payload has
    // been drained, so the channel stays in step for the transfers behind it.
    void receive() {
        KvTransferHeader const header = recv_kv_header(*comm_, options_.prefill_rank, options_.tag);
        auto const arrived = Clock::now();
        std::vector<std::byte> payload(header.payload_bytes());
        recv_kv_payload(*comm_, header, payload, options_.prefill_rank, options_.tag);
        double const transfer_seconds = disaggregation_detail::seconds_since(arrived);

        require_matching_layout<Cache>(header, options_.first_kv_head);
        auto const found = expected_.find(header.request_id);
        if (found == expected_.end()) {
            throw KvTransferError("KV transfer for request " + std::to_string(header.request_id) +
                                  ", which this decode worker was not told to expect");
        }
        Routed& routed = found->second;
        if (header.tokens != routed.request.prompt_tokens.size()) {
            throw KvTransferError("KV transfer of request " + std::to_string(header.request_id) +
                                  " holds " + std::to_string(header.tokens) +
                                  " positions; its prompt has " +
                                  std::to_string(routed.request.prompt_tokens.size()) + " tokens");
        }
        if (header.first_token < 0 || header.first_token >= Cfg.vocab) {
            throw KvTransferError("KV transfer of request " + std::to_string(header.request_id) +
                                  ": first token " + std::to_string(header.first_token) +
                                  " is outside the vocabulary of " + std::to_string(Cfg.vocab));
        }

        Held held{.id = routed.id,
                  .request = std::move(routed.request),
                  .output = {header.first_token},
                  .payload = std::move(payload),
                  .transferred_tokens = static_cast<int>(header.tokens),
                  .bytes_received = kv_transfer_header_bytes + header.payload_bytes(),
                  .transfer_seconds = transfer_seconds,
                  .received_at = Clock::now()};
        expected_.erase(found);
        if (auto const reason = finish_reason_after(held)) {
            finished_.push_back(complete(std::move(held), *reason));  // done at its first token
            return;
        }
        if (!waiting_.empty() || !can_admit(held)) stats_.delayed_admissions += 1;
        waiting_.push_back(std::move(held));
        admit_waiting();
    }

    // One decode step: every running request feeds its newest token and samples the next.
    // Returns the requests that finished since the last call (including those finished at
    // their first token).
    std::vector<Completion> step() {
        admit_waiting();
        if (!running_.empty()) decode_running();
        return std::exchange(finished_, {});
    }

    // Receives and decodes until every expected request has finished. Receiving blocks, so a
    // new transfer is taken only while the batch has room for it.
    std::vector<Completion> run_until_idle() {
        std::vector<Completion> done;
        while (!expected_.empty() || !waiting_.empty() || !running_.empty() || !finished_.empty()) {
            while (!expected_.empty() && batch_has_room()) receive();
            if (running_.empty() && !waiting_.empty() && !can_admit(waiting_.front())) {
                throw Error("DecodeWorker: request " + std::to_string(waiting_.front().id) +
                            " cannot be admitted into an idle cache");
            }
            auto finished = step();
            std::ranges::move(finished, std::back_inserter(done));
        }
        return done;
    }

    // The cache sequence holding a running request's KV (to inspect it), or nothing when the
    // request is not running.
    std::optional<int> sequence_of(std::uint64_t request_id) const {
        auto const it = std::ranges::find(running_, request_id, [](Held const& h) { return h.id; });
        return it == running_.end() ? std::nullopt : std::optional<int>(it->seq);
    }

    int running() const { return static_cast<int>(running_.size()); }
    int waiting() const { return static_cast<int>(waiting_.size()); }
    int expected() const { return static_cast<int>(expected_.size()); }
    DecodeStats const& stats() const { return stats_; }

  private:
    struct Routed {
        std::uint64_t id;
        GenerationRequest request;
    };

    // A request from its hand-off to its completion.
    struct Held {
        std::uint64_t id = 0;
        GenerationRequest request;
        std::vector<std::int32_t> output;
        std::vector<std::byte> payload;  // until admitted
        int transferred_tokens = 0;
        std::size_t bytes_received = 0;
        double transfer_seconds = 0;
        Clock::time_point received_at;
        int seq = -1;  // once admitted
    };

    bool batch_has_room() const {
        return running_.size() + waiting_.size() < static_cast<std::size_t>(options_.max_batch);
    }

    bool can_admit(Held const& held) const {
        return running_.size() < static_cast<std::size_t>(options_.max_batch) &&
               Cache::blocks_for(kv_positions_of(held.request)) <= cache_->available_blocks();
    }

    // First come, first admitted: a large request at the head is not overtaken.
    void admit_waiting() {
        while (!waiting_.empty() && can_admit(waiting_.front())) {
            Held held = std::move(waiting_.front());
            waiting_.pop_front();
            int const positions = kv_positions_of(held.request);
            auto const seq =
                cache_->import_blocks(held.payload, held.transferred_tokens, positions);
            if (!seq || !cache_->reserve(*seq, positions)) {
                if (seq) cache_->release(*seq);
                throw std::logic_error("DecodeWorker: the cache refused request " +
                                       std::to_string(held.id) + " after reporting room for it");
            }
            held.seq = *seq;
            held.payload = {};
            running_.push_back(std::move(held));
        }
    }

    void decode_running() {
        auto const start = Clock::now();
        chunks_.clear();
        for (Held const& r : running_) {
            int const position =
                static_cast<int>(r.request.prompt_tokens.size() + r.output.size()) - 1;
            chunks_.push_back({.slot = r.seq,
                               .first_position = position,
                               .tokens = std::span(&r.output.back(), 1)});
        }
        std::span<float> const logits(logits_.data(), running_.size() * Cfg.vocab);
        model_->forward(std::span<SequenceChunk const>(chunks_), *cache_, workspace_, logits);
        for (std::size_t i = 0; i < running_.size(); ++i) {
            Held& r = running_[i];
            kernels::TokenHistory const history{r.request.prompt_tokens, r.output};
            auto const step = static_cast<std::uint32_t>(r.output.size());
            r.output.push_back(kernels::sample_token(logits.subspan(i * Cfg.vocab, Cfg.vocab),
                                                     r.request.sampling, history, r.id, step,
                                                     sampling_workspace_)
                                   .token);
        }
        stats_.steps += 1;
        stats_.decoded_rows += static_cast<std::int64_t>(running_.size());
        stats_.peak_batch = std::max(stats_.peak_batch, static_cast<int>(running_.size()));
        stats_.forward_seconds += disaggregation_detail::seconds_since(start);

        // Finished requests leave the batch and give their blocks back.
        std::size_t kept = 0;
        for (Held& r : running_) {
            if (auto const reason = finish_reason_after(r)) {
                cache_->release(r.seq);
                finished_.push_back(complete(std::move(r), *reason));
            } else {
                if (&running_[kept] != &r) running_[kept] = std::move(r);
                ++kept;
            }
        }
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(kept), running_.end());
    }

    // The engine's token-level stop rule on the newest token.
    std::optional<FinishReason> finish_reason_after(Held const& held) const {
        return token_finish_reason(stop_conditions_of(held.request), held.output.back(),
                                   options_.end_of_generation,
                                   static_cast<int>(held.output.size()));
    }

    static Completion complete(Held&& held, FinishReason reason) {
        return {
            .id = sched::RequestId{held.id},
            .prompt_tokens = std::move(held.request.prompt_tokens),
            .tokens = std::move(held.output),
            .finish = reason,
            .handoff = {.transferred_tokens = held.transferred_tokens,
                        .bytes_received = held.bytes_received,
                        .transfer_seconds = held.transfer_seconds,
                        .decode_seconds = disaggregation_detail::seconds_since(held.received_at)}};
    }

    bool is_held(std::uint64_t id) const {
        auto const has_id = [&](Held const& h) { return h.id == id; };
        return std::ranges::any_of(waiting_, has_id) || std::ranges::any_of(running_, has_id);
    }

    Model const* model_;
    Cache* cache_;
    Comm* comm_;
    DecodeOptions options_;
    typename Model::Workspace workspace_;
    kernels::SamplingWorkspace sampling_workspace_;
    std::vector<float> logits_;  // [max_batch][vocab]
    std::vector<SequenceChunk> chunks_;
    std::map<std::uint64_t, Routed> expected_;  // announced, KV not yet arrived
    std::deque<Held> waiting_;                  // KV arrived, no room yet
    std::vector<Held> running_;                 // in the cache, decoding
    std::vector<Completion> finished_;          // not yet returned by step()
    DecodeStats stats_;
};

}  // namespace tinfer::distributed
