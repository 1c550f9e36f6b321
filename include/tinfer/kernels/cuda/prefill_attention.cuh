#pragma once
// Causal prefill attention over a paged cache, FlashAttention style. A chunk of new query
// tokens per sequence (their K and V already appended) attends to the sequence's cached prefix
// and to itself, through the block table.
//
// A thread block owns tile_queries consecutive queries of one query head. It keeps its Q tile
// in shared memory, streams the context in K/V tiles of tile_keys tokens (decoded to float in
// shared memory), and keeps an online softmax per query row (running max, running sum and an
// unnormalised output in registers), so scores never reach global memory. Key tiles past the
// tile's last query position are never loaded (causality).
//
// Threads: 8 consecutive lanes share 4 query rows; each lane owns 4 scores of a row quartet
// (keys lane, lane+8, ...) and head_dim/8 output columns (lane, lane+8, ...), a layout whose
// shared-memory reads are free of bank conflicts and whose row statistics combine with three
// shuffles.
#include <cuda_runtime.h>

#include <cstddef>
#include <numbers>

#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/kernel_status.cuh>
#include <tinfer/kernels/cuda/paged_kv.cuh>

namespace tinfer::kernels::cuda {

// Codec decodes K, ValueCodec V (the same unless the cache holds them differently).
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
struct PrefillAttentionShape {
    using Reader = KvReader<Codec, HeadDim>;
    using ValueReader = KvReader<ValueCodec, HeadDim>;
    static constexpr int tile_queries = 64;
    static constexpr int tile_keys = 32;
    static constexpr int lanes_per_row = 8;  // lanes sharing a quartet of query rows
    static constexpr int rows_per_thread = 4;
    static constexpr int threads = tile_queries / rows_per_thread * lanes_per_row;
    static constexpr int keys_per_thread = tile_keys / lanes_per_row;
    static constexpr int columns_per_thread = HeadDim / lanes_per_row;
    static constexpr int vector = kv_load_elements<Reader, ValueReader>;
    static constexpr int vectors_per_row = HeadDim / vector;
    // Rows padded by 4 floats: float4 accesses stay aligned, consecutive rows shift by 4 banks.
    static constexpr int row_stride = HeadDim + 4;
    // Probabilities padded by 1: the 4 row quartets of a warp land in different banks.
    static constexpr int probability_stride = tile_keys + 1;
    static constexpr float score_scale =
        static_cast<float>(std::numbers::log2e / constexpr_sqrt(HeadDim));
    static constexpr std::size_t shared_floats =
        static_cast<std::size_t>(tile_queries + 2 * tile_keys) * row_stride +
        static_cast<std::size_t>(tile_queries) * probability_stride;
    static constexpr std::size_t shared_bytes = shared_floats * sizeof(float);

