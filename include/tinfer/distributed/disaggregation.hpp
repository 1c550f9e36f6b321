#pragma once
// Prefill/decode disaggregation: two Engines, one per role, joined by a Communicator. The
// prefill-role engine (PrefillRole) runs admission, chunked prefill and the first token's
// sampling and streaming as any engine does, then hands the request off (engine/handoff.hpp):
// its KV blocks, first token and the request go to the decode rank, and the request's callback
// waits here for the tokens that come back. The decode-role engine (DecodeRole) adopts each
// hand-off into its own paged cache as it is (no recompute) and decodes it with the normal
// scheduler and step runner, batched with everything else it holds; each token event goes back
// to the prefill rank, which calls the request's callback. So there is one serving loop, one
// request model and one stop rule: the roles are the engine configured twice.
//
// Same tokens as colocated serving. The sampler's draw for a request's step k depends only on
// the logits, the settings and (seed, k); the forward pass is batch- and chunk-invariant
// (model/llama.hpp), and the decode cache holds bitwise the bytes the prefill cache wrote. So a
// request generates exactly the tokens one Engine would generate for it with the same cache
// type, whatever else shares either side's batch.
//
// Wire (one peer, two tags): prefill -> decode on `tag`: frames (a length, then the bytes:
// hand-off, abort, shutdown), a hand-off frame followed by send_kv()'s header and blocks
// (kv_transfer.hpp); decode -> prefill on `tag + 1`: token-event frames, and a last frame that
// acknowledges the shutdown. Integers little-endian, floats as their bits. A grammar's state
// does not travel: requests with a grammar decode on the prefill rank.
//
// Everything goes through the Communicator concept plus has_message() (a non-blocking probe,
// so a rank steps its engine between messages); PagedKvCache exports into host memory, so the
// communicator's Backend must be Host until a device cache exports into device memory. Every
// call but the prefill side's receiving of events runs on the thread that steps the engine;
// that one runs on a thread of its own (see PrefillRole), so MPI needs MPI_THREAD_MULTIPLE.
#include <array>
#include <bit>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <tinfer/core/backend.hpp>
#include <tinfer/core/communicator.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/distributed/kv_transfer.hpp>
#include <tinfer/distributed/request_wire.hpp>
#include <tinfer/engine/handoff.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/kv/paged_cache.hpp>

