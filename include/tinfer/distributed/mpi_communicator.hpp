#pragma once
// Communicator over MPI (Open MPI), host memory. Needs mpi.h on the include path: link
// MPI::MPI_CXX (CMake's FindMPI). Calls block until the local buffer may be reused, as MPI's
// blocking operations do.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include <mpi.h>

#include <tinfer/core/communicator.hpp>
#include <tinfer/core/error.hpp>

namespace tinfer::distributed {

// A failed MPI call (a peer that died, a message of the wrong length): the message names the
// call and MPI's own explanation.
struct CommunicationError : Error {
    using Error::Error;
};

namespace mpi_detail {

inline void check(int result, char const* call) {
    if (result == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(result, text, &length);
    throw CommunicationError(std::string(call) + " failed: " + std::string(text, length));
}

}  // namespace mpi_detail

// MPI_Init on construction and MPI_Finalize on destruction, unless MPI was already running
// (then whoever started it finishes it).
class MpiEnvironment {
  public:
    MpiEnvironment(int* argc, char*** argv) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
            mpi_detail::check(MPI_Init(argc, argv), "MPI_Init");
            owns_ = true;
        }
    }
    // With a thread level (MPI_THREAD_MULTIPLE, say): for a program whose MPI calls are made
    // by other threads than the one starting MPI, or by several at once (the disaggregated
    // prefill role). Refused with tinfer::Error when the MPI library provides less.
    MpiEnvironment(int* argc, char*** argv, int required_thread_level) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) return;
        int provided = 0;
        mpi_detail::check(MPI_Init_thread(argc, argv, required_thread_level, &provided),
                          "MPI_Init_thread");
        owns_ = true;
        if (provided < required_thread_level)
            throw Error("MPI provides thread level " + std::to_string(provided) + ", " +
                        std::to_string(required_thread_level) + " is needed");
    }
    MpiEnvironment() : MpiEnvironment(nullptr, nullptr) {}
    MpiEnvironment(MpiEnvironment const&) = delete;
    MpiEnvironment& operator=(MpiEnvironment const&) = delete;
    ~MpiEnvironment() {
        if (owns_) MPI_Finalize();
    }

  private:
    bool owns_ = false;
};

class MpiCommunicator {
  public:
    using Backend = Host;

    // MPI counts are ints; longer byte messages (a Llama-2-70B request's KV is 1.3 GB) go as a
    // run of chunks of at most this many bytes, which MPI delivers in order.
    static constexpr std::size_t default_chunk_bytes = std::size_t{1} << 30;
    static_assert(default_chunk_bytes <= INT_MAX);

    // Works on a duplicate of `parent`, so tinfer's tags never match another library's
    // messages, and errors come back as exceptions instead of aborting the job.
    explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD,
                             std::size_t chunk_bytes = default_chunk_bytes)
        : chunk_bytes_(std::clamp<std::size_t>(chunk_bytes, 1, INT_MAX)) {
        mpi_detail::check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
        mpi_detail::check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
                          "MPI_Comm_set_errhandler");
        mpi_detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        mpi_detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    }
    MpiCommunicator(MpiCommunicator&& other) noexcept
        : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
          rank_(other.rank_),
          size_(other.size_),
          chunk_bytes_(other.chunk_bytes_) {}
    MpiCommunicator& operator=(MpiCommunicator&& other) noexcept {
        std::swap(comm_, other.comm_);
        rank_ = other.rank_;
        size_ = other.size_;
        chunk_bytes_ = other.chunk_bytes_;
        return *this;
    }
    MpiCommunicator(MpiCommunicator const&) = delete;
    MpiCommunicator& operator=(MpiCommunicator const&) = delete;
    ~MpiCommunicator() {
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

    int rank() const { return rank_; }
    int size() const { return size_; }
    MPI_Comm handle() const { return comm_; }

    void all_reduce_sum(std::span<float> data) {
        for (std::size_t done = 0; done < data.size();) {
            int const count = chunk_count(data.size() - done, sizeof(float));
            mpi_detail::check(
                MPI_Allreduce(MPI_IN_PLACE, data.data() + done, count, MPI_FLOAT, MPI_SUM, comm_),
                "MPI_Allreduce");
            done += static_cast<std::size_t>(count);
        }
    }

    void all_gather(std::span<float const> mine, std::span<float> all) {
        require_gather_sizes(mine.size(), all.size(), size_);
        if (mine.size() > INT_MAX) {
            throw std::length_error("MpiCommunicator::all_gather: more than INT_MAX elements");
        }
        mpi_detail::check(
            MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                          static_cast<int>(mine.size()), MPI_FLOAT, comm_),
            "MPI_Allgather");
    }

    void send(std::span<std::byte const> bytes, int to, int tag) {
        std::size_t done = 0;
        do {
            int const count = chunk_count(bytes.size() - done, 1);
            mpi_detail::check(MPI_Send(bytes.data() + done, count, MPI_BYTE, to, tag, comm_),
                              "MPI_Send");
            done += static_cast<std::size_t>(count);
        } while (done < bytes.size());
    }

    // Chunked exactly as `send` chunks, so a length disagreement shows up as a chunk of the
    // wrong size (or MPI's truncation error) and is reported, never silently accepted.
    void recv(std::span<std::byte> bytes, int from, int tag) {
        std::size_t done = 0;
        do {
            int const expected = chunk_count(bytes.size() - done, 1);
            MPI_Status status;
            mpi_detail::check(
                MPI_Recv(bytes.data() + done, expected, MPI_BYTE, from, tag, comm_, &status),
                "MPI_Recv");
            int received = 0;
            mpi_detail::check(MPI_Get_count(&status, MPI_BYTE, &received), "MPI_Get_count");
            if (received != expected) {
                throw CommunicationError("MpiCommunicator::recv from rank " + std::to_string(from) +
                                         " tag " + std::to_string(tag) + ": got a chunk of " +
                                         std::to_string(received) + " bytes where " +
                                         std::to_string(expected) + " were expected");
            }
            done += static_cast<std::size_t>(expected);
        } while (done < bytes.size());
    }

    void barrier() { mpi_detail::check(MPI_Barrier(comm_), "MPI_Barrier"); }

    // Whether a message from `from` on `tag` waits to be received (never blocks): a serving loop
    // that also steps an engine polls with it (distributed/disaggregation.hpp).
    bool has_message(int from, int tag) {
        int flag = 0;
        MPI_Status status;
        mpi_detail::check(MPI_Iprobe(from, tag, comm_, &flag, &status), "MPI_Iprobe");
        return flag != 0;
    }

  private:
    int chunk_count(std::size_t remaining_elements, std::size_t element_bytes) const {
        std::size_t const per_chunk = std::max<std::size_t>(1, chunk_bytes_ / element_bytes);
        return static_cast<int>(std::min(remaining_elements, per_chunk));
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    std::size_t chunk_bytes_ = default_chunk_bytes;
};

static_assert(Communicator<MpiCommunicator>);

}  // namespace tinfer::distributed
