#pragma once
// Communicator over NCCL: spans are device memory on this rank's GPU, and every operation is
// enqueued on the communicator's CUDA stream and returns at once, as kernels do. Results are
// visible to later work on that stream, or to the host after synchronize(). Needs nccl.h and
// cuda_runtime.h (the CUDA toolkit) and links libnccl; compiled by the CUDA build only.
//
// NCCL has no message tags: sends and receives between one pair of ranks match in the order
// they are issued. A caller that keeps one (peer, tag) conversation per communicator, as the
// KV transfer does, gets the same behaviour as from MpiCommunicator; the tag is accepted for
// the Communicator concept and otherwise unused.
//
// Groups. Every send and recv is issued inside an NCCL group (ncclGroupStart/End; nested in a
// caller's group, it joins that one). Point-to-point operations that depend on each other must
// share one group or they deadlock: a rank that sends to and receives from the same peers (a
// ring, a swap, or itself) uses exchange(), or group() around its calls.
//
// Host bytes. send/recv take device memory; send_host_bytes / recv_host_bytes move host bytes
// (the KV transfer's header, dist/kv_transfer.hpp) through device staging memory: the send
// returns at once (the bytes are staged before it returns), the receive once the bytes are on
// the host.
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <cuda_runtime.h>
#include <nccl.h>

#include <tinfer/core/error.hpp>
#include <tinfer/core/communicator.hpp>

namespace tinfer::distributed {

struct NcclError : Error {
    using Error::Error;
};

namespace nccl_detail {

inline void check(ncclResult_t result, char const* call) {
    if (result != ncclSuccess) {
        throw NcclError(std::string(call) + " failed: " + ncclGetErrorString(result));
    }
}

inline void check(cudaError_t result, char const* call) {
    if (result != cudaSuccess) {
        throw NcclError(std::string(call) + " failed: " + cudaGetErrorString(result));
    }
}

}  // namespace nccl_detail

class NcclCommunicator {
  public:
    using Backend = Cuda;