namespace tinfer::distributed {

// The tag hand-offs use unless the roles are told otherwise ("KV" in ASCII).
inline constexpr int default_kv_transfer_tag = 0x4b56;

// ---- the block layout a cache type ships and accepts ----

// Whether a cache type's blocks can travel as KvTransferHeader describes them: one block holds
// every layer (a hybrid cache of sliding and global layer groups does not, yet).
template <class Cache>
inline constexpr bool ships_whole_blocks = false;
template <ModelConfig Cfg, int BlockSize, class KCodec, class VCodec>
inline constexpr bool ships_whole_blocks<kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>> =
    kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>::bytes_per_block ==
    static_cast<std::size_t>(Cfg.layers) *
        Cfg.kv_heads* BlockSize*(
            kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>::key_vector_bytes +
            kv::PagedKvCache<Cfg, BlockSize, KCodec, VCodec>::value_vector_bytes);

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
        ships_whole_blocks<Cache>,
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

// ---- the wire: frames of the hand-off protocol ----

namespace wire {

enum class FrameKind : std::uint8_t { handoff = 1, abort = 2, shutdown = 3, event = 4 };

inline void put_event(FrameWriter& out, TokenEvent const& e) {
    out.put(static_cast<std::uint64_t>(e.id));
    out.put(e.token);
    out.put(std::string_view(e.text));
    out.put(e.logprob.has_value());
    out.put(e.logprob.value_or(0.0f));
    out.put(static_cast<std::uint64_t>(e.top_logprobs.size()));
    for (kernels::TokenLogprob const& t : e.top_logprobs) {
        out.put(t.token);
        out.put(t.logprob);
    }
    out.put(e.finish.has_value());
    out.put(static_cast<std::uint8_t>(e.finish.value_or(FinishReason::aborted)));
    out.put(std::string_view(e.error));
    out.put(static_cast<std::int64_t>(e.speculation.rounds));
    out.put(static_cast<std::int64_t>(e.speculation.drafted));
    out.put(static_cast<std::int64_t>(e.speculation.accepted));
    out.put(static_cast<std::int64_t>(e.speculation.tokens_generated));
}

inline TokenEvent take_event(FrameReader& in) {
    TokenEvent e;
    e.id = sched::RequestId{in.take<std::uint64_t>()};
    e.token = in.take<std::int32_t>();
    e.text = in.take_string();
    bool const has_logprob = in.take_bool();
    float const logprob = in.take_float();
    if (has_logprob) e.logprob = logprob;
    e.top_logprobs.resize(in.count(8));
    for (kernels::TokenLogprob& t : e.top_logprobs) {
        t.token = in.take<std::int32_t>();
        t.logprob = in.take_float();
    }
    bool const has_finish = in.take_bool();
    auto const finish = in.take<std::uint8_t>();
    if (finish > static_cast<std::uint8_t>(FinishReason::aborted))
        throw KvTransferError("disaggregation frame: finish reason " + std::to_string(finish));
    if (has_finish) e.finish = static_cast<FinishReason>(finish);
    e.error = in.take_string();
    e.speculation.rounds = static_cast<long>(in.take<std::int64_t>());
    e.speculation.drafted = static_cast<long>(in.take<std::int64_t>());
    e.speculation.accepted = static_cast<long>(in.take<std::int64_t>());
    e.speculation.tokens_generated = static_cast<long>(in.take<std::int64_t>());
    return e;
}

// The most bytes a frame may claim (a prompt of the longest context, stop strings, bias):
// a larger length is a broken peer, refused before anything is allocated.
inline constexpr std::uint64_t max_frame_bytes = std::uint64_t{64} << 20;

template <Communicator C>
void send_frame(C& comm, std::span<std::byte const> frame, int to, int tag) {
    FrameWriter length;
    length.put(static_cast<std::uint64_t>(frame.size()));
    comm.send(length.bytes(), to, tag);
    comm.send(frame, to, tag);
}

template <Communicator C>
std::vector<std::byte> recv_frame(C& comm, int from, int tag) {
    std::array<std::byte, 8> length_bytes;
    comm.recv(length_bytes, from, tag);
    FrameReader length(length_bytes);
    auto const size = length.take<std::uint64_t>();
    if (size > max_frame_bytes)
        throw KvTransferError("disaggregation frame of " + std::to_string(size) +
                              " bytes: more than the " + std::to_string(max_frame_bytes) +
                              " any frame holds");
    std::vector<std::byte> frame(static_cast<std::size_t>(size));
    comm.recv(frame, from, tag);
    return frame;
}

}  // namespace wire

// A communicator a serving loop can poll: has_message(from, tag) says, without blocking,
// whether a receive from `from` on `tag` would find a message (MpiCommunicator: MPI_Iprobe).
template <class C>
concept PollingCommunicator = Communicator<C> && requires(C& comm, int peer, int tag) {
    { comm.has_message(peer, tag) } -> std::convertible_to<bool>;
};

struct RoleOptions {
    int peer = 1;                       // the other role's rank
    int tag = default_kv_transfer_tag;  // and tag + 1 for the way back
};

// Sends one hand-off: its frame (the request), then the KV header and blocks. PrefillRole's
// way to ship, public so a test can put a malformed hand-off on the wire.
template <Communicator C>
void send_handoff(C& comm, std::uint64_t id, GenerationRequest const& request,
                  KvTransferHeader const& header, std::span<std::byte const> blocks, int to,
                  int tag) {
    wire::FrameWriter frame;
    frame.put(static_cast<std::uint8_t>(wire::FrameKind::handoff));
    frame.put(id);
    wire::put_request(frame, request);
    wire::send_frame(comm, frame.bytes(), to, tag);
    send_kv(comm, header, blocks, to, tag);
}

// What a prefill role has shipped.
struct HandoffStats {
    int handoffs = 0;
    std::int64_t tokens = 0;      // prompt positions shipped
    std::size_t kv_bytes = 0;     // KV headers + blocks
    double transfer_seconds = 0;  // inside the sends
};

// The prefill role: `engine` hands every request off after its first token to the decode rank
// and its callbacks hear the rest of each request from there. Drive it with step(),
// run_until_idle() or serve(stop) instead of the engine's own loop, on the thread that would
// call engine.step(); submit() and abort() go to the engine as always.
//
// The events coming back are received on a thread of their own, so a request's tokens reach
// its callback as the decode rank produces them: delivered between this engine's steps, every
// decoded token would wait out a long prompt's prefill step here, which is the very stall
// disaggregation removes. So callbacks of handed-off requests run on that thread (one at a
// time, and after the first token's callback, which ran on the engine thread before the
// hand-off), and the communicator is used from two threads at once: MPI needs
// MPI_THREAD_MULTIPLE.
template <class Engine, PollingCommunicator Comm>
class PrefillRole {
    using Cache = typename Engine::Cache;
    static_assert(std::same_as<typename Comm::Backend, Host>,
                  "PagedKvCache exports its blocks into host memory: the Communicator's Backend "
                  "must be Host");

