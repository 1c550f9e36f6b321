#pragma once
// Paged decode attention, split-KV ("flash-decoding"): one new query token per sequence
// attends to its whole cached context through the sequence's block table.
//
// Work split: a thread block owns one (sequence, KV head, partition of partition_tokens
// context positions) and all `Group` query heads of that KV head (GQA packing), so every K and
// V vector of the partition is read from memory once for the whole group. Within the block:
//   1. scores: a few lanes share one token (each lane loads one 16-byte run of the key and
//      dots it with its slice of every query head; the lanes then combine by a reduce-scatter
//      of shuffles, ~1 per query head), several tokens per warp, the warps striding over the
//      partition; scores go to shared memory;
//   2. softmax: one warp per query head takes the partition's maximum and exponentiates;
//   3. values: the same lane layout accumulates p * v, then lanes and warps combine in a fixed
//      order (deterministic, no atomics).
// When a context spans several partitions, each writes its (max, sum, normalized output) to a
// workspace and a second kernel merges them; with one partition the first kernel writes the
// output directly.
//
// Scores are kept in base 2: q is pre-scaled by log2(e) / sqrt(head_dim), as the host kernel
// scales its scores, so exp2 replaces exp.
#include <cuda_runtime.h>

#include <cstddef>
#include <numbers>

#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/kernel_status.cuh>
#include <tinfer/kernels/cuda/paged_kv.cuh>

namespace tinfer::kernels::cuda {

// The most __shared__ memory a kernel may declare statically (more must be dynamic, opted in).
inline constexpr std::size_t static_shared_memory_bytes = 48 * 1024;

namespace decode_detail {
constexpr int next_power_of_two(int n) {
    int power = 1;
    while (power < n) power *= 2;
    return power;
}
}  // namespace decode_detail

// Codec decodes K, ValueCodec V (the same unless the cache holds them differently).
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
struct DecodeAttentionShape {
    using Reader = KvReader<Codec, HeadDim>;
    using ValueReader = KvReader<ValueCodec, HeadDim>;
    static constexpr int warp = 32;
    static constexpr int warps = 4;
    static constexpr int threads = warp * warps;
    // Elements one lane loads at once (the wider codec's width; the other loads it in runs).
    static constexpr int vector = kv_load_elements<Reader, ValueReader>;
    static_assert(HeadDim % vector == 0, "decode attention: head_dim % load width != 0");
    static constexpr int vectors_per_row = HeadDim / vector;
    static constexpr int lanes_per_token = vectors_per_row < warp ? vectors_per_row : warp;
    static constexpr int chunks_per_lane = vectors_per_row / lanes_per_token;
    static constexpr int tokens_per_warp = warp / lanes_per_token;
    static constexpr int tokens_per_step = tokens_per_warp * warps;
    // Context positions per thread block: long enough that a block streams a few hundred KB,
    // short enough that a 4K context still spreads over 8 blocks per (sequence, KV head).
    static constexpr int partition_tokens = 512;
    static constexpr float score_scale =
        static_cast<float>(std::numbers::log2e / constexpr_sqrt(HeadDim));

    static_assert(warp % lanes_per_token == 0, "decode attention: lanes per token must divide 32");
    static_assert(vectors_per_row % lanes_per_token == 0, "decode attention: uneven row split");
    // Query heads rounded up for the scores' reduce-scatter (decode_detail::reduce_scatter).
    static constexpr int padded_group = decode_detail::next_power_of_two(Group);
    static_assert(padded_group <= lanes_per_token,
                  "decode attention: more query heads per KV head than lanes per token");
    // Each lane keeps its slice of every query head (and later of every output) in registers.
    static constexpr int registers_per_lane = Group * chunks_per_lane * vector;
    static_assert(
        registers_per_lane <= 128,
        "decode attention: Group * head_dim / lanes_per_token floats per lane would spill");