    static_assert(HeadDim % (4 * lanes_per_row) == 0, "prefill attention: head_dim % 32 != 0");
    static_assert(threads % 32 == 0 && lanes_per_row <= 32, "prefill attention: lane groups");
};

struct PrefillAttentionArguments {
    float const* queries = nullptr;     // [total queries][heads][head_dim], sequences packed
    float* out = nullptr;               // [total queries][heads][head_dim]
    int const* query_starts = nullptr;  // [seqs + 1]: sequence s owns rows [starts[s], starts[s+1])
    int const* context_lengths = nullptr;  // [seqs]: cached positions, this chunk included
    int seqs = 0;
    int kv_heads = 0;
    int max_queries = 0;  // >= every sequence's chunk length: sizes the grid
    // Where a chunk longer than max_queries, or longer than its context, is reported
    // (kernel_status.cuh); its output rows are then not written. nullptr: such a chunk traps
    // the kernel instead.
    KernelStatus* status = nullptr;
};

template <class Codec, int HeadDim, int Group, class ValueCodec>
__global__ void __launch_bounds__(
    (PrefillAttentionShape<Codec, HeadDim, Group, ValueCodec>::threads))
    prefill_attention_kernel(PagedKvLayer layer, PrefillAttentionArguments arguments) {
    using Shape = PrefillAttentionShape<Codec, HeadDim, Group, ValueCodec>;
    using Reader = typename Shape::Reader;
    using ValueReader = typename Shape::ValueReader;
    constexpr int rows = Shape::rows_per_thread;
    constexpr int keys = Shape::keys_per_thread;
    constexpr int columns = Shape::columns_per_thread;
    constexpr int lanes = Shape::lanes_per_row;
    constexpr int stride = Shape::row_stride;
    extern __shared__ float4 shared_memory[];
    float* q_tile = reinterpret_cast<float*>(shared_memory);  // [tile_queries][stride]
    float* k_tile = q_tile + Shape::tile_queries * stride;    // [tile_keys][stride]
    float* v_tile = k_tile + Shape::tile_keys * stride;       // [tile_keys][stride]
    float* p_tile = v_tile + Shape::tile_keys * stride;       // [tile_queries][p stride]

    int const seq = static_cast<int>(blockIdx.z);
    int const head = static_cast<int>(blockIdx.y);
    int const kv_head = head / Group;
    int const heads = arguments.kv_heads * Group;
    int const query_begin = arguments.query_starts[seq];
    int const queries = arguments.query_starts[seq + 1] - query_begin;
    int const context = arguments.context_lengths[seq];
    // The grid covers max_queries: rows past it would never be computed; a chunk longer than
    // its context would read positions before 0. Refused, once per sequence.
    if (queries > arguments.max_queries || context < queries) {
        if (blockIdx.x == 0 && head == 0 && threadIdx.x == 0) {
            bool const too_many = queries > arguments.max_queries;
            report_status(arguments.status,
                          too_many ? KernelStatusCode::queries_beyond_max_queries
                                   : KernelStatusCode::context_shorter_than_queries,
                          seq, too_many ? queries : context,
                          too_many ? arguments.max_queries : queries);
        }
        return;
    }
    int const first_query = static_cast<int>(blockIdx.x) * Shape::tile_queries;
    if (first_query >= queries) return;
    int const first_position = context - queries;  // position of the chunk's first query
    int const tile_rows = min(Shape::tile_queries, queries - first_query);
    int const last_position = first_position + first_query + tile_rows - 1;

    int const thread = static_cast<int>(threadIdx.x);
    int const lane = thread % lanes;
    int const quartet = thread / lanes;

    // Q tile, pre-scaled into base-2 score units; rows past the chunk are zero.
    for (int i = thread; i < Shape::tile_queries * HeadDim; i += Shape::threads) {
        int const row = i / HeadDim;
        int const d = i % HeadDim;
        q_tile[row * stride + d] =
            row < tile_rows
                ? arguments.queries[(static_cast<std::size_t>(query_begin + first_query + row) *
                                         heads +
                                     head) *
                                        HeadDim +
                                    d] *
                      Shape::score_scale
                : 0.0f;
    }

    int positions[rows];
    float maxima[rows];
    float sums[rows];
    float acc[rows][columns];
#pragma unroll
    for (int r = 0; r < rows; ++r) {
        int const row = quartet * rows + r;
        // Rows past the chunk behave like the last row (finite, never written back).
        positions[r] = first_position + first_query + min(row, tile_rows - 1);
        maxima[r] = kernels::negative_infinity;
        sums[r] = 0;
#pragma unroll
        for (int c = 0; c < columns; ++c) acc[r][c] = 0;
    }

    constexpr std::size_t vector_bytes = Reader::vector_bytes;
    constexpr std::size_t value_vector_bytes = ValueReader::vector_bytes;
    for (int key_begin = 0; key_begin <= last_position; key_begin += Shape::tile_keys) {
        __syncthreads();  // the previous tile's K, V and P are no longer read
        for (int i = thread; i < Shape::tile_keys * Shape::vectors_per_row; i += Shape::threads) {
            int const token = i / Shape::vectors_per_row;
            int const first = i % Shape::vectors_per_row * Shape::vector;
            int const position = key_begin + token;
            float k[Shape::vector];
            float v[Shape::vector];
            if (position < context) {
                load_run<Reader>(
                    layer.vector(layer.key_offset, vector_bytes, seq, kv_head, position), first, k);
                load_run<ValueReader>(
                    layer.vector(layer.value_offset, value_vector_bytes, seq, kv_head, position),
                    first, v);
            } else {
#pragma unroll
                for (int e = 0; e < Shape::vector; ++e) k[e] = v[e] = 0;  // finite: 0 * p stays 0
            }
#pragma unroll
            for (int e = 0; e < Shape::vector; e += 4) {
                *reinterpret_cast<float4*>(&k_tile[token * stride + first + e]) =
                    make_float4(k[e], k[e + 1], k[e + 2], k[e + 3]);
                *reinterpret_cast<float4*>(&v_tile[token * stride + first + e]) =
                    make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
            }
        }
        __syncthreads();

        float scores[rows][keys] = {};
        for (int d = 0; d < HeadDim; d += 4) {
            float4 q4[rows];
            float4 k4[keys];
#pragma unroll
            for (int r = 0; r < rows; ++r)
                q4[r] =
                    *reinterpret_cast<float4 const*>(&q_tile[(quartet * rows + r) * stride + d]);
#pragma unroll
            for (int j = 0; j < keys; ++j)
                k4[j] = *reinterpret_cast<float4 const*>(&k_tile[(lane + j * lanes) * stride + d]);
#pragma unroll
            for (int r = 0; r < rows; ++r)
#pragma unroll
                for (int j = 0; j < keys; ++j)
                    scores[r][j] += q4[r].x * k4[j].x + q4[r].y * k4[j].y + q4[r].z * k4[j].z +
                                    q4[r].w * k4[j].w;
        }

#pragma unroll
        for (int r = 0; r < rows; ++r) {
            float tile_max = kernels::negative_infinity;
#pragma unroll
            for (int j = 0; j < keys; ++j) {
                int const position = key_begin + lane + j * lanes;
                if (position > positions[r]) scores[r][j] = kernels::negative_infinity;
                tile_max = fmaxf(tile_max, scores[r][j]);
            }
#pragma unroll
            for (int mask = lanes / 2; mask > 0; mask /= 2)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(~0u, tile_max, mask));
            float const new_max = fmaxf(maxima[r], tile_max);
            // A row whose keys are all masked so far keeps max -inf; 0 as reference avoids inf-inf.
            float const reference = new_max == kernels::negative_infinity ? 0.0f : new_max;
            float const correction = exp2f(maxima[r] - reference);
            float tile_sum = 0;
#pragma unroll
            for (int j = 0; j < keys; ++j) {
                float const p = exp2f(scores[r][j] - reference);
                tile_sum += p;
                p_tile[(quartet * rows + r) * Shape::probability_stride + lane + j * lanes] = p;
            }
#pragma unroll
            for (int mask = lanes / 2; mask > 0; mask /= 2)
                tile_sum += __shfl_xor_sync(~0u, tile_sum, mask);
            sums[r] = sums[r] * correction + tile_sum;
            maxima[r] = new_max;
#pragma unroll
            for (int c = 0; c < columns; ++c) acc[r][c] *= correction;
        }
        __syncwarp();  // a row quartet's probabilities were written by its own 8 lanes

#pragma unroll 4
        for (int j = 0; j < Shape::tile_keys; ++j) {
            float p[rows];
#pragma unroll
            for (int r = 0; r < rows; ++r)
                p[r] = p_tile[(quartet * rows + r) * Shape::probability_stride + j];
#pragma unroll
            for (int c = 0; c < columns; ++c) {
                float const v = v_tile[j * stride + lane + c * lanes];
#pragma unroll
                for (int r = 0; r < rows; ++r) acc[r][c] += p[r] * v;
            }
        }
    }

#pragma unroll
    for (int r = 0; r < rows; ++r) {
        int const row = quartet * rows + r;
        if (row >= tile_rows) continue;
        float const inverse_sum = 1.0f / sums[r];
        float* out =
            arguments.out +
            (static_cast<std::size_t>(query_begin + first_query + row) * heads + head) * HeadDim;
#pragma unroll
        for (int c = 0; c < columns; ++c) out[lane + c * lanes] = acc[r][c] * inverse_sum;
    }
}

