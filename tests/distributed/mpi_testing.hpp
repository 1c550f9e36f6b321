#pragma once
// A small harness for the MPI tests: each is a plain main() run by mpiexec. Every rank counts
// its failed checks; the counts are summed over ranks, and rank 0 prints one line CTest reads:
// "PASS <name> on <n> ranks" or "FAIL ...". An exception on any rank aborts the whole job, so
// no rank waits forever in a collective its peer never joins.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <random>
#include <string>

#include <mpi.h>

#include <tinfer/distributed/mpi_communicator.hpp>

namespace tinfer::testing::mpi {

class Checks {
  public:
    Checks(std::string name, int rank) : name_(std::move(name)), rank_(rank) {}

    bool expect(bool ok, std::string const& what) {
        if (!ok) {
            ++failures_;
            std::cerr << name_ << " rank " << rank_ << ": check failed: " << what << std::endl;
        }
        return ok;
    }

    // Sums failures over ranks; returns the process exit status.
    int finish(int expected_ranks) {
        int ranks = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &ranks);
        expect(ranks == expected_ranks, "started on " + std::to_string(ranks) +
                                            " ranks, written for " +
                                            std::to_string(expected_ranks));
        int total = 0;
        MPI_Allreduce(&failures_, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank_ == 0) {
            std::cout << (total == 0 ? "PASS " : "FAIL ") << name_ << " on " << ranks << " ranks"
                      << (total == 0 ? "" : " (" + std::to_string(total) + " failed checks)")
                      << std::endl;
        }
        return total == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
    }

  private:
    std::string name_;
    int rank_;
    int failures_ = 0;
};

// One seed for the whole job, fresh each run (TINFER_TEST_SEED replays one), from rank 0.
inline std::uint64_t shared_seed() {
    std::uint64_t seed = 0;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        char const* fixed = std::getenv("TINFER_TEST_SEED");
        seed = fixed ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
        std::cout << "seed " << seed << " (set TINFER_TEST_SEED to replay)" << std::endl;
    }
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return seed;
}

// Runs body(checks) on every rank under MPI; argv[1] is the rank count the test expects.
// `thread_level`: what MPI must support (MPI_THREAD_MULTIPLE for a test whose ranks call MPI
// from several threads).
template <class Body>
int run(int argc, char** argv, std::string const& name, Body body,
        int thread_level = MPI_THREAD_SINGLE) {
    distributed::MpiEnvironment environment(&argc, &argv, thread_level);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int const expected_ranks = argc > 1 ? std::atoi(argv[1]) : -1;
    Checks checks(name, rank);
    try {
        body(checks);
    } catch (std::exception const& e) {
        std::cerr << "FAIL " << name << " rank " << rank << ": " << e.what() << std::endl;
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
    }
    return checks.finish(expected_ranks);
}

}  // namespace tinfer::testing::mpi
