// The KV transfer header's wire format, on one process: round trips, and every corruption the
// receiver must notice; the disaggregation frames (a request going to the decode rank, a token
// event coming back) likewise; and, over a stand-in device communicator, that the header travels as
// host bytes while only the payload goes through device send/recv. The cross-process transfer
// is mpi_kv_transfer_test (and, on two GPUs, cuda_nccl_communicator_test).
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <deque>
#include <limits>
#include <stdexcept>
#include <vector>

#include <tinfer/distributed/disaggregation.hpp>
#include <tinfer/distributed/kv_transfer.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::distributed;

namespace {

// A device communicator (Backend Cuda) on one process, as NcclCommunicator behaves: send and
// recv accept only "device memory" (spans inside buffers the test registered as such) and are
// queued; host bytes go through send_host_bytes / recv_host_bytes.
struct StandInDeviceCommunicator {
    using Backend = Cuda;
    std::vector<std::span<std::byte const>> device_memory;
    std::deque<std::vector<std::byte>> device_messages, host_messages;

    bool on_device(std::span<std::byte const> bytes) const {
        for (auto const region : device_memory)
            if (bytes.data() >= region.data() &&
                bytes.data() + bytes.size() <= region.data() + region.size())
                return true;
        return false;
    }
    static std::vector<std::byte> take(std::deque<std::vector<std::byte>>& queue,
                                       std::size_t bytes) {
        if (queue.empty() || queue.front().size() != bytes)
            throw std::logic_error("no message of that size");
        auto message = std::move(queue.front());
        queue.pop_front();
        return message;
    }