// Codec decodes K, ValueCodec V: the layer must come from a cache holding them so.
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
requires DeviceKvCodec<Codec, HeadDim> && DeviceKvCodec<ValueCodec, HeadDim>
void prefill_attention(PagedKvLayer const& layer, PrefillAttentionArguments const& arguments,
                       cudaStream_t stream = nullptr) {
    using Shape = PrefillAttentionShape<Codec, HeadDim, Group, ValueCodec>;
    if (arguments.seqs <= 0) return;
    if (arguments.max_queries <= 0)
        throw Error("prefill_attention: max_queries " + std::to_string(arguments.max_queries) +
                    " (must be >= 1: it sizes the grid, a 0 would drop every row)");
    check_layer_codecs<Codec, ValueCodec, HeadDim>(layer, "prefill_attention");
    auto const kernel = prefill_attention_kernel<Codec, HeadDim, Group, ValueCodec>;
    // More than the default 48 KiB of dynamic shared memory must be asked for, once per kernel
    // and device: the attribute belongs to the device's context, not the process.
    static PerDeviceOnce configured;
    configured([&] {
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(Shape::shared_bytes)),
              "cudaFuncSetAttribute(prefill_attention_kernel shared memory)");
    });
    dim3 const grid(ceil_div(arguments.max_queries, Shape::tile_queries),
                    arguments.kv_heads * Group, arguments.seqs);
    check_grid(grid, "prefill_attention_kernel");
    check_before_launch("prefill_attention_kernel");
    kernel<<<grid, Shape::threads, Shape::shared_bytes, stream>>>(layer, arguments);
    check_launch("prefill_attention_kernel");
}

}  // namespace tinfer::kernels::cuda
