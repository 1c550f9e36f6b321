// MpiCommunicator against results computed locally: every rank can regenerate every other
// rank's input from the shared seed, so each rank knows what a collective must return.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <tinfer/distributed/mpi_communicator.hpp>

#include "mpi_testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;

namespace {

std::vector<float> rank_floats(std::uint64_t seed, int rank, std::size_t n) {
    std::mt19937_64 rng(seed + 7919 * static_cast<std::uint64_t>(rank + 1) + n);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

std::vector<std::byte> rank_bytes(std::uint64_t seed, int rank, std::size_t n) {
    std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(rank + 1)) ^ n);
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
    return v;
}

bool bitwise_equal(std::span<float const> a, std::span<float const> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Sum over ranks against a float64 sum: p float32 additions err by at most (p-1) eps times
// the sum of magnitudes.
void all_reduce_matches(MpiCommunicator& comm, testing::mpi::Checks& checks, std::uint64_t seed,
                        std::size_t n) {
    int const p = comm.size();
    std::vector<float> data = rank_floats(seed, comm.rank(), n);
    comm.all_reduce_sum(data);
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(rank_floats(seed, r, n));
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
        double sum = 0, magnitude = 0;
        for (auto const& input : inputs) {
            sum += input[i];
            magnitude += std::abs(input[i]);
        }
        double const bound = (p - 1) * std::numeric_limits<float>::epsilon() * magnitude +
                             std::numeric_limits<float>::denorm_min();
        worst = std::max(worst, std::abs(data[i] - sum) / bound);
    }
    checks.expect(worst <= 1, "all_reduce_sum of " + std::to_string(n) + " floats: scaled error " +
                                  std::to_string(worst));
    // Tensor parallelism needs every rank to continue from the same activations, bit for bit.
    std::vector<float> everyone(n * static_cast<std::size_t>(p));
    comm.all_gather(data, everyone);
    for (int r = 0; r < p; ++r) {
        checks.expect(
            bitwise_equal(std::span(everyone).subspan(r * n, n), data),
            "all_reduce_sum result differs between this rank and rank " + std::to_string(r));
    }
}

void all_gather_matches(MpiCommunicator& comm, testing::mpi::Checks& checks, std::uint64_t seed,
                        std::size_t n) {
    int const p = comm.size();
    std::vector<float> const mine = rank_floats(seed, comm.rank(), n);
    std::vector<float> all(n * static_cast<std::size_t>(p),
                           std::numeric_limits<float>::quiet_NaN());
    comm.all_gather(mine, all);
    for (int r = 0; r < p; ++r) {
        checks.expect(bitwise_equal(std::span(all).subspan(r * n, n), rank_floats(seed, r, n)),
                      "all_gather of " + std::to_string(n) + " floats: rank " + std::to_string(r) +
                          "'s part");
    }
}

// A ring: every rank sends to the next and receives from the previous. Rank 0 sends first and
// the others receive first, so blocking sends of large messages cannot deadlock.
void ring_matches(MpiCommunicator& comm, testing::mpi::Checks& checks, std::uint64_t seed,
                  std::size_t n, int tag) {
    int const p = comm.size(), rank = comm.rank();
    int const next = (rank + 1) % p, previous = (rank + p - 1) % p;
    std::vector<std::byte> const outgoing = rank_bytes(seed, rank, n);
    std::vector<std::byte> incoming(n, std::byte{0xAA});
    if (rank == 0) {
        comm.send(outgoing, next, tag);
        comm.recv(incoming, previous, tag);
    } else {
        comm.recv(incoming, previous, tag);
        comm.send(outgoing, next, tag);
    }
    checks.expect(
        incoming == rank_bytes(seed, previous, n),
        "ring send/recv of " + std::to_string(n) + " bytes from rank " + std::to_string(previous));
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "distributed_mpi_collectives_test", [](auto& checks) {
        static_assert(Communicator<MpiCommunicator>);
        std::uint64_t const seed = testing::mpi::shared_seed();
        MpiCommunicator comm;
        int const p = comm.size();

        for (std::size_t const n :
             {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{(1 << 18) + 3}}) {
            all_reduce_matches(comm, checks, seed, n);
            all_gather_matches(comm, checks, seed, n);
        }
        for (std::size_t const n :
             {std::size_t{0}, std::size_t{1}, std::size_t{10007}, std::size_t{3 << 20}}) {
            ring_matches(comm, checks, seed, n, 11);
        }

        // Small chunks make a message of a few KB a run of many, as a 1 GiB+ one would be.
        MpiCommunicator chunked(MPI_COMM_WORLD, 1000);
        ring_matches(chunked, checks, seed, 10007, 12);
        all_reduce_matches(chunked, checks, seed, 1003);

        // Tags select messages: rank 0 sends tag 21 then 22, rank 1 asks for 22 first.
        if (p >= 2 && comm.rank() < 2) {
            auto const first = rank_bytes(seed, 100, 64), second = rank_bytes(seed, 101, 64);
            if (comm.rank() == 0) {
                comm.send(first, 1, 21);
                comm.send(second, 1, 22);
            } else {
                std::vector<std::byte> got_second(64), got_first(64);
                comm.recv(got_second, 0, 22);
                comm.recv(got_first, 0, 21);
                checks.expect(got_first == first && got_second == second,
                              "messages matched by tag, not by arrival order");
            }
        }

        // A receiver expecting more bytes than were sent is told so, and the job survives.
        if (p >= 2 && comm.rank() < 2) {
            std::vector<std::byte> buffer(200);
            if (comm.rank() == 0) {
                comm.send(std::span(buffer).first(100), 1, 31);
            } else {
                bool refused = false;
                try {
                    comm.recv(buffer, 0, 31);
                } catch (CommunicationError const& e) {
                    refused = std::string(e.what()).find("100 bytes") != std::string::npos;
                }
                checks.expect(refused, "a short message must be reported with its length");
            }
        }

        std::vector<float> wrong(3);
        bool refused = false;
        try {
            comm.all_gather(std::span<float const>(wrong).first(2), wrong);
        } catch (std::length_error const&) {
            refused = true;
        }
        checks.expect(refused, "all_gather into a buffer of the wrong size must be refused");
        comm.barrier();
    });
}
