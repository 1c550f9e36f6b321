// The prefill->decode hand-off across two processes: rank 0 plays the prefill worker and ships
// a request's KV blocks (a fake payload with a recognisable pattern) with its header; rank 1,
// the decode worker, sizes its buffer from the header alone and must get every byte. Then the
// roles swap with one TP rank's share of the heads, over a communicator that cuts messages
// into small chunks.
#include <random>
#include <vector>

#include <tinfer/distributed/kv_transfer.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>

#include "mpi_testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;
using namespace tinfer::model;

namespace {

constexpr ModelConfig shape = presets::smollm2_135m;
constexpr std::uint32_t fp16_vector_bytes = shape.head_dim * 2;
constexpr std::uint32_t int8_vector_bytes = shape.head_dim + sizeof(float);  // codes + scale

KvTransferHeader whole_model_header(std::uint64_t seed) {
    KvTransferHeader h;
    h.request_id = 0xfeed'0000'0000'0000ull | (seed & 0xffff'ffff);
    h.tokens = 37;  // two full blocks of 16 and one of 5
    h.block_size = 16;
    h.layers = shape.layers;
    h.first_kv_head = 0;
    h.kv_heads = shape.kv_heads;
    h.head_dim = shape.head_dim;
    h.key_codec = codec_id("fp16");
    h.value_codec = codec_id("int8");
    h.key_vector_bytes = fp16_vector_bytes;
    h.value_vector_bytes = int8_vector_bytes;
    h.first_token = 4321;
    return h;
}

// Rank 1 of a TP-3 group: its one KV head.
KvTransferHeader shard_header(std::uint64_t seed) {
    using Shard = TensorParallelShard<shape, 3>;
    KvTransferHeader h = whole_model_header(seed);
    h.request_id += 1;
    h.tokens = 100;
    h.block_size = 32;
    h.first_kv_head = static_cast<std::uint32_t>(Shard::kv_heads_of(1).first);
    h.kv_heads = Shard::kv_heads;
    h.key_codec = h.value_codec = codec_id("fp16");
    h.value_vector_bytes = fp16_vector_bytes;
    h.first_token = -1;
    return h;
}

std::vector<std::byte> payload_for(KvTransferHeader const& h, std::uint64_t seed) {
    std::mt19937_64 rng(seed ^ h.request_id);
    std::vector<std::byte> bytes(h.payload_bytes());
    for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
    return bytes;
}

void hand_off(MpiCommunicator& comm, testing::mpi::Checks& checks, KvTransferHeader const& sent,
              std::uint64_t seed, int prefill_rank, int decode_rank, int tag) {
    if (comm.rank() == prefill_rank) {
        send_kv(comm, sent, payload_for(sent, seed), decode_rank, tag);
    } else if (comm.rank() == decode_rank) {
        KvTransferHeader const received = recv_kv_header(comm, prefill_rank, tag);
        checks.expect(received == sent,
                      "header round trip for request " + std::to_string(sent.request_id));
        std::vector<std::byte> wrong_size(received.payload_bytes() + 1);
        bool refused = false;
        try {
            recv_kv_payload(comm, received, wrong_size, prefill_rank, tag);
        } catch (KvTransferError const&) {
            refused = true;
        }
        checks.expect(refused, "a payload buffer not sized from the header must be refused");
        std::vector<std::byte> payload(received.payload_bytes(), std::byte{0x5A});
        recv_kv_payload(comm, received, payload, prefill_rank, tag);
        checks.expect(payload == payload_for(sent, seed),
                      "payload of " + std::to_string(payload.size()) + " bytes arrived intact");
    }
}

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "distributed_mpi_kv_transfer_test", [](auto& checks) {
        std::uint64_t const seed = testing::mpi::shared_seed();
        MpiCommunicator comm;
        if (!checks.expect(comm.size() == 2, "needs a prefill rank and a decode rank")) return;

        KvTransferHeader const whole = whole_model_header(seed);
        checks.expect(whole.blocks() == 3, "37 tokens in blocks of 16 are 3 blocks");
        checks.expect(whole.payload_bytes() == 3ull * shape.layers * shape.kv_heads * 16 *
                                                   (fp16_vector_bytes + int8_vector_bytes),
                      "payload size follows the block layout");
        hand_off(comm, checks, whole, seed, 0, 1, 40);

        MpiCommunicator chunked(MPI_COMM_WORLD, 4096);
        hand_off(chunked, checks, shard_header(seed), seed, 1, 0, 41);
        comm.barrier();
    });
}