    int rank() const { return 0; }
    int size() const { return 2; }
    void all_reduce_sum(std::span<float>) {}
    void all_gather(std::span<float const>, std::span<float>) {}
    void barrier() {}
    void send(std::span<std::byte const> bytes, int, int) {
        if (!on_device(bytes)) throw std::logic_error("host memory handed to a device send");
        device_messages.emplace_back(bytes.begin(), bytes.end());
    }
    void recv(std::span<std::byte> bytes, int, int) {
        if (!on_device(bytes)) throw std::logic_error("host memory handed to a device recv");
        auto const message = take(device_messages, bytes.size());
        std::memcpy(bytes.data(), message.data(), bytes.size());
    }
    void send_host_bytes(std::span<std::byte const> bytes, int, int) {
        host_messages.emplace_back(bytes.begin(), bytes.end());
    }
    void recv_host_bytes(std::span<std::byte> bytes, int, int) {
        auto const message = take(host_messages, bytes.size());
        std::memcpy(bytes.data(), message.data(), bytes.size());
    }
};
static_assert(Communicator<StandInDeviceCommunicator> &&
              HostBytesChannel<StandInDeviceCommunicator>);

KvTransferHeader random_header(std::mt19937_64& rng) {
    std::uniform_int_distribution<std::uint32_t> small(1, 4096);
    KvTransferHeader h;
    h.request_id = rng();
    h.tokens = small(rng);
    h.block_size = small(rng) % 64 + 1;
    h.layers = small(rng) % 128 + 1;
    h.first_kv_head = small(rng) % 8;
    h.kv_heads = small(rng) % 16 + 1;
    h.head_dim = small(rng) % 256 + 1;
    h.key_codec = static_cast<std::uint32_t>(rng());
    h.value_codec = static_cast<std::uint32_t>(rng());
    h.key_vector_bytes = small(rng);
    h.value_vector_bytes = small(rng);
    h.first_token = static_cast<std::int32_t>(rng());
    return h;
}

// Every field the decode rank reads, drawn at random: ranges far beyond any real request's.
GenerationRequest random_request(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> count(0, 9);
    std::uniform_real_distribution<float> real(-4, 4);
    GenerationRequest r;
    r.prompt_tokens.resize(static_cast<std::size_t>(count(rng)) + 1);
    for (auto& t : r.prompt_tokens) t = static_cast<std::int32_t>(rng());
    r.max_tokens = static_cast<int>(rng());
    r.n = count(rng) + 1;
    if (rng() % 2) r.seed = rng();
    for (int i = count(rng); i > 0; --i) r.stop.push_back(std::string(count(rng), char(rng())));
    for (int i = count(rng); i > 0; --i)
        r.stop_token_ids.push_back(static_cast<std::int32_t>(rng()));
    r.ignore_eos = rng() % 2;
    r.sampling.temperature = real(rng);
    r.sampling.top_k = static_cast<int>(rng());
    r.sampling.top_p = real(rng);
    r.sampling.min_p = real(rng);
    r.sampling.repetition_penalty = real(rng);
    r.sampling.presence_penalty = real(rng);
    r.sampling.frequency_penalty = real(rng);
    for (int i = count(rng); i > 0; --i)
        r.sampling.logit_bias.emplace_back(static_cast<std::int32_t>(rng()), real(rng));
    if (rng() % 2) r.sampling.logit_bias.emplace_back(7, -std::numeric_limits<float>::infinity());
    r.sampling.seed = rng();
    r.sampling.logprobs = rng() % 2;
    r.sampling.top_logprobs = static_cast<int>(rng());
    r.priority = static_cast<int>(rng());
    r.tenant = static_cast<std::uint32_t>(rng());
    r.draft_tokens = static_cast<int>(rng());
    return r;
}

bool same_request(GenerationRequest const& a, GenerationRequest const& b) {
    auto const& p = a.sampling;
    auto const& q = b.sampling;
    return a.prompt_tokens == b.prompt_tokens && a.max_tokens == b.max_tokens && a.n == b.n &&
           a.seed == b.seed && a.stop == b.stop && a.stop_token_ids == b.stop_token_ids &&
           a.ignore_eos == b.ignore_eos && p.temperature == q.temperature && p.top_k == q.top_k &&
           p.top_p == q.top_p && p.min_p == q.min_p &&
           p.repetition_penalty == q.repetition_penalty &&
           p.presence_penalty == q.presence_penalty && p.frequency_penalty == q.frequency_penalty &&
           p.logit_bias == q.logit_bias && p.seed == q.seed && p.logprobs == q.logprobs &&
           p.top_logprobs == q.top_logprobs && a.priority == b.priority && a.tenant == b.tenant &&
           a.draft_tokens == b.draft_tokens;
}

TokenEvent random_event(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> count(0, 6);
    TokenEvent e{.id = sched::RequestId{rng()}, .token = static_cast<std::int32_t>(rng())};
    e.text = std::string(count(rng), char(rng()));
    if (rng() % 2) e.logprob = -static_cast<float>(rng() % 1000) / 7;
    for (int i = count(rng); i > 0; --i)
        e.top_logprobs.push_back({static_cast<std::int32_t>(rng()), -float(rng() % 100)});
    if (rng() % 2) e.finish = static_cast<FinishReason>(rng() % 4);
    if (rng() % 2) e.error = std::string(count(rng), char(rng()));
    e.speculation = {.rounds = static_cast<long>(rng() % 1000),
                     .drafted = static_cast<long>(rng() % 1000),
                     .accepted = static_cast<long>(rng() % 1000),
                     .tokens_generated = static_cast<long>(rng() % 1000)};
    return e;
}

bool same_event(TokenEvent const& a, TokenEvent const& b) {
    return a.id == b.id && a.token == b.token && a.text == b.text && a.logprob == b.logprob &&
           a.top_logprobs == b.top_logprobs && a.finish == b.finish && a.error == b.error &&
           a.speculation.rounds == b.speculation.rounds &&
           a.speculation.drafted == b.speculation.drafted &&
           a.speculation.accepted == b.speculation.accepted &&
           a.speculation.tokens_generated == b.speculation.tokens_generated;
}

// Every proper prefix of a frame is refused with KvTransferError (never read past its end).
template <class Take>
int truncations_refused(std::vector<std::byte> const& frame, Take take) {
    int refused = 0;
    for (std::size_t n = 0; n < frame.size(); ++n) {
        wire::FrameReader in{std::span<std::byte const>(frame).first(n)};
        try {
            take(in);
        } catch (KvTransferError const&) {
            ++refused;
        }
    }
    return refused;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(disaggregation_frames)

BOOST_AUTO_TEST_CASE(requests_and_events_round_trip_and_truncations_are_refused) {
    auto rng = testing::seeded_rng(3002);
    for (int i = 0; i < 300; ++i) {
        GenerationRequest const request = random_request(rng);
        wire::FrameWriter out;
        wire::put_request(out, request);
        wire::FrameReader in(out.bytes());
        BOOST_TEST(same_request(wire::take_request(in), request));
        BOOST_TEST(in.done());
        std::vector<std::byte> const frame = out.bytes();
        BOOST_TEST(truncations_refused(frame, [](wire::FrameReader& r) { wire::take_request(r); }) ==
                   static_cast<int>(frame.size()));

        TokenEvent const event = random_event(rng);
        wire::FrameWriter back;
        wire::put_event(back, event);
        wire::FrameReader event_in(back.bytes());
        BOOST_TEST(same_event(wire::take_event(event_in), event));
        BOOST_TEST(event_in.done());
        std::vector<std::byte> const event_frame = back.bytes();
        BOOST_TEST(truncations_refused(event_frame, [](wire::FrameReader& r) { wire::take_event(r); }) ==
                   static_cast<int>(event_frame.size()));
    }
}

// A count that claims more elements than the frame holds is refused before anything is
// allocated (a corrupt peer must not make the decode rank allocate terabytes).
BOOST_AUTO_TEST_CASE(a_count_beyond_the_frame_is_refused) {
    wire::FrameWriter out;
    out.put(std::uint64_t{1} << 60);  // prompt tokens
    out.put(std::int32_t{5});
    wire::FrameReader in(out.bytes());
    BOOST_CHECK_EXCEPTION(wire::take_request(in), KvTransferError, [](KvTransferError const& e) {
        return std::string(e.what()).find("exceeds the frame") != std::string::npos;
    });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kv_transfer_format)

BOOST_AUTO_TEST_CASE(headers_round_trip) {
    auto rng = testing::seeded_rng(3001);
    for (int i = 0; i < 1000; ++i) {
        KvTransferHeader const h = random_header(rng);
        auto const bytes = serialize(h);
        BOOST_TEST((deserialize_kv_header(bytes) == h));
    }
    // Extremes of every field's range survive too.
    KvTransferHeader extreme = random_header(rng);
    extreme.request_id = std::numeric_limits<std::uint64_t>::max();
    extreme.first_token = std::numeric_limits<std::int32_t>::min();
    BOOST_TEST((deserialize_kv_header(serialize(extreme)) == extreme));
}

// Little-endian by definition, not by this machine's layout: the first bytes are the magic
// "TKV1", then version 1, then the request id's low byte.
BOOST_AUTO_TEST_CASE(the_encoding_is_fixed_little_endian) {
    static_assert(kv_transfer_header_bytes == 4 + 2 + 8 + 11 * 4 + 8);
    KvTransferHeader h;
    h.request_id = 0x0102030405060708;
    h.block_size = 16;
    auto const bytes = serialize(h);
    BOOST_TEST(static_cast<char>(bytes[0]) == 'T');
    BOOST_TEST(static_cast<char>(bytes[1]) == 'K');
    BOOST_TEST(static_cast<char>(bytes[2]) == 'V');
    BOOST_TEST(static_cast<char>(bytes[3]) == '1');
    BOOST_TEST(static_cast<int>(bytes[4]) == 1);
    BOOST_TEST(static_cast<int>(bytes[5]) == 0);
    BOOST_TEST(static_cast<int>(bytes[6]) == 0x08);
    BOOST_TEST(static_cast<int>(bytes[13]) == 0x01);
}

// Whole blocks, each [layers][K, V][kv_heads][block_size][vector bytes].
BOOST_AUTO_TEST_CASE(payload_size_follows_the_block_layout) {
    KvTransferHeader h;
    h.tokens = 37;
    h.block_size = 16;
    h.layers = 30;
    h.kv_heads = 3;
    h.head_dim = 64;
    h.key_vector_bytes = 64 * 2;    // fp16
    h.value_vector_bytes = 64 + 4;  // int8 codes and a float scale
    BOOST_TEST(h.blocks() == 3u);   // 16 + 16 + 5 tokens
    BOOST_TEST(h.block_bytes() == 30u * 3 * 16 * (128 + 68));
    BOOST_TEST(h.payload_bytes() == 3u * 30 * 3 * 16 * (128 + 68));
}

BOOST_AUTO_TEST_CASE(corrupt_headers_are_refused) {
    auto rng = testing::seeded_rng(3002);
    KvTransferHeader const h = random_header(rng);
    auto const good = serialize(h);

    auto bad_magic = good;
    bad_magic[0] = std::byte{'X'};
    BOOST_CHECK_THROW(deserialize_kv_header(bad_magic), KvTransferError);

    auto bad_version = good;
    bad_version[4] = std::byte{2};
    BOOST_CHECK_THROW(deserialize_kv_header(bad_version), KvTransferError);

    // Changing one field but not the payload size it implies: the recorded size disagrees.
    auto bad_tokens = good;
    bad_tokens[14] ^= std::byte{0x40};  // a bit of `tokens`, which follows the request id
    BOOST_CHECK_THROW(deserialize_kv_header(bad_tokens), KvTransferError);

    BOOST_CHECK_THROW(deserialize_kv_header(std::span(good).first(good.size() - 1)),
                      KvTransferError);
}

BOOST_AUTO_TEST_CASE(codec_ids_tell_codecs_apart) {
    static_assert(codec_id("fp16") != codec_id("bf16"));
    static_assert(codec_id("int8") != codec_id("int4"));
    static_assert(codec_id("fp16") == codec_id("fp16"));
    // FNV-1a's published test vector: "a" hashes to 0xe40c292c.
    static_assert(codec_id("a") == 0xe40c292cu);
}

// On a device communicator the header (host data) never reaches send/recv, which take device
// memory; the payload does, and arrives whole.
BOOST_AUTO_TEST_CASE(a_device_communicator_gets_the_header_as_host_bytes) {
    auto rng = testing::seeded_rng(3002);
    KvTransferHeader h = random_header(rng);
    h.tokens = 37;
    h.block_size = 16;
    h.layers = 2;
    h.kv_heads = 2;
    h.key_vector_bytes = 128;
    h.value_vector_bytes = 256;
    std::vector<std::byte> sent(h.payload_bytes()), received(h.payload_bytes());
    for (auto& b : sent) b = std::byte(rng() & 0xff);
    StandInDeviceCommunicator comm;
    comm.device_memory = {sent, received};

    send_kv(comm, h, sent, 1, 5);
    BOOST_TEST(comm.host_messages.size() == 1u);
    BOOST_TEST(comm.device_messages.size() == 1u);
    KvTransferHeader const got = recv_kv_header(comm, 0, 5);
    BOOST_TEST((got == h));
    recv_kv_payload(comm, got, received, 0, 5);
    BOOST_TEST((received == sent));
    BOOST_TEST(comm.host_messages.empty());
    BOOST_TEST(comm.device_messages.empty());
}

BOOST_AUTO_TEST_SUITE_END()
