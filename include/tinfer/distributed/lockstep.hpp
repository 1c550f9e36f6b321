#pragma once
// Lockstep: the ranks of a tensor-parallel Engine run the same serving loop, with rank 0 the
// only one that hears requests (a server's HTTP front end lives there alone).
//
// Every rank's Engine holds its shard of the model and steps in turn; a forward pass is a
// collective (two all-reduces per layer), so every rank must run the same batch at every
// step. The batch is the scheduler's plan, a pure function of what the scheduler has been
// told, so it is enough that every rank's engine takes the same arrivals and aborts at the
// same step. At the start of each of its steps rank 0's engine hands what it took to this
// class (the engine's inbox exchange), which broadcasts it; every other rank receives the
// message before its own step and its engine takes that instead of its (empty) inbox.
//
// The sampled tokens are not broadcast: every rank samples the same token because the
// all-reduced logits are bitwise the same on every rank (MPI_Allreduce's one reduction) and
// the sampler's draw is a function of the logits, the request's settings and seed, its id and
// its step only (kernels/sampling.hpp). This is checked, not assumed: rank 0's message carries
// a fingerprint of every (request, token, finish) it has streamed so far, and a rank whose own
// fingerprint differs throws, naming the step, instead of running on with another sequence.
//
// What a message carries of a request: its id and request_wire.hpp's fields (the prompt as
// tokens, max_tokens, n, seed, stop strings and ids, ignore_eos, priority, tenant, draft_tokens
// and every sampling setting). Not its grammar: the engine refuses structured output under
// tensor parallelism (RequestLimits).
//
// Shutdown: rank 0 calls finish() after its last step; every other rank's follow() returns.
// The follower waits for a message with MPI_Ibcast and MPI_Test between short sleeps, so an
// idle server's followers do not spin a core in MPI's busy poll.
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <mpi.h>

#include <tinfer/core/error.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/distributed/request_wire.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/engine/request_intake.hpp>

namespace tinfer::distributed {

// One step's inbox on the wire (callbacks and arrival times stay on their rank): each arrival's
// id and request (request_wire.hpp, the same field list as the disaggregation hand-off), then
// the aborted ids.
inline std::vector<std::byte> encode_inbox(RequestIntake::Inbox const& inbox) {
    wire::FrameWriter w;
    w.put(static_cast<std::uint64_t>(inbox.first.size()));
    for (RequestIntake::Arrival const& a : inbox.first) {
        if (a.transferred)
            throw Error(
                "lockstep: a request prefilled by another engine (disaggregation) "
                "cannot be adopted under tensor parallelism");
        w.put(static_cast<std::uint64_t>(a.id));
        wire::put_request(w, a.request, a.prompt);
    }
    w.put(static_cast<std::uint64_t>(inbox.second.size()));
    for (sched::RequestId const id : inbox.second) w.put(static_cast<std::uint64_t>(id));
    return std::move(w.bytes());
}

// The inbox rank 0 sent; every arrival gets `callback`.
inline RequestIntake::Inbox decode_inbox(std::span<std::byte const> bytes,
                                         TokenCallback const& callback,
                                         sched::Clock::time_point arrived) {
    wire::BasicFrameReader<CommunicationError> in(bytes, "lockstep: a message from rank 0");
    RequestIntake::Inbox inbox;
    auto const arrivals = in.count(8);
    for (std::size_t i = 0; i < arrivals; ++i) {
        RequestIntake::Arrival a{.callback = callback, .submitted = arrived};
        a.id = sched::RequestId{in.take<std::uint64_t>()};
        a.request = wire::take_request(in);
        a.prompt = a.request.prompt_tokens;
        inbox.first.push_back(std::move(a));
    }
    auto const aborts = in.count(8);
    for (std::size_t i = 0; i < aborts; ++i)
        inbox.second.push_back(sched::RequestId{in.take<std::uint64_t>()});
    if (!in.done()) throw CommunicationError("lockstep: a message from rank 0 has trailing bytes");
    return inbox;
}

// What every rank streamed, folded in order: equal on two ranks iff (up to FNV collisions)
// they streamed the same tokens for the same requests and ended them alike.
class StreamFingerprint {
  public:
    void add(TokenEvent const& e) {
        mix(static_cast<std::uint64_t>(e.id));
        mix(static_cast<std::uint64_t>(e.choice));
        mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(e.token)));
        mix(e.finish ? static_cast<std::uint64_t>(*e.finish) + 1 : 0);
    }
    std::uint64_t value() const { return hash_; }

  private:
    void mix(std::uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            hash_ ^= (v >> (8 * i)) & 0xff;
            hash_ *= 1099511628211ull;
        }
    }
    std::uint64_t hash_ = 1469598103934665603ull;
};

