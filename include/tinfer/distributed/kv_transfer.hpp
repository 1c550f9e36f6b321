#pragma once
// Prefill/decode disaggregation's transport: a prefill worker ships one request's KV cache to a
// decode worker as two messages on one (peer, tag): a fixed-size header, then the payload.
//
// The payload is the request's KV blocks in sequence order, each block stored exactly as
// PagedKvCache stores one ([layers][K, V][kv_heads][block_size][vector bytes]), so the
// receiver copies each block into a block it allocates, with no re-layout. The last block is
// sent whole; its positions at or past `tokens` carry no meaning. Under tensor parallelism,
// rank r of the prefill group sends its KV heads (first_kv_head, kv_heads) to rank r of the
// decode group.
//
// The header is encoded field by field, little-endian, so both sides agree whatever their
// compilers' struct padding.
//
// The header is host data whatever the communicator. A device communicator (Backend Cuda, e.g.
// NcclCommunicator) takes device memory in send/recv and completes them asynchronously on its
// stream, so handing it the header's host array would give NCCL a host pointer, and reading the
// header right after recv would read it before it arrived. Such a communicator moves the header
// through its host-bytes channel instead (send_host_bytes / recv_host_bytes: host memory,
// recv_host_bytes complete on return); only the payload, device memory, goes through send/recv.
// On a device communicator the payload is complete for later work on its stream (or for the
// host after its synchronize()).
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <tinfer/core/backend.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/communicator.hpp>

namespace tinfer::distributed {

// A stable id for a KV codec, derived from its name (FNV-1a, 32 bits), so any codec type has
// one without a registry and both sides can check they decode with the same one.
constexpr std::uint32_t codec_id(std::string_view codec_name) {
    std::uint32_t hash = 2166136261u;
    for (char const c : codec_name) {
        hash ^= static_cast<std::uint8_t>(c);
        hash *= 16777619u;
    }
    return hash;
}

struct KvTransferHeader {
    static constexpr std::uint32_t magic = 0x3156'4b54;  // "TKV1" read as little-endian bytes
    static constexpr std::uint16_t version = 1;

    std::uint64_t request_id = 0;
    std::uint32_t tokens = 0;      // positions with KV: the prompt, prefilled
    std::uint32_t block_size = 0;  // tokens per block
    std::uint32_t layers = 0;
    std::uint32_t first_kv_head = 0;  // the global index of the first KV head sent
    std::uint32_t kv_heads = 0;       // KV heads sent (all of them, or one TP rank's)
    std::uint32_t head_dim = 0;
    std::uint32_t key_codec = 0;  // codec_id of the K codec
    std::uint32_t value_codec = 0;
    std::uint32_t key_vector_bytes = 0;  // one token, one head, encoded
    std::uint32_t value_vector_bytes = 0;
    std::int32_t first_token = 0;  // sampled by the prefill worker from the last prompt logits

    constexpr std::uint64_t blocks() const {
        return block_size == 0 ? 0 : (std::uint64_t{tokens} + block_size - 1) / block_size;
    }
    constexpr std::uint64_t block_bytes() const {
        return std::uint64_t{layers} * kv_heads * block_size *
               (std::uint64_t{key_vector_bytes} + value_vector_bytes);
    }
    constexpr std::uint64_t payload_bytes() const { return blocks() * block_bytes(); }

    friend constexpr bool operator==(KvTransferHeader const&, KvTransferHeader const&) = default;
};

// magic, version, then every field in declaration order, then payload_bytes as a check.
inline constexpr std::size_t kv_transfer_header_bytes = [] {
    KvTransferHeader const h;
    return sizeof KvTransferHeader::magic + sizeof KvTransferHeader::version + sizeof h.request_id +
           sizeof h.tokens + sizeof h.block_size + sizeof h.layers + sizeof h.first_kv_head +
           sizeof h.kv_heads + sizeof h.head_dim + sizeof h.key_codec + sizeof h.value_codec +
           sizeof h.key_vector_bytes + sizeof h.value_vector_bytes + sizeof h.first_token +
           sizeof h.payload_bytes();
}();

// A header that does not describe a payload this side can read (wrong magic or version,
// a payload size that does not follow from the fields).
struct KvTransferError : Error {
    using Error::Error;
};

namespace transfer_detail {

template <class Unsigned>
constexpr void put(std::byte*& out, Unsigned value) {
    for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
        *out++ = static_cast<std::byte>(value >> (8 * i) & 0xff);
    }
}

template <class Unsigned>
constexpr Unsigned take(std::byte const*& in) {
    Unsigned value = 0;
    for (std::size_t i = 0; i < sizeof(Unsigned); ++i) {
        value |= static_cast<Unsigned>(static_cast<Unsigned>(*in++) << (8 * i));
    }
    return value;
}

}  // namespace transfer_detail

constexpr std::array<std::byte, kv_transfer_header_bytes> serialize(KvTransferHeader const& h) {
    using transfer_detail::put;
    std::array<std::byte, kv_transfer_header_bytes> bytes{};
    std::byte* out = bytes.data();
    put(out, KvTransferHeader::magic);
    put(out, KvTransferHeader::version);
    put(out, h.request_id);
    put(out, h.tokens);
    put(out, h.block_size);
    put(out, h.layers);
    put(out, h.first_kv_head);
    put(out, h.kv_heads);
    put(out, h.head_dim);
    put(out, h.key_codec);
    put(out, h.value_codec);
    put(out, h.key_vector_bytes);
    put(out, h.value_vector_bytes);
    put(out, static_cast<std::uint32_t>(h.first_token));
    put(out, h.payload_bytes());
    return bytes;
}