    struct SharedStorage {
        float queries[Group][HeadDim];
        float scores[Group][partition_tokens];
        float warp_outputs[warps][Group][HeadDim];
        float maxima[Group];
        float sums[Group];
    };
    static_assert(sizeof(SharedStorage) <= static_shared_memory_bytes,
                  "decode attention: Group * head_dim too large for static shared memory");
};

struct DecodeAttentionArguments {
    float const* queries = nullptr;        // [seqs][heads][head_dim]
    float* out = nullptr;                  // [seqs][heads][head_dim]
    int const* context_lengths = nullptr;  // [seqs], each >= 1 (the new token is cached first)
    int seqs = 0;
    int kv_heads = 0;
    int max_context_length = 0;  // >= every context length: sizes the grid and the workspace
    float* workspace = nullptr;  // decode_attention_workspace_floats(...) floats
    // Where a sequence whose context length is outside [1, max_context_length] is reported
    // (kernel_status.cuh); its output rows are then not written. nullptr: such a sequence
    // traps the kernel instead.
    KernelStatus* status = nullptr;
};

template <class Codec, int HeadDim, int Group>
constexpr int decode_attention_partitions(int max_context_length) {
    return ceil_div(max_context_length,
                    DecodeAttentionShape<Codec, HeadDim, Group>::partition_tokens);
}

// Floats of workspace for the partial results: per (sequence, query head, partition) an output
// row plus its maximum and sum.
template <class Codec, int HeadDim, int Group>
constexpr std::size_t decode_attention_workspace_floats(int seqs, int kv_heads,
                                                        int max_context_length) {
    return static_cast<std::size_t>(seqs) * kv_heads * Group *
           decode_attention_partitions<Codec, HeadDim, Group>(max_context_length) * (HeadDim + 2);
}

namespace decode_detail {

// The workspace, split into its three arrays.
template <int HeadDim>
struct Partials {
    float* outputs;  // [seqs][heads][partitions][HeadDim]
    float* maxima;   // [seqs][heads][partitions]
    float* sums;     // [seqs][heads][partitions]

    __host__ __device__ static Partials from(float* workspace, int seqs, int heads,
                                             int partitions) {
        std::size_t const rows = static_cast<std::size_t>(seqs) * heads * partitions;
        return {workspace, workspace + rows * HeadDim, workspace + rows * HeadDim + rows};
    }
};

__device__ inline float warp_max(float value) {
    for (int mask = 16; mask > 0; mask /= 2)
        value = fmaxf(value, __shfl_xor_sync(~0u, value, mask));
    return value;
}
__device__ inline float warp_sum(float value) {
    for (int mask = 16; mask > 0; mask /= 2) value += __shfl_xor_sync(~0u, value, mask);
    return value;
}

// Sums each of Count values over the Lanes lanes of a lane group (lanes whose ids differ only in
// the bits of Lanes - 1) in Count - 1 + log2(Lanes / Count) shuffles instead of
// Count * log2(Lanes): at each step a lane keeps one half of its values, hands the other half to
// its partner (which keeps the opposite half) and adds what it receives. Afterwards v[0] of
// every lane holds the group's total of value owned_value(sublane).
template <int Lanes, int Count>
__device__ void reduce_scatter(float (&v)[Count], int sublane) {
    static_assert(Count <= Lanes && Lanes % Count == 0 && (Count & (Count - 1)) == 0,
                  "reduce_scatter: Count must be a power of two dividing Lanes");
#pragma unroll
    for (int mask = Lanes / 2, n = Count; n > 1; mask /= 2, n /= 2) {
        bool const upper = (sublane & mask) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i) {
            float const keep = upper ? v[i + n / 2] : v[i];
            float const give = upper ? v[i] : v[i + n / 2];
            v[i] = keep + __shfl_xor_sync(~0u, give, mask);
        }
    }
#pragma unroll
    for (int mask = Lanes / Count / 2; mask > 0; mask /= 2)
        v[0] += __shfl_xor_sync(~0u, v[0], mask);
}

// The value whose total reduce_scatter leaves in a lane: the top log2(Count) bits of its sublane.
template <int Lanes, int Count>
__device__ constexpr int owned_value(int sublane) {
    return sublane / (Lanes / Count);
}

}  // namespace decode_detail