    // Collective over `size` processes (or threads, one per GPU), all passing the same id;
    // the current CUDA device becomes this rank's.
    NcclCommunicator(ncclUniqueId const& id, int rank, int size, cudaStream_t stream)
        : stream_(stream), rank_(rank), size_(size) {
        nccl_detail::check(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
        if (ncclResult_t const joined = ncclCommInitRank(&comm_, size, id, rank);
            joined != ncclSuccess) {
            cudaFree(barrier_word_);
            nccl_detail::check(joined, "ncclCommInitRank");
        }
    }

    // NCCL needs its unique id shared out of band: rank 0 of a host communicator (MPI, say)
    // makes it and sends it to every other rank, which then join with the same rank numbers.
    template <Communicator HostComm>
    requires std::same_as<typename HostComm::Backend, Host>
    static NcclCommunicator bootstrap(HostComm& host, cudaStream_t stream, int tag = 0) {
        ncclUniqueId id{};
        auto bytes = std::as_writable_bytes(std::span{&id, 1});
        if (host.rank() == 0) {
            nccl_detail::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
            for (int peer = 1; peer < host.size(); ++peer) host.send(bytes, peer, tag);
        } else {
            host.recv(bytes, 0, tag);
        }
        return NcclCommunicator(id, host.rank(), host.size(), stream);
    }

    NcclCommunicator(NcclCommunicator&& other) noexcept
        : comm_(std::exchange(other.comm_, nullptr)),
          stream_(other.stream_),
          rank_(other.rank_),
          size_(other.size_),
          barrier_word_(std::exchange(other.barrier_word_, nullptr)) {}
    NcclCommunicator& operator=(NcclCommunicator&& other) noexcept {
        std::swap(comm_, other.comm_);
        std::swap(barrier_word_, other.barrier_word_);
        stream_ = other.stream_;
        rank_ = other.rank_;
        size_ = other.size_;
        return *this;
    }
    NcclCommunicator(NcclCommunicator const&) = delete;
    NcclCommunicator& operator=(NcclCommunicator const&) = delete;
    ~NcclCommunicator() {
        if (barrier_word_ != nullptr) cudaFree(barrier_word_);
        if (comm_ != nullptr) ncclCommDestroy(comm_);
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    cudaStream_t stream() const { return stream_; }
    ncclComm_t handle() const { return comm_; }

    void all_reduce_sum(std::span<float> data) {
        nccl_detail::check(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32,
                                         ncclSum, comm_, stream_),
                           "ncclAllReduce");
    }

    void all_gather(std::span<float const> mine, std::span<float> all) {
        require_gather_sizes(mine.size(), all.size(), size_);
        nccl_detail::check(
            ncclAllGather(mine.data(), all.data(), mine.size(), ncclFloat32, comm_, stream_),
            "ncclAllGather");
    }

    // Runs `body` (NCCL calls) as one NCCL group: its point-to-point operations progress
    // together, so a send and a receive that depend on each other cannot deadlock.
    template <class Body>
    static void group(Body&& body) {
        nccl_detail::check(ncclGroupStart(), "ncclGroupStart");
        try {
            body();
        } catch (...) {
            (void)ncclGroupEnd();  // already failing: the first error is the one reported
            throw;
        }
        nccl_detail::check(ncclGroupEnd(), "ncclGroupEnd");
    }

    void send(std::span<std::byte const> bytes, int to, int /*tag: see above*/) {
        group([&] {
            nccl_detail::check(ncclSend(bytes.data(), bytes.size(), ncclUint8, to, comm_, stream_),
                               "ncclSend");
        });
    }

    void recv(std::span<std::byte> bytes, int from, int /*tag: see above*/) {
        group([&] {
            nccl_detail::check(
                ncclRecv(bytes.data(), bytes.size(), ncclUint8, from, comm_, stream_), "ncclRecv");
        });
    }

    // Sends `outgoing` to `to` and receives `incoming` from `from` in one group: safe in a ring,
    // a pairwise swap, or with this rank itself (NCCL requires a self send and receive to share
    // a group).
    void exchange(std::span<std::byte const> outgoing, int to, std::span<std::byte> incoming,
                  int from, int /*tag: see above*/) {
        group([&] {
            nccl_detail::check(
                ncclSend(outgoing.data(), outgoing.size(), ncclUint8, to, comm_, stream_),
                "ncclSend");
            nccl_detail::check(
                ncclRecv(incoming.data(), incoming.size(), ncclUint8, from, comm_, stream_),
                "ncclRecv");
        });
    }

    // Host bytes to a peer: staged in stream-ordered device memory (freed once the send has
    // run), so `bytes` may be reused as soon as this returns.
    void send_host_bytes(std::span<std::byte const> bytes, int to, int tag) {
        if (bytes.empty()) return send(bytes, to, tag);
        void* staging = nullptr;
        nccl_detail::check(cudaMallocAsync(&staging, bytes.size(), stream_), "cudaMallocAsync");
        // From pageable memory, cudaMemcpyAsync copies the bytes out before it returns.
        nccl_detail::check(
            cudaMemcpyAsync(staging, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync host bytes to device");
        try {
            send({static_cast<std::byte const*>(staging), bytes.size()}, to, tag);
        } catch (...) {
            (void)cudaFreeAsync(staging, stream_);
            throw;
        }
        nccl_detail::check(cudaFreeAsync(staging, stream_), "cudaFreeAsync");
    }

    // Host bytes from a peer: returns once they are in `bytes` (waits for this stream).
    void recv_host_bytes(std::span<std::byte> bytes, int from, int tag) {
        if (bytes.empty()) return recv(bytes, from, tag);
        void* staging = nullptr;
        nccl_detail::check(cudaMallocAsync(&staging, bytes.size(), stream_), "cudaMallocAsync");
        try {
            recv({static_cast<std::byte*>(staging), bytes.size()}, from, tag);
            nccl_detail::check(cudaMemcpyAsync(bytes.data(), staging, bytes.size(),
                                               cudaMemcpyDeviceToHost, stream_),
                               "cudaMemcpyAsync device to host bytes");
        } catch (...) {
            (void)cudaFreeAsync(staging, stream_);
            throw;
        }
        nccl_detail::check(cudaFreeAsync(staging, stream_), "cudaFreeAsync");
        synchronize();
    }

    // NCCL has no barrier; an all-reduce of one word cannot finish on any rank before every
    // rank has issued it, and waiting for the stream makes the host wait too.
    void barrier() {
        nccl_detail::check(cudaMemsetAsync(barrier_word_, 0, sizeof(float), stream_),
                           "cudaMemsetAsync");
        all_reduce_sum(std::span{barrier_word_, 1});
        synchronize();
    }

    void synchronize() {
        nccl_detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }

  private:
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    int rank_ = 0;
    int size_ = 1;
    float* barrier_word_ = nullptr;  // device memory for barrier()'s all-reduce
};

static_assert(Communicator<NcclCommunicator>);

}  // namespace tinfer::distributed