inline KvTransferHeader deserialize_kv_header(std::span<std::byte const> bytes) {
    using transfer_detail::take;
    if (bytes.size() != kv_transfer_header_bytes) {
        throw KvTransferError("KV transfer header is " + std::to_string(kv_transfer_header_bytes) +
                              " bytes, got " + std::to_string(bytes.size()));
    }
    std::byte const* in = bytes.data();
    if (auto const magic = take<std::uint32_t>(in); magic != KvTransferHeader::magic) {
        throw KvTransferError("not a KV transfer header: magic " + std::to_string(magic));
    }
    if (auto const version = take<std::uint16_t>(in); version != KvTransferHeader::version) {
        throw KvTransferError("KV transfer header version " + std::to_string(version) +
                              ", this build reads version " +
                              std::to_string(KvTransferHeader::version));
    }
    KvTransferHeader h;
    h.request_id = take<std::uint64_t>(in);
    h.tokens = take<std::uint32_t>(in);
    h.block_size = take<std::uint32_t>(in);
    h.layers = take<std::uint32_t>(in);
    h.first_kv_head = take<std::uint32_t>(in);
    h.kv_heads = take<std::uint32_t>(in);
    h.head_dim = take<std::uint32_t>(in);
    h.key_codec = take<std::uint32_t>(in);
    h.value_codec = take<std::uint32_t>(in);
    h.key_vector_bytes = take<std::uint32_t>(in);
    h.value_vector_bytes = take<std::uint32_t>(in);
    h.first_token = static_cast<std::int32_t>(take<std::uint32_t>(in));
    auto const payload_bytes = take<std::uint64_t>(in);
    if (h.block_size == 0) throw KvTransferError("KV transfer header: block_size is 0");
    if (payload_bytes != h.payload_bytes()) {
        throw KvTransferError("KV transfer header: payload of " + std::to_string(payload_bytes) +
                              " bytes, but its fields describe " +
                              std::to_string(h.payload_bytes()));
    }
    return h;
}

// A communicator's way to move host bytes when its spans are device memory: send_host_bytes
// takes host memory (free to reuse on return), recv_host_bytes fills host memory and returns
// once the bytes are there. Same ordering as send/recv on the (peer, tag).
template <class C>
concept HostBytesChannel = requires(C& comm, std::span<std::byte const> outgoing,
                                    std::span<std::byte> incoming, int peer, int tag) {
    comm.send_host_bytes(outgoing, peer, tag);
    comm.recv_host_bytes(incoming, peer, tag);
};

namespace transfer_detail {

template <class C>
inline constexpr bool spans_are_device_memory = std::same_as<typename C::Backend, Cuda>;

template <Communicator C>
void send_host(C& comm, std::span<std::byte const> bytes, int to, int tag) {
    if constexpr (spans_are_device_memory<C>) {
        static_assert(HostBytesChannel<C>,
                      "send_kv: a device communicator (Backend Cuda) needs send_host_bytes / "
                      "recv_host_bytes for the header: its send() takes device memory");
        comm.send_host_bytes(bytes, to, tag);
    } else {
        comm.send(bytes, to, tag);
    }
}

template <Communicator C>
void recv_host(C& comm, std::span<std::byte> bytes, int from, int tag) {
    if constexpr (spans_are_device_memory<C>) {
        static_assert(HostBytesChannel<C>,
                      "recv_kv_header: a device communicator (Backend Cuda) needs "
                      "send_host_bytes / recv_host_bytes for the header: its recv() fills device "
                      "memory, asynchronously");
        comm.recv_host_bytes(bytes, from, tag);
    } else {
        comm.recv(bytes, from, tag);
    }
}

}  // namespace transfer_detail

// Sender: header, then payload, to one peer on one tag (messages between a pair on a tag
// arrive in order). The payload is in the communicator's memory (device memory for a device
// communicator); the header travels as host bytes (see the top of this file).
template <Communicator C>
void send_kv(C& comm, KvTransferHeader const& header, std::span<std::byte const> payload, int to,
             int tag) {
    if (payload.size() != header.payload_bytes()) {
        throw KvTransferError("send_kv: payload is " + std::to_string(payload.size()) +
                              " bytes, the header describes " +
                              std::to_string(header.payload_bytes()));
    }
    auto const encoded = serialize(header);
    transfer_detail::send_host(comm, encoded, to, tag);
    comm.send(payload, to, tag);
}

// Receiver, first half: the header says how much memory (how many blocks) to allocate. It has
// arrived when this returns, on every communicator.
template <Communicator C>
KvTransferHeader recv_kv_header(C& comm, int from, int tag) {
    std::array<std::byte, kv_transfer_header_bytes> encoded;
    transfer_detail::recv_host(comm, encoded, from, tag);
    return deserialize_kv_header(encoded);
}

// Receiver, second half: the payload, into memory sized from the header (the communicator's
// memory; on a device communicator complete for later work on its stream).
template <Communicator C>
void recv_kv_payload(C& comm, KvTransferHeader const& header, std::span<std::byte> payload,
                     int from, int tag) {
    if (payload.size() != header.payload_bytes()) {
        throw KvTransferError("recv_kv_payload: buffer is " + std::to_string(payload.size()) +
                              " bytes, the header describes " +
                              std::to_string(header.payload_bytes()));
    }
    comm.recv(payload, from, tag);
}

}  // namespace tinfer::distributed
