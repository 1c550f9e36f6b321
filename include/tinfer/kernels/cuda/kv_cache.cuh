#pragma once
// Writing and moving paged KV blocks on the device.
//  - append: encodes new tokens' K and V into their slots, one thread per (token, KV head, K|V)
//    vector, with the codec's own encode (so the bytes are exactly what the host cache writes);
//  - copy_blocks: block-to-block copies inside the device pool (copy-on-write of shared blocks,
//    forks), many in one launch;
//  - swap_blocks: whole blocks between a host pool and the device pool (preemption by swap).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/paged_kv.cuh>

namespace tinfer::kernels::cuda {

inline constexpr int kv_append_threads = 128;

template <class Codec, int HeadDim, class ValueCodec>
__global__ void __launch_bounds__(kv_append_threads)
    kv_append_kernel(PagedKvLayer layer, int kv_heads, float const* __restrict__ keys,
                     float const* __restrict__ values, int const* __restrict__ seqs,
                     int const* __restrict__ positions, int tokens) {
    int const index = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    int const per_token = 2 * kv_heads;  // K vectors, then V vectors
    if (index >= tokens * per_token) return;
    int const token = index / per_token;
    int const kv_head = index % per_token % kv_heads;
    bool const is_value = index % per_token >= kv_heads;
    float const* source = (is_value ? values : keys) +
                          (static_cast<std::size_t>(token) * kv_heads + kv_head) * HeadDim;
    // K with the key codec, V with the value codec: each at its own vector size.
    if (is_value)
        ValueCodec::template encode<HeadDim>(
            source, layer.vector(layer.value_offset, ValueCodec::template vector_bytes<HeadDim>,
                                 seqs[token], kv_head, positions[token]));
    else
        Codec::template encode<HeadDim>(
            source, layer.vector(layer.key_offset, Codec::template vector_bytes<HeadDim>,
                                 seqs[token], kv_head, positions[token]));
}

// keys, values: [tokens][kv_heads][HeadDim]; token t goes to sequence seqs[t] at positions[t],
// whose block the caller has reserved (and made unshared) in layer.block_tables. Keys are
// encoded with Codec, values with ValueCodec (a cache may hold them in different codecs); the
// layer must have been made for those codecs (check_layer_codecs).
template <class Codec, int HeadDim, class ValueCodec = Codec>
requires kv::KvCodec<Codec, HeadDim> && kv::KvCodec<ValueCodec, HeadDim>
void kv_append(PagedKvLayer const& layer, int kv_heads, float const* keys, float const* values,
               int const* seqs, int const* positions, int tokens, cudaStream_t stream = nullptr) {
    if (tokens <= 0) return;
    check_layer_codecs<Codec, ValueCodec, HeadDim>(layer, "kv_append");
    int const vectors = tokens * 2 * kv_heads;
    check_before_launch("kv_append_kernel");
    kv_append_kernel<Codec, HeadDim, ValueCodec>
        <<<ceil_div(vectors, kv_append_threads), kv_append_threads, 0, stream>>>(
            layer, kv_heads, keys, values, seqs, positions, tokens);
    check_launch("kv_append_kernel");
}

// One whole-block copy: every layer, K and V.
struct BlockCopy {
    int source;
    int target;
};

inline constexpr int block_copy_threads = 256;

__global__ void __launch_bounds__(block_copy_threads)
    copy_blocks_kernel(std::byte* storage, std::size_t block_bytes,
                       BlockCopy const* __restrict__ copies, int count) {
    // Copies stride over grid y, which holds at most 65,535 blocks (grid_limits.hpp): a fork
    // of a long sequence (or many) may copy more blocks than that in one call.
    for (int const c : strided_items(blockIdx.y, gridDim.y, count)) {
        BlockCopy const copy = copies[c];
        std::byte const* source = storage + static_cast<std::size_t>(copy.source) * block_bytes;
        std::byte* target = storage + static_cast<std::size_t>(copy.target) * block_bytes;
        // Blocks start at multiples of block_bytes from a cudaMalloc'd base: 16-byte words when
        // the block size allows them, bytes for the rest.
        constexpr std::size_t word = sizeof(uint4);
        std::size_t const words = block_bytes % word == 0 ? block_bytes / word : 0;
        std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
        std::size_t const first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
        for (std::size_t i = first; i < words; i += stride)
            reinterpret_cast<uint4*>(target)[i] = reinterpret_cast<uint4 const*>(source)[i];
        for (std::size_t i = words * word + first; i < block_bytes; i += stride)
            target[i] = source[i];
    }
}

// storage: the device pool, [blocks][block_bytes]; copies: device array of `count` pairs whose
// targets are distinct and are not also sources.
inline void copy_blocks(std::byte* storage, std::size_t block_bytes, BlockCopy const* copies,
                        int count, cudaStream_t stream = nullptr) {
    if (count <= 0) return;
    constexpr std::size_t bytes_per_thread_block = block_copy_threads * sizeof(uint4);
    int const blocks_per_copy = static_cast<int>(ceil_div(block_bytes, bytes_per_thread_block));
    check_before_launch("copy_blocks_kernel");
    copy_blocks_kernel<<<dim3(blocks_per_copy, strided_grid_y(count)), block_copy_threads, 0,
                         stream>>>(storage, block_bytes, copies, count);
    check_launch("copy_blocks_kernel");
}

enum class SwapDirection { to_device, to_host };

// Copies whole blocks between a host pool (pinned memory keeps the copies asynchronous) and the
// device pool: to_device copies host block `source` into device block `target`, to_host the
// reverse. `copies` is a host array.
inline void swap_blocks(std::byte* host_storage, std::byte* device_storage, std::size_t block_bytes,
                        std::span<BlockCopy const> copies, SwapDirection direction,
                        cudaStream_t stream = nullptr) {
    for (BlockCopy const& copy : copies) {
        std::size_t const source = static_cast<std::size_t>(copy.source) * block_bytes;
        std::size_t const target = static_cast<std::size_t>(copy.target) * block_bytes;
        if (direction == SwapDirection::to_device) {
            check(cudaMemcpyAsync(device_storage + target, host_storage + source, block_bytes,
                                  cudaMemcpyHostToDevice, stream),
                  "swap_blocks to device");
        } else {
            check(cudaMemcpyAsync(host_storage + target, device_storage + source, block_bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  "swap_blocks to host");
        }
    }
}

}  // namespace tinfer::kernels::cuda
