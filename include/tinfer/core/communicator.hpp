#pragma once
// The communication a tensor-parallel forward and a prefill->decode KV hand-off need, as one
// policy concept. A model instantiated with `SingleProcess` compiles to exactly the
// single-device code (every collective is a no-op the optimiser removes); `MpiCommunicator`
// (host memory, mpi_communicator.hpp) and `NcclCommunicator` (device memory,
// nccl_communicator.cuh) are the multi-process ones.
//
// Spans name memory in the communicator's `Backend` (host memory for Host, device memory for
// Cuda): the span is only a pointer and a length, so the same signatures carry both.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

#include <tinfer/core/backend.hpp>

namespace tinfer {

template <class C>
concept Communicator = Backend<typename C::Backend> &&
    requires(C& comm, C const& view, std::span<float> data, std::span<float const> mine,
             std::span<std::byte const> outgoing, std::span<std::byte> incoming, int peer,
             int tag) {
    { view.rank() } -> std::convertible_to<int>;
    { view.size() } -> std::convertible_to<int>;
    comm.all_reduce_sum(data);       // in place: data[i] = sum over ranks of data[i]
    comm.all_gather(mine, data);     // data: [size() * mine.size()], rank r's at r
    comm.send(outgoing, peer, tag);  // the peer receives exactly outgoing.size() bytes
    comm.recv(incoming, peer, tag);  // exactly incoming.size() bytes, or an error
    comm.barrier();
};

// Span sizes that do not fit a collective are a caller's bug that would otherwise read or
// write past a buffer, so they are refused before any communication.
inline void require_gather_sizes(std::size_t mine, std::size_t all, int ranks) {
    if (all != mine * static_cast<std::size_t>(ranks)) {
        throw std::length_error("all_gather: destination holds " + std::to_string(all) +
                                " elements, expected " + std::to_string(ranks) + " ranks x " +
                                std::to_string(mine));
    }
}

// One process, one device: rank 0 of 1. Collectives over one rank are the identity; sends and
// receives have no peer, so calling them is a logic error.
struct SingleProcess {
    using Backend = Host;

    static constexpr int rank() { return 0; }
    static constexpr int size() { return 1; }
    static constexpr void all_reduce_sum(std::span<float>) {}
    static void all_gather(std::span<float const> mine, std::span<float> all) {
        require_gather_sizes(mine.size(), all.size(), size());
        if (all.data() != mine.data()) std::copy(mine.begin(), mine.end(), all.begin());
    }
    [[noreturn]] static void send(std::span<std::byte const>, int to, int) {
        throw std::logic_error("SingleProcess::send to rank " + std::to_string(to) +
                               ": a single process has no peer");
    }
    [[noreturn]] static void recv(std::span<std::byte>, int from, int) {
        throw std::logic_error("SingleProcess::recv from rank " + std::to_string(from) +
                               ": a single process has no peer");
    }
    static constexpr void barrier() {}
};

static_assert(Communicator<SingleProcess>);

}  // namespace tinfer
