#pragma once
// One layer of a paged KV cache as the device kernels address it (layout: paged_kv.cuh), and the
// check that a launch's codecs are the cache's: plain C++ (the kernels' readers are in
// paged_kv.cuh), so the CPU tests check which layers a launch accepts.
#include <cstddef>
#include <string>
#include <string_view>

#include <tinfer/core/error.hpp>
#include <tinfer/core/host_device.hpp>

namespace tinfer::kernels::cuda {

struct PagedKvLayer {
    std::byte* storage = nullptr;       // [blocks][block_bytes], device memory
    std::size_t block_bytes = 0;        // bytes of one block, every layer included
    std::size_t key_offset = 0;         // where this layer's K vectors start inside a block
    std::size_t value_offset = 0;       // where this layer's V vectors start inside a block
    int block_size = 0;                 // tokens per block
    int const* block_tables = nullptr;  // [seqs][table_stride] physical block ids
    int table_stride = 0;
    // The codecs of the cache this view was made for, and their vector bytes (paged_kv_layer
    // sets them from the cache type; empty / 0: not recorded, unchecked). The launchers compare
    // them with their codecs (check_layer_codecs), so V is never read with K's codec when the two
    // differ, sizes alike or not (int8 and fp8 vectors are both 4 + head_dim bytes).
    std::string_view key_codec;
    std::string_view value_codec;
    std::size_t key_vector_bytes = 0;
    std::size_t value_vector_bytes = 0;

    TINFER_HOST_DEVICE std::byte* vector(std::size_t part_offset, std::size_t vector_bytes, int seq,
                                         int kv_head, int position) const {
        int const block =
            block_tables[static_cast<std::size_t>(seq) * table_stride + position / block_size];
        int const slot = position % block_size;
        return storage + static_cast<std::size_t>(block) * block_bytes + part_offset +
               (static_cast<std::size_t>(kv_head) * block_size + slot) * vector_bytes;
    }
};

// The layer view of a kv::PagedKvCache type's device mirror: same constants, same offsets.
template <class Cache>
PagedKvLayer paged_kv_layer(std::byte* device_storage, int layer, int const* device_block_tables,
                            int table_stride) {
    constexpr std::size_t layer_bytes = Cache::layer_token_bytes * Cache::block_size;
    std::size_t const key_offset = static_cast<std::size_t>(layer) * layer_bytes;
    return PagedKvLayer{
        .storage = device_storage,
        .block_bytes = Cache::bytes_per_block,
        .key_offset = key_offset,
        .value_offset = key_offset + static_cast<std::size_t>(Cache::config.kv_heads) *
                                         Cache::block_size * Cache::key_vector_bytes,
        .block_size = Cache::block_size,
        .block_tables = device_block_tables,
        .table_stride = table_stride,
        .key_codec = Cache::KeyCodec::name,
        .value_codec = Cache::ValueCodec::name,
        .key_vector_bytes = Cache::key_vector_bytes,
        .value_vector_bytes = Cache::value_vector_bytes,
    };
}

// A layer made for other codecs than the kernel's is refused (its V would be decoded with the
// wrong codec, or at the wrong vector size).
template <class KeyCodec, class ValueCodec, int HeadDim>
void check_layer_codecs(PagedKvLayer const& layer, char const* kernel) {
    constexpr std::size_t key_bytes = KeyCodec::template vector_bytes<HeadDim>;
    constexpr std::size_t value_bytes = ValueCodec::template vector_bytes<HeadDim>;
    bool const key_ok = (layer.key_vector_bytes == 0 || layer.key_vector_bytes == key_bytes) &&
                        (layer.key_codec.empty() || layer.key_codec == KeyCodec::name);
    bool const value_ok =
        (layer.value_vector_bytes == 0 || layer.value_vector_bytes == value_bytes) &&
        (layer.value_codec.empty() || layer.value_codec == ValueCodec::name);
    auto const recorded = [](std::string_view codec) {
        return codec.empty() ? std::string("unrecorded") : std::string(codec);
    };
    if (!key_ok || !value_ok)
        throw Error(std::string(kernel) + ": the cache holds K vectors of " +
                    std::to_string(layer.key_vector_bytes) + " bytes (" +
                    recorded(layer.key_codec) + ") and V vectors of " +
                    std::to_string(layer.value_vector_bytes) + " (" + recorded(layer.value_codec) +
                    "), the kernel's codecs (" + std::string(KeyCodec::name) + ", " +
                    std::string(ValueCodec::name) + ") write " + std::to_string(key_bytes) +
                    " and " + std::to_string(value_bytes) +
                    ": pass the cache's value codec as the kernel's ValueCodec");
}

}  // namespace tinfer::kernels::cuda