template <class Codec, int HeadDim, int Group, class ValueCodec>
__global__ void __launch_bounds__(
    (DecodeAttentionShape<Codec, HeadDim, Group, ValueCodec>::threads))
    decode_attention_kernel(PagedKvLayer layer, DecodeAttentionArguments arguments) {
    using Shape = DecodeAttentionShape<Codec, HeadDim, Group, ValueCodec>;
    using Reader = typename Shape::Reader;
    using ValueReader = typename Shape::ValueReader;
    constexpr int vector = Shape::vector;
    constexpr std::size_t vector_bytes = Reader::vector_bytes;
    constexpr std::size_t value_vector_bytes = ValueReader::vector_bytes;
    __shared__ typename Shape::SharedStorage shared;

    int const kv_head = static_cast<int>(blockIdx.x);
    int const seq = static_cast<int>(blockIdx.y);
    int const partition = static_cast<int>(blockIdx.z);
    int const heads = arguments.kv_heads * Group;
    int const context = arguments.context_lengths[seq];
    // The grid covers max_context_length: a longer context would lose its tail (and overrun
    // the workspace in the merge), an empty one has no token to attend to. Refused, once per
    // sequence; every block of it stops.
    if (context > arguments.max_context_length || context < 1) {
        if (kv_head == 0 && partition == 0 && threadIdx.x == 0)
            report_status(arguments.status,
                          context < 1 ? KernelStatusCode::empty_context
                                      : KernelStatusCode::context_beyond_max_context_length,
                          seq, context, arguments.max_context_length);
        return;
    }
    int const begin = partition * Shape::partition_tokens;
    if (begin >= context) return;
    int const end = min(begin + Shape::partition_tokens, context);
    int const count = end - begin;

    int const thread = static_cast<int>(threadIdx.x);
    int const warp_id = thread / Shape::warp;
    int const lane = thread % Shape::warp;
    int const sublane = lane % Shape::lanes_per_token;  // which slice of the row
    int const token_slot = lane / Shape::lanes_per_token;

    float const* group_queries =
        arguments.queries + (static_cast<std::size_t>(seq) * heads + kv_head * Group) * HeadDim;
    for (int i = thread; i < Group * HeadDim; i += Shape::threads)
        shared.queries[i / HeadDim][i % HeadDim] = group_queries[i] * Shape::score_scale;
    __syncthreads();

    // The element offset of chunk c of this lane: lanes interleave so a token's loads coalesce.
    auto const element = [&](int chunk) {
        return (chunk * Shape::lanes_per_token + sublane) * vector;
    };
    float q[Group][Shape::chunks_per_lane][vector];
#pragma unroll
    for (int g = 0; g < Group; ++g)
#pragma unroll
        for (int c = 0; c < Shape::chunks_per_lane; ++c)
#pragma unroll
            for (int e = 0; e < vector; ++e) q[g][c][e] = shared.queries[g][element(c) + e];

    // 1. Scores. Every lane of a warp runs the same iterations (shuffles need the whole warp).
    for (int step = begin + warp_id * Shape::tokens_per_warp; step < end;
         step += Shape::tokens_per_step) {
        int const position = step + token_slot;
        bool const valid = position < end;
        // Padded to a power of two for the reduce-scatter; the padding stays zero.
        float dots[Shape::padded_group] = {};
        if (valid) {
            std::byte const* key =
                layer.vector(layer.key_offset, vector_bytes, seq, kv_head, position);
#pragma unroll
            for (int c = 0; c < Shape::chunks_per_lane; ++c) {
                float k[vector];
                load_run<Reader>(key, element(c), k);
#pragma unroll
                for (int g = 0; g < Group; ++g)
#pragma unroll
                    for (int e = 0; e < vector; ++e) dots[g] += q[g][c][e] * k[e];
            }
        }
        constexpr int lanes = Shape::lanes_per_token;
        constexpr int padded = Shape::padded_group;
        decode_detail::reduce_scatter<lanes, padded>(dots, sublane);
        // One lane per (token, query head) holds the total: the first of those sharing it.
        int const g = decode_detail::owned_value<lanes, padded>(sublane);
        if (valid && sublane % (lanes / padded) == 0 && g < Group)
            shared.scores[g][position - begin] = dots[0];
    }
    __syncthreads();

    // 2. Softmax over the partition, one warp per query head.
    for (int g = warp_id; g < Group; g += Shape::warps) {
        float maximum = kernels::negative_infinity;
        for (int i = lane; i < count; i += Shape::warp)
            maximum = fmaxf(maximum, shared.scores[g][i]);
        maximum = decode_detail::warp_max(maximum);
        float sum = 0;
        for (int i = lane; i < count; i += Shape::warp) {
            float const p = exp2f(shared.scores[g][i] - maximum);
            shared.scores[g][i] = p;
            sum += p;
        }
        sum = decode_detail::warp_sum(sum);
        if (lane == 0) {
            shared.maxima[g] = maximum;
            shared.sums[g] = sum;
        }
    }
    __syncthreads();

    // 3. Values.
    float acc[Group][Shape::chunks_per_lane][vector] = {};
    for (int step = begin + warp_id * Shape::tokens_per_warp; step < end;
         step += Shape::tokens_per_step) {
        int const position = step + token_slot;
        if (position < end) {
            std::byte const* value =
                layer.vector(layer.value_offset, value_vector_bytes, seq, kv_head, position);
#pragma unroll
            for (int c = 0; c < Shape::chunks_per_lane; ++c) {
                float v[vector];
                load_run<ValueReader>(value, element(c), v);
#pragma unroll
                for (int g = 0; g < Group; ++g) {
                    float const p = shared.scores[g][position - begin];
#pragma unroll
                    for (int e = 0; e < vector; ++e) acc[g][c][e] += p * v[e];
                }
            }
        }
    }
    // Lanes holding the same slice of different tokens combine (a fixed butterfly order).
#pragma unroll
    for (int g = 0; g < Group; ++g)
#pragma unroll
        for (int c = 0; c < Shape::chunks_per_lane; ++c)
#pragma unroll
            for (int e = 0; e < vector; ++e)
#pragma unroll
                for (int mask = Shape::lanes_per_token; mask < Shape::warp; mask *= 2)
                    acc[g][c][e] += __shfl_xor_sync(~0u, acc[g][c][e], mask);
    if (token_slot == 0) {
#pragma unroll
        for (int g = 0; g < Group; ++g)
#pragma unroll
            for (int c = 0; c < Shape::chunks_per_lane; ++c)
#pragma unroll
                for (int e = 0; e < vector; ++e)
                    shared.warp_outputs[warp_id][g][element(c) + e] = acc[g][c][e];
    }
    __syncthreads();

    int const partitions = gridDim.z;
    bool const direct = context <= Shape::partition_tokens;
    auto const partials = decode_detail::Partials<HeadDim>::from(arguments.workspace,
                                                                 arguments.seqs, heads, partitions);
    for (int i = thread; i < Group * HeadDim; i += Shape::threads) {
        int const g = i / HeadDim;
        int const d = i % HeadDim;
        float total = 0;
#pragma unroll
        for (int w = 0; w < Shape::warps; ++w) total += shared.warp_outputs[w][g][d];
        float const normalized = total / shared.sums[g];
        std::size_t const head_row = static_cast<std::size_t>(seq) * heads + kv_head * Group + g;
        if (direct) {
            arguments.out[head_row * HeadDim + d] = normalized;
        } else {
            std::size_t const row = head_row * partitions + partition;
            partials.outputs[row * HeadDim + d] = normalized;
            if (d == 0) {
                partials.maxima[row] = shared.maxima[g];
                partials.sums[row] = shared.sums[g];
            }
        }
    }
}