  public:
    PrefillRole(Engine& engine, Comm& comm, RoleOptions options)
        : engine_(&engine), comm_(&comm), options_(options) {
        engine.hand_off_after_first_token(
            {.hand_off = [this](PrefilledRequest&& p) { ship(std::move(p)); },
             .eligible = [](GenerationRequest const& r) { return r.grammar == nullptr; },
             .abort_elsewhere = [this](sched::RequestId id) { abort_remote(id); }});
        receiver_ = std::thread([this] { receive_events(); });
    }
    PrefillRole(PrefillRole const&) = delete;
    PrefillRole& operator=(PrefillRole const&) = delete;
    ~PrefillRole() {
        try {
            shutdown();
        } catch (...) {  // a destructor must not throw; shutdown() reports when called itself
        }
        if (receiver_.joinable()) receiver_.join();
    }

    // One engine step. Returns whether work remains here or at the decode rank.
    bool step() {
        bool const busy = engine_->step();
        return busy || in_flight() > 0;
    }

    // Until every request submitted so far has finished, here or at the decode rank, or
    // `limit` has passed (then false: a request whose end never came back).
    bool run_until_idle(std::chrono::steady_clock::duration limit = std::chrono::hours(24 * 365)) {
        using namespace std::chrono_literals;
        auto const deadline = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < deadline) {
            if (engine_->step()) continue;
            std::unique_lock lock(mutex_);
            if (changed_.wait_for(lock, 5ms, [&] { return in_flight_.empty() || failed_; })) {
                rethrow_receiver_failure();
                return true;
            }
        }
        return false;
    }

    // A server's loop: until `stop()`, sleeping while this engine has no work (the decode
    // rank's tokens arrive on the receiving thread meanwhile); then shuts the decode rank down.
    template <class StopRequested>
    void serve(StopRequested stop) {
        using namespace std::chrono_literals;
        while (!stop()) {
            if (engine_->step()) continue;
            engine_->wait_for_arrivals(50ms);
            std::lock_guard lock(mutex_);
            rethrow_receiver_failure();
        }
        shutdown();
    }

    // Tells the decode rank to abort what it holds and stop, and waits for it to say it has;
    // events still coming back are dropped (their requests' server is going away). Idempotent.
    void shutdown() {
        {
            std::lock_guard lock(mutex_);
            if (shut_down_) return;
            shut_down_ = true;
        }
        wire::FrameWriter frame;
        frame.put(static_cast<std::uint8_t>(wire::FrameKind::shutdown));
        wire::send_frame(*comm_, frame.bytes(), options_.peer, options_.tag);
        if (receiver_.joinable()) receiver_.join();  // it ends at the acknowledgement
        std::lock_guard lock(mutex_);
        in_flight_.clear();
        rethrow_receiver_failure();
    }

    HandoffStats const& stats() const { return stats_; }
    // Requests handed off whose last event has not come back yet.
    std::size_t in_flight() const {
        std::lock_guard lock(mutex_);
        return in_flight_.size();
    }
    // Events for no request handed off from here (a hand-off the decode rank refused that
    // this side did not send through the engine, e.g. a test's malformed one). Read it once
    // the role is idle or shut down.
    std::vector<TokenEvent> const& unrouted_events() const { return unrouted_; }

