// NcclCommunicator on every GPU of this machine, one thread per GPU (NCCL refuses two ranks on
// one device, and one thread driving several communicators would need group calls). Results
// are compared with sums computed on the host. Exits 77 (skipped) on a machine without a GPU,
// and fails where the machine shows one CUDA cannot use. On any number of GPUs: exchange() with
// the rank itself (a self send and receive, which deadlock unless grouped); with two or more: a
// ring through exchange() with no group of the caller's, and a KV transfer (dist/kv_transfer.hpp)
// from rank 0 to rank 1 whose header crosses as host bytes and whose payload is device memory.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tinfer/distributed/kv_transfer.hpp>
#include <tinfer/distributed/nccl_communicator.cuh>
#include <tinfer/kernels/cuda/check.cuh>

using namespace tinfer;
using namespace tinfer::distributed;

namespace {

constexpr int skipped_exit_code = 77;

std::mutex report_mutex;
int failures = 0;

void expect(bool ok, int rank, std::string const& what) {
    std::lock_guard lock(report_mutex);
    if (!ok) ++failures;
    std::printf("%s rank %d: %s\n", ok ? "ok" : "FAILED", rank, what.c_str());
}

std::vector<float> rank_floats(int rank, std::size_t n) {
    std::mt19937_64 rng(1234 + 7919 * static_cast<std::uint64_t>(rank));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

template <class T>
T* device_copy(std::vector<T> const& host) {
    T* device = nullptr;
    nccl_detail::check(cudaMalloc(&device, host.size() * sizeof(T) + 1), "cudaMalloc");
    nccl_detail::check(
        cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
        "cudaMemcpy");
    return device;
}

template <class T>
std::vector<T> host_copy(T const* device, std::size_t n) {
    std::vector<T> host(n);
    nccl_detail::check(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost),
                       "cudaMemcpy");
    return host;
}

void run_rank(ncclUniqueId const& id, int rank, int ranks) {
    nccl_detail::check(cudaSetDevice(rank), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    nccl_detail::check(cudaStreamCreate(&stream), "cudaStreamCreate");
    {
        NcclCommunicator comm(id, rank, ranks, stream);
        expect(comm.rank() == rank && comm.size() == ranks, rank, "rank and size");

        std::size_t const n = (1 << 16) + 5;
        float* data = device_copy(rank_floats(rank, n));
        comm.all_reduce_sum(std::span(data, n));
        comm.synchronize();
        auto const summed = host_copy(data, n);
        double worst = 0;
        // Every rank's inputs regenerated once; the sum bound is (p-1) eps sum |x|.
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < ranks; ++r) inputs.push_back(rank_floats(r, n));
        for (std::size_t i = 0; i < n; ++i) {
            double sum = 0, magnitude = 0;
            for (auto const& input : inputs) {
                sum += input[i];
                magnitude += std::abs(input[i]);
            }
            double const bound = (ranks - 1) * std::numeric_limits<float>::epsilon() * magnitude +
                                 std::numeric_limits<float>::denorm_min();
            worst = std::max(worst, std::abs(summed[i] - sum) / bound);
        }
        expect(worst <= 1, rank, "all_reduce_sum scaled error " + std::to_string(worst));

        std::vector<float> const mine_host = rank_floats(rank, 1000);
        float* mine = device_copy(mine_host);
        float* all = nullptr;
        nccl_detail::check(cudaMalloc(&all, 1000 * ranks * sizeof(float)), "cudaMalloc");
        comm.all_gather(std::span<float const>(mine, 1000), std::span(all, 1000 * ranks));
        comm.synchronize();
        auto const gathered = host_copy(all, 1000 * static_cast<std::size_t>(ranks));
        bool gathered_ok = true;
        for (int r = 0; r < ranks; ++r) {
            gathered_ok &= std::memcmp(gathered.data() + r * 1000, rank_floats(r, 1000).data(),
                                       1000 * sizeof(float)) == 0;
        }
        expect(gathered_ok, rank, "all_gather bitwise");

        if (ranks >= 2) {
            // A ring on the device: NCCL pairs a send and a receive issued in one group.
            std::size_t const bytes = 10007;
            std::vector<std::byte> outgoing_host(bytes);
            for (std::size_t i = 0; i < bytes; ++i) outgoing_host[i] = std::byte(i * 7 + rank);
            std::byte* outgoing = device_copy(outgoing_host);
            std::byte* incoming = nullptr;
            nccl_detail::check(cudaMalloc(&incoming, bytes), "cudaMalloc");
            int const next = (rank + 1) % ranks, previous = (rank + ranks - 1) % ranks;
            nccl_detail::check(ncclGroupStart(), "ncclGroupStart");
            comm.send(std::span<std::byte const>(outgoing, bytes), next, 0);
            comm.recv(std::span(incoming, bytes), previous, 0);
            nccl_detail::check(ncclGroupEnd(), "ncclGroupEnd");
            comm.synchronize();
            auto const received = host_copy(incoming, bytes);
            bool ring_ok = true;
            for (std::size_t i = 0; i < bytes; ++i) {
                ring_ok &= received[i] == std::byte(i * 7 + previous);
            }
            expect(ring_ok, rank, "ring send/recv of 10007 bytes");
            cudaFree(outgoing);
            cudaFree(incoming);
        }
        {
            // exchange() with itself: a send and a receive that only a shared group completes.
            std::size_t const bytes = 4099;
            std::vector<std::byte> mine_bytes(bytes);
            for (std::size_t i = 0; i < bytes; ++i) mine_bytes[i] = std::byte(i * 13 + rank);
            std::byte* outgoing = device_copy(mine_bytes);
            std::byte* incoming = nullptr;
            nccl_detail::check(cudaMalloc(&incoming, bytes), "cudaMalloc");
            comm.exchange(std::span<std::byte const>(outgoing, bytes), rank,
                          std::span(incoming, bytes), rank, 0);
            comm.synchronize();
            expect(host_copy(incoming, bytes) == mine_bytes, rank, "exchange with itself");

            cudaFree(outgoing);
            cudaFree(incoming);
        }
        if (ranks >= 2) {
            // A ring through exchange(), no group of the caller's: no deadlock, right bytes.
            std::size_t const bytes = 65537;
            std::vector<std::byte> outgoing_host(bytes);
            for (std::size_t i = 0; i < bytes; ++i) outgoing_host[i] = std::byte(i * 3 + rank);
            std::byte* outgoing = device_copy(outgoing_host);
            std::byte* incoming = nullptr;
            nccl_detail::check(cudaMalloc(&incoming, bytes), "cudaMalloc");
            int const next = (rank + 1) % ranks, previous = (rank + ranks - 1) % ranks;
            comm.exchange(std::span<std::byte const>(outgoing, bytes), next,
                          std::span(incoming, bytes), previous, 0);
            comm.synchronize();
            auto const received = host_copy(incoming, bytes);
            bool ring_ok = true;
            for (std::size_t i = 0; i < bytes; ++i)
                ring_ok &= received[i] == std::byte(i * 3 + previous);
            expect(ring_ok, rank, "ring through exchange() without a caller's group");
            cudaFree(outgoing);
            cudaFree(incoming);

            // A KV transfer, rank 0 to rank 1: the header as host bytes (a host pointer handed
            // to ncclSend, or a header read before its receive completed, fails here), the
            // payload in device memory.
            KvTransferHeader header;
            header.request_id = 0x1234'5678'9abc'def0;
            header.tokens = 37;
            header.block_size = 16;
            header.layers = 2;
            header.kv_heads = 2;
            header.head_dim = 64;
            header.key_codec = codec_id("bf16");
            header.value_codec = codec_id("fp32");
            header.key_vector_bytes = 128;
            header.value_vector_bytes = 256;
            header.first_token = 4242;
            std::size_t const payload_bytes = header.payload_bytes();
            std::vector<std::byte> payload_host(payload_bytes);
            for (std::size_t i = 0; i < payload_bytes; ++i)
                payload_host[i] = std::byte((i * 131) >> 3);
            if (rank == 0) {
                std::byte* payload = device_copy(payload_host);
                send_kv(comm, header, std::span<std::byte const>(payload, payload_bytes), 1, 7);
                comm.synchronize();
                cudaFree(payload);
            } else if (rank == 1) {
                KvTransferHeader const received_header = recv_kv_header(comm, 0, 7);
                expect(received_header == header, rank, "KV transfer header arrives whole");
                std::byte* payload = nullptr;
                nccl_detail::check(cudaMalloc(&payload, received_header.payload_bytes()),
                                   "cudaMalloc");
                recv_kv_payload(comm, received_header,
                                std::span(payload, received_header.payload_bytes()), 0, 7);
                comm.synchronize();
                expect(host_copy(payload, payload_bytes) == payload_host, rank,
                       "KV transfer payload (device memory) bitwise");
                cudaFree(payload);
            }
        }
        comm.barrier();
        cudaFree(data);
        cudaFree(mine);
        cudaFree(all);
    }
    cudaStreamDestroy(stream);
}

}  // namespace