// Merges the partitions of each (sequence, query head): the partition with the largest maximum
// sets the reference, every other is weighted by exp2(its max - reference) * its sum.
template <int HeadDim>
__global__ void __launch_bounds__(HeadDim)
    decode_attention_merge_kernel(DecodeAttentionArguments arguments, int partition_tokens) {
    int const head = static_cast<int>(blockIdx.x);
    int const seq = static_cast<int>(blockIdx.y);
    int const heads = static_cast<int>(gridDim.x);
    int const context = arguments.context_lengths[seq];
    if (context > arguments.max_context_length) return;  // refused by the first kernel
    int const partitions = ceil_div(context, partition_tokens);
    if (partitions <= 1) return;  // written directly by the first kernel (or refused: empty)
    int const max_partitions = ceil_div(arguments.max_context_length, partition_tokens);
    auto const partials = decode_detail::Partials<HeadDim>::from(
        arguments.workspace, arguments.seqs, heads, max_partitions);
    std::size_t const first_row = (static_cast<std::size_t>(seq) * heads + head) * max_partitions;
    float reference = kernels::negative_infinity;
    for (int p = 0; p < partitions; ++p)
        reference = fmaxf(reference, partials.maxima[first_row + p]);
    int const d = static_cast<int>(threadIdx.x);
    float weighted = 0;
    float total = 0;
    for (int p = 0; p < partitions; ++p) {
        float const weight =
            exp2f(partials.maxima[first_row + p] - reference) * partials.sums[first_row + p];
        weighted += weight * partials.outputs[(first_row + p) * HeadDim + d];
        total += weight;
    }
    arguments.out[(static_cast<std::size_t>(seq) * heads + head) * HeadDim + d] = weighted / total;
}

