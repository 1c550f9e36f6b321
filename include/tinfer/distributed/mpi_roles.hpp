#pragma once
// A server's prefill or decode role over MPI (serve --role prefill|decode): two ranks of one
// mpirun, one of each role; the prefill rank serves HTTP (its engine hands every request off
// after the first token), the decode rank only decodes what arrives and sends the tokens back.
// MPI starts in MPI_THREAD_MULTIPLE: the engine thread sends, a thread of PrefillRole receives
// (distributed/disaggregation.hpp), and neither is the thread that starts MPI.
#include <string>
#include <string_view>

#include <tinfer/core/error.hpp>
#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>

namespace tinfer::distributed {

enum class ServingRole { prefill, decode };

inline ServingRole serving_role_named(std::string_view name) {
    if (name == "prefill") return ServingRole::prefill;
    if (name == "decode") return ServingRole::decode;
    throw Error("--role must be prefill or decode, got '" + std::string(name) + "'");
}

class MpiRoleSession {
  public:
    // Starts MPI and checks the job: two ranks, one prefill and one decode.
    MpiRoleSession(int* argc, char*** argv, ServingRole role)
        : environment_(argc, argv, MPI_THREAD_MULTIPLE), role_(role) {
        if (comm_.size() != 2)
            throw Error(
                "--role needs an mpirun of 2 ranks (one prefill, one decode); this one has " +
                std::to_string(comm_.size()));
        peer_ = 1 - comm_.rank();
        float const mine = role == ServingRole::prefill ? 0.0f : 1.0f;
        float roles[2] = {};
        comm_.all_gather(std::span(&mine, 1), roles);
        if (roles[0] == roles[1])
            throw Error(std::string("--role: both ranks were started as ") +
                        (role == ServingRole::prefill ? "prefill" : "decode") +
                        "; start one of each: mpirun -n 1 serve --role prefill ... : -n 1 serve "
                        "--role decode ...");
    }

    ServingRole role() const { return role_; }
    bool serves_http() const { return role_ == ServingRole::prefill; }
    int rank() const { return comm_.rank(); }

    // The engine's loop in this role, on the calling thread (every MPI call after start-up is
    // made here): prefill until `stop()` (then the decode rank is shut down), or decode until the
    // prefill rank shuts it down.
    template <class Engine, class StopRequested>
    void serve(Engine& engine, StopRequested stop) {
        if constexpr (!ships_whole_blocks<typename Engine::Cache>) {
            throw Error(
                "--role: this model's KV cache has sliding and global layer groups, which "
                "disaggregation does not ship yet");
        } else if (role_ == ServingRole::prefill) {
            PrefillRole prefill(engine, comm_, {.peer = peer_});
            prefill.serve(stop);
        } else {
            DecodeRole decode(engine, comm_, {.peer = peer_});
            decode.serve();
        }
    }

  private:
    MpiEnvironment environment_;
    MpiCommunicator comm_;  // constructed after MPI has started (members in order)
    ServingRole role_;
    int peer_ = 0;
};

}  // namespace tinfer::distributed