class Lockstep {
  public:
    // On its own duplicate of `comm`, so its broadcasts never match the forward pass's
    // all-reduces. Every rank constructs it alike (MPI_Comm_dup is collective).
    explicit Lockstep(MpiCommunicator const& comm) {
        mpi_detail::check(MPI_Comm_dup(comm.handle(), &comm_), "MPI_Comm_dup");
        mpi_detail::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
                          "MPI_Comm_set_errhandler");
        mpi_detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    }
    Lockstep(Lockstep const&) = delete;
    Lockstep& operator=(Lockstep const&) = delete;
    // Rank 0 tells the others to stop if it has not (it leaves a loop by an exception, say).
    ~Lockstep() {
        if (leads() && led_ && !finished_) {
            try {
                finish();
            } catch (...) {  // a destructor reports nothing; the others see rank 0 gone
            }
        }
        MPI_Comm_free(&comm_);
    }

    bool leads() const { return rank_ == 0; }
    std::uint64_t steps() const { return steps_; }

    // Rank 0: every step of `engine` from now on sends its inbox to the other ranks. The
    // engine must outlive the lockstep's use (until finish()).
    template <class Engine>
    void lead(Engine& engine) {
        if (!leads())
            throw Error("Lockstep::lead: only rank 0 leads; rank " + std::to_string(rank_) +
                        " follows (follow())");
        led_ = true;
        engine.set_inbox_exchange([this](RequestIntake::Inbox& inbox) { send(inbox); });
    }

    // Rank 0, after its engine's last step: the other ranks' follow() returns.
    void finish() {
        if (finished_) return;
        finished_ = true;
        Header header{.flags = stop_flag, .step = steps_, .fingerprint = fingerprint_.value()};
        broadcast_header(header, /*poll=*/false);
    }

    // Ranks > 0: runs `engine`'s steps as rank 0 runs its own, until rank 0 finishes. Returns
    // the steps run. Throws if this rank streamed other tokens than rank 0.
    template <class Engine>
    std::uint64_t follow(Engine& engine) {
        if (leads()) throw Error("Lockstep::follow: rank 0 leads (lead())");
        std::optional<RequestIntake::Inbox> received;
        engine.set_inbox_exchange([&](RequestIntake::Inbox& inbox) {
            if (!received) throw Error("lockstep: a follower stepped without rank 0's message");
            inbox = std::move(*received);
            received.reset();
        });
        TokenCallback const record = [this](TokenEvent const& e) { fingerprint_.add(e); };
        while (true) {
            Header header{};
            broadcast_header(header, /*poll=*/true);
            if (header.magic != magic || header.step != steps_)
                throw CommunicationError("lockstep: rank " + std::to_string(rank_) +
                                         " expected step " + std::to_string(steps_) +
                                         " and got another message from rank 0");
            if (header.fingerprint != fingerprint_.value())
                throw Error(
                    "lockstep: rank " + std::to_string(rank_) +
                    " streamed other tokens than rank 0 before step " + std::to_string(steps_) +
                    " (the ranks' logits or sampling differ; see distributed/lockstep.hpp)");
            if (header.flags & stop_flag) break;
            std::vector<std::byte> payload(header.payload_bytes);
            broadcast_payload(payload);
            received = decode_inbox(payload, record, sched::Clock::now());
            ++steps_;
            engine.step();
        }
        engine.set_inbox_exchange({});
        return steps_;
    }

    // Ends every rank's process now: for a failure in the middle of a step, where the other
    // ranks wait inside a collective that rank 0 will never join.
    [[noreturn]] void abandon(int code = 1) const {
        MPI_Abort(comm_, code);
        std::abort();
    }

  private:
    static constexpr std::uint32_t magic = 0x4c4b5354;  // "LKST"
    static constexpr std::uint32_t stop_flag = 1;
    struct Header {
        std::uint32_t magic = Lockstep::magic;
        std::uint32_t flags = 0;
        std::uint64_t step = 0;
        std::uint64_t fingerprint = 0;  // of what rank 0 streamed before this step
        std::uint64_t payload_bytes = 0;
    };

    void send(RequestIntake::Inbox& inbox) {
        if (finished_) throw Error("lockstep: rank 0 stepped after finish()");
        // Rank 0 folds its own stream as the others do.
        for (RequestIntake::Arrival& a : inbox.first) {
            a.callback = [this, inner = std::move(a.callback)](TokenEvent const& e) {
                fingerprint_.add(e);
                if (inner) inner(e);
            };
        }
        std::vector<std::byte> payload = encode_inbox(inbox);
        Header header{
            .step = steps_, .fingerprint = fingerprint_.value(), .payload_bytes = payload.size()};
        broadcast_header(header, /*poll=*/false);
        broadcast_payload(payload);
        ++steps_;
    }

    // Non-blocking on every rank (a blocking broadcast would not match a non-blocking one).
    // A follower polls with sleeps between tests: a server idles between requests.
    void broadcast_header(Header& header, bool poll) const {
        MPI_Request request;
        mpi_detail::check(MPI_Ibcast(&header, sizeof(Header), MPI_BYTE, 0, comm_, &request),
                          "MPI_Ibcast");
        if (!poll) {
            mpi_detail::check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
            return;
        }
        // Spin briefly (a busy server's next step comes at once), then sleep between tests:
        // 200 us while rank 0 may be mid-step, 2 ms once it has been quiet for 20 ms (an idle
        // server steps every 50 ms; 2 ms is nothing beside a request's first forward pass).
        auto const started = std::chrono::steady_clock::now();
        for (int tests = 0;; ++tests) {
            int done = 0;
            mpi_detail::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (done) return;
            if (tests < 1000) continue;
            bool const quiet =
                std::chrono::steady_clock::now() - started > std::chrono::milliseconds(20);
            std::this_thread::sleep_for(quiet ? std::chrono::microseconds(2000)
                                              : std::chrono::microseconds(200));
        }
    }

    void broadcast_payload(std::vector<std::byte>& payload) const {
        if (payload.empty()) return;
        if (payload.size() > static_cast<std::size_t>(INT_MAX))
            throw CommunicationError("lockstep: one step's arrivals exceed 2 GiB");
        mpi_detail::check(
            MPI_Bcast(payload.data(), static_cast<int>(payload.size()), MPI_BYTE, 0, comm_),
            "MPI_Bcast");
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    bool led_ = false;
    bool finished_ = false;
    std::uint64_t steps_ = 0;
    StreamFingerprint fingerprint_;
};

}  // namespace tinfer::distributed