// Codec decodes K, ValueCodec V: the layer must come from a cache holding them so.
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
requires DeviceKvCodec<Codec, HeadDim> && DeviceKvCodec<ValueCodec, HeadDim>
void decode_attention(PagedKvLayer const& layer, DecodeAttentionArguments const& arguments,
                      cudaStream_t stream = nullptr) {
    using Shape = DecodeAttentionShape<Codec, HeadDim, Group, ValueCodec>;
    if (arguments.seqs <= 0) return;
    if (arguments.max_context_length < 1)
        throw Error("decode_attention: max_context_length " +
                    std::to_string(arguments.max_context_length) + " (must be >= 1)");
    check_layer_codecs<Codec, ValueCodec, HeadDim>(layer, "decode_attention");
    int const partitions =
        decode_attention_partitions<Codec, HeadDim, Group>(arguments.max_context_length);
    if (partitions > 1 && arguments.workspace == nullptr)
        throw Error("decode_attention: contexts longer than one partition need a workspace");
    dim3 const grid(arguments.kv_heads, arguments.seqs, partitions);
    check_grid(grid, "decode_attention_kernel");
    check_before_launch("decode_attention_kernel");
    decode_attention_kernel<Codec, HeadDim, Group, ValueCodec>
        <<<grid, Shape::threads, 0, stream>>>(layer, arguments);
    check_launch("decode_attention_kernel");
    if (partitions > 1) {
        dim3 const merge_grid(arguments.kv_heads * Group, arguments.seqs);
        check_before_launch("decode_attention_merge_kernel");
        decode_attention_merge_kernel<HeadDim>
            <<<merge_grid, HeadDim, 0, stream>>>(arguments, Shape::partition_tokens);
        check_launch("decode_attention_merge_kernel");
    }
}

}  // namespace tinfer::kernels::cuda