  private:
    void ship(PrefilledRequest&& p) {
        auto const start = std::chrono::steady_clock::now();
        auto const id = static_cast<std::uint64_t>(p.id);
        KvTransferHeader const header = KvBlockLayout<Cache>::header(id, p.tokens, p.first_token);
        {
            // In the table before the decode rank can answer.
            std::lock_guard lock(mutex_);
            in_flight_.emplace(p.id, std::move(p.callback));
        }
        send_handoff(*comm_, id, p.request, header, p.blocks, options_.peer, options_.tag);
        stats_.handoffs += 1;
        stats_.tokens += p.tokens;
        stats_.kv_bytes += kv_transfer_header_bytes + p.blocks.size();
        stats_.transfer_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }

    void abort_remote(sched::RequestId id) {
        {
            std::lock_guard lock(mutex_);
            if (!in_flight_.contains(id) || shut_down_) return;
        }
        wire::FrameWriter frame;
        frame.put(static_cast<std::uint8_t>(wire::FrameKind::abort));
        frame.put(static_cast<std::uint64_t>(id));
        wire::send_frame(*comm_, frame.bytes(), options_.peer, options_.tag);
    }

    // The receiving thread: every frame from the decode rank until its shutdown
    // acknowledgement. Polls (with short sleeps) rather than blocking in a receive, which under
    // Open MPI would spin a core the prefill needs.
    void receive_events() {
        using namespace std::chrono_literals;
        try {
            for (;;) {
                if (!comm_->has_message(options_.peer, options_.tag + 1)) {
                    std::this_thread::sleep_for(100us);
                    continue;
                }
                auto const bytes = wire::recv_frame(*comm_, options_.peer, options_.tag + 1);
                wire::FrameReader in(bytes);
                auto const kind = in.take<std::uint8_t>();
                if (kind == static_cast<std::uint8_t>(wire::FrameKind::shutdown)) return;
                if (kind != static_cast<std::uint8_t>(wire::FrameKind::event))
                    throw KvTransferError("PrefillRole: frame of kind " + std::to_string(kind) +
                                          " from the decode rank");
                deliver(wire::take_event(in));
            }
        } catch (std::exception const& e) {
            std::lock_guard lock(mutex_);
            failed_ = true;
            failure_ = e.what();
            changed_.notify_all();
        }
    }

    void deliver(TokenEvent const& event) {
        TokenCallback* callback = nullptr;
        {
            std::lock_guard lock(mutex_);
            if (shut_down_) return;
            auto const found = in_flight_.find(event.id);
            if (found == in_flight_.end()) {
                unrouted_.push_back(event);
                return;
            }
            callback = &found->second;  // a map node: stays put while others come and go
        }
        if (*callback) (*callback)(event);
        if (!event.finish) return;
        std::lock_guard lock(mutex_);
        in_flight_.erase(event.id);
        changed_.notify_all();
    }

    void rethrow_receiver_failure() const {  // with mutex_ held
        if (failed_)
            throw KvTransferError("PrefillRole: receiving from the decode rank: " + failure_);
    }

    Engine* engine_;
    Comm* comm_;
    RoleOptions options_;
    mutable std::mutex mutex_;  // guards what the two threads share: the table, the flags
    std::condition_variable changed_;
    std::map<sched::RequestId, TokenCallback> in_flight_;
    std::vector<TokenEvent> unrouted_;
    HandoffStats stats_;  // the engine thread's
    bool shut_down_ = false;
    bool failed_ = false;
    std::string failure_;
    std::thread receiver_;  // last: started once everything it uses exists
};

// The decode role: `engine` adopts every hand-off from the prefill rank and sends each token
// event back. serve() runs until the prefill rank shuts it down.
template <class Engine, PollingCommunicator Comm>
class DecodeRole {
    using Cache = typename Engine::Cache;
    static_assert(std::same_as<typename Comm::Backend, Host>,
                  "PagedKvCache imports its blocks from host memory: the Communicator's Backend "
                  "must be Host");