int main() {
    static_assert(Communicator<NcclCommunicator>);
    // No GPU on this machine: skipped; a GPU CUDA cannot use: a failure, never a skip.
    int devices = 0;
    try {
        devices = kernels::cuda::device_count();
    } catch (std::exception const& error) {
        std::printf("FAILED: %s\n", error.what());
        return 1;
    }
    if (devices == 0) {
        std::printf("no CUDA device (no GPU on this machine): skipped\n");
        return skipped_exit_code;
    }
    std::printf("%d GPU(s): one NCCL rank each\n", devices);
    ncclUniqueId id;
    nccl_detail::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(devices);
    for (int rank = 0; rank < devices; ++rank) {
        threads.emplace_back([&, rank] {
            try {
                run_rank(id, rank, devices);
            } catch (...) {
                errors[rank] = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int rank = 0; rank < devices; ++rank) {
        if (!errors[rank]) continue;
        try {
            std::rethrow_exception(errors[rank]);
        } catch (std::exception const& e) {
            std::printf("FAILED rank %d: %s\n", rank, e.what());
            ++failures;
        }
    }
    std::printf("%s cuda_nccl_communicator_test on %d rank(s)\n", failures == 0 ? "PASS" : "FAIL",
                devices);
    return failures == 0 ? 0 : 1;
}