  public:
    DecodeRole(Engine& engine, Comm& comm, RoleOptions options)
        : engine_(&engine), comm_(&comm), options_(options) {}
    DecodeRole(DecodeRole const&) = delete;
    DecodeRole& operator=(DecodeRole const&) = delete;

    // Takes hand-offs as they arrive and steps the engine between them, until the prefill
    // rank's shutdown; then aborts what is left, and acknowledges.
    void serve() {
        using namespace std::chrono_literals;
        bool open = true;
        for (;;) {
            while (open && comm_->has_message(options_.peer, options_.tag)) open = receive();
            if (!open)
                for (auto const& [remote, local] : local_of_) engine_->abort(local);
            if (engine_->step()) continue;
            if (!open) break;
            if (!comm_->has_message(options_.peer, options_.tag))
                engine_->wait_for_arrivals(local_of_.empty() ? 1ms : 0ms);
        }
        wire::FrameWriter ack;
        ack.put(static_cast<std::uint8_t>(wire::FrameKind::shutdown));
        wire::send_frame(*comm_, ack.bytes(), options_.peer, options_.tag + 1);
    }

    // Receives one frame (blocking) and acts on it; false for the shutdown. A hand-off whose KV
    // does not fit this cache's layout or this engine's limits is refused after its payload
    // has been drained (so the channel stays in step): its request gets a final event with the
    // error, and the message is kept in refusals().
    bool receive() {
        auto const bytes = wire::recv_frame(*comm_, options_.peer, options_.tag);
        wire::FrameReader in(bytes);
        auto const kind = in.take<std::uint8_t>();
        if (kind == static_cast<std::uint8_t>(wire::FrameKind::shutdown)) return false;
        if (kind == static_cast<std::uint8_t>(wire::FrameKind::abort)) {
            auto const found = local_of_.find(in.take<std::uint64_t>());
            if (found != local_of_.end()) engine_->abort(found->second);
            return true;
        }
        if (kind != static_cast<std::uint8_t>(wire::FrameKind::handoff))
            throw KvTransferError("DecodeRole: frame of unknown kind " + std::to_string(kind));
        auto const id = in.take<std::uint64_t>();
        GenerationRequest request = wire::take_request(in);
        KvTransferHeader const header = recv_kv_header(*comm_, options_.peer, options_.tag);
        std::vector<std::byte> blocks(header.payload_bytes());
        recv_kv_payload(*comm_, header, blocks, options_.peer, options_.tag);
        try {
            require_matching_layout<Cache>(header);
            if (header.request_id != id)
                throw KvTransferError("KV transfer of request " +
                                      std::to_string(header.request_id) +
                                      " follows the hand-off of request " + std::to_string(id));
            sched::RequestId const local =
                engine_->adopt({.id = sched::RequestId{id},
                                .request = std::move(request),
                                .first_token = header.first_token,
                                .tokens = static_cast<int>(header.tokens),
                                .blocks = std::move(blocks)},
                               [this, id](TokenEvent const& e) { send_back(id, e); });
            local_of_.emplace(id, local);
            ++adopted_;
        } catch (Error const& e) {
            refusals_.emplace_back(e.what());
            send_back(id, {.finish = FinishReason::aborted, .error = e.what()});
        }
        return true;
    }

    std::vector<std::string> const& refusals() const { return refusals_; }
    int adopted() const { return adopted_; }

  private:
    void send_back(std::uint64_t remote_id, TokenEvent event) {
        event.id = sched::RequestId{remote_id};
        wire::FrameWriter frame;
        frame.put(static_cast<std::uint8_t>(wire::FrameKind::event));
        wire::put_event(frame, event);
        wire::send_frame(*comm_, frame.bytes(), options_.peer, options_.tag + 1);
        if (event.finish) local_of_.erase(remote_id);
    }

    Engine* engine_;
    Comm* comm_;
    RoleOptions options_;
    std::map<std::uint64_t, sched::RequestId> local_of_;  // the prefill rank's id -> this engine's
    std::vector<std::string> refusals_;
    int adopted_ = 0;
};

}  // namespace tinfer::distributed
