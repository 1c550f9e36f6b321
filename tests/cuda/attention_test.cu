// The paged KV cache and attention on the device against the host: kv_append writes the same
// bytes as the codec's host encode (bitwise), block copies and swaps move bytes exactly, and
// decode and prefill attention over a paged cache (shuffled physical blocks, partial last
// blocks, several partitions) match kernels::Attention reading the same bytes through a host
// view. Shapes: the compiled-in attention shapes (instantiations.cuh) with f32, bf16 and FP8 KV,
// and a cache holding K and V in different codecs (bf16 K, f32 V: different widths too). A
// context beyond max_context_length or a chunk beyond max_queries is refused with an error
// naming it, and a layer of other codecs than the kernel's is refused before any launch. With
// several devices, prefill runs on each (its shared-memory attribute is set per device).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/cuda/attention.cuh>
#include <tinfer/kernels/cuda/kernel_status.cuh>
#include <tinfer/kernels/cuda/kv_cache.cuh>
#include <tinfer/kv/paged_cache.hpp>

#include "cuda_testing.cuh"

namespace {

using namespace tinfer;
using namespace tinfer::cuda_testing;
using kernels::cuda::DeviceBuffer;
using kernels::cuda::PagedKvLayer;

constexpr int block_size = 16;
constexpr int kv_heads = 2;
constexpr int layers = 2;
constexpr int tested_layer = 1;  // not the first: exercises the layer offsets

// A small model of the given attention shape; only the cache layout is taken from it.
template <int HeadDim, int Group>
constexpr ModelConfig test_config{.layers = layers,
                                  .hidden = HeadDim* Group* kv_heads,
                                  .heads = Group* kv_heads,
                                  .kv_heads = kv_heads,
                                  .head_dim = HeadDim,
                                  .ffn = 64,
                                  .vocab = 64,
                                  .max_context = 4096};

// Sequences of the test batch: cached positions, and how many of the last ones are the prefill
// chunk. Covers one token, a fresh prompt, a long cached prefix, and several decode partitions.
struct SequenceCase {
    int context;
    int chunk;
};
constexpr SequenceCase sequence_cases[] = {{1, 1}, {37, 37}, {700, 130}, {1300, 200}, {1031, 64}};
constexpr int seqs = static_cast<int>(std::size(sequence_cases));

// One layer of the cache: the bytes, on the host and the device, and the block tables. K in
// Codec, V in ValueCodec.
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
struct PagedFixture {
    using Cache = kv::PagedKvCache<test_config<HeadDim, Group>, block_size, Codec, ValueCodec>;
    static constexpr std::size_t key_bytes = Codec::template vector_bytes<HeadDim>;
    static constexpr std::size_t value_bytes = ValueCodec::template vector_bytes<HeadDim>;

    int table_stride = 0;
    int blocks = 0;
    std::vector<int> tables;             // [seqs][table_stride]
    std::vector<std::byte> storage;      // [blocks][bytes_per_block], encoded on the host
    std::vector<float> keys, values;     // [seq][position][kv_head][HeadDim] as floats
    std::vector<std::size_t> first_row;  // per seq, its first position's row in keys/values
    PagedKvLayer host_layer;             // offsets (pointers unused on the host)

    explicit PagedFixture(std::mt19937_64& rng) {
        for (auto const& c : sequence_cases)
            table_stride = std::max(table_stride, Cache::blocks_for(c.context));
        int used = 0;
        for (auto const& c : sequence_cases) used += Cache::blocks_for(c.context);
        blocks = used + 3;  // spare blocks: copy and swap targets
        std::vector<int> physical(static_cast<std::size_t>(used));
        std::iota(physical.begin(), physical.end(), 0);
        std::shuffle(physical.begin(), physical.end(), rng);  // logical order != physical order
        tables.assign(static_cast<std::size_t>(seqs) * table_stride, -1);
        int next = 0;
        for (int s = 0; s < seqs; ++s)
            for (int b = 0; b < Cache::blocks_for(sequence_cases[s].context); ++b)
                tables[static_cast<std::size_t>(s) * table_stride + b] =
                    physical[static_cast<std::size_t>(next++)];

        host_layer =
            kernels::cuda::paged_kv_layer<Cache>(nullptr, tested_layer, nullptr, table_stride);
        storage.assign(static_cast<std::size_t>(blocks) * Cache::bytes_per_block, std::byte{0});
        std::size_t rows = 0;
        for (auto const& c : sequence_cases) {
            first_row.push_back(rows);
            rows += static_cast<std::size_t>(c.context);
        }
        keys = random_floats(rng, rows * kv_heads * HeadDim, -2, 2);
        values = random_floats(rng, rows * kv_heads * HeadDim, -2, 2);
        for (int s = 0; s < seqs; ++s)
            for (int p = 0; p < sequence_cases[s].context; ++p)
                for (int h = 0; h < kv_heads; ++h) {
                    std::size_t const at = ((first_row[s] + p) * kv_heads + h) * HeadDim;
                    Codec::template encode<HeadDim>(
                        keys.data() + at, vector(host_layer.key_offset, key_bytes, s, h, p));
                    ValueCodec::template encode<HeadDim>(
                        values.data() + at, vector(host_layer.value_offset, value_bytes, s, h, p));
                }
    }

    std::byte* vector(std::size_t part_offset, std::size_t vector_bytes, int seq, int kv_head,
                      int position) {
        int const block =
            tables[static_cast<std::size_t>(seq) * table_stride + position / block_size];
        return storage.data() + static_cast<std::size_t>(block) * Cache::bytes_per_block +
               part_offset +
               (static_cast<std::size_t>(kv_head) * block_size + position % block_size) *
                   vector_bytes;
    }

    // The host's view of one sequence: decodes the same bytes the device reads.
    struct View {
        PagedFixture* fixture;
        int seq;
        int tokens() const { return sequence_cases[seq].context; }
        void load_keys(int kv_head, int first, int count, float* out) const {
            for (int i = 0; i < count; ++i)
                Codec::template decode<HeadDim>(fixture->vector(fixture->host_layer.key_offset,
                                                                key_bytes, seq, kv_head, first + i),
                                                out + i * HeadDim);
        }
        void load_values(int kv_head, int first, int count, float* out) const {
            for (int i = 0; i < count; ++i)
                ValueCodec::template decode<HeadDim>(
                    fixture->vector(fixture->host_layer.value_offset, value_bytes, seq, kv_head,
                                    first + i),
                    out + i * HeadDim);
        }
    };
    static_assert(kv::KvView<View>);
};

// Bound on |device - host| for one attention output row. Scores are dot products of HeadDim
// terms (each side within HeadDim * eps * sum|q k| of exact, in base-2 units); a score error
// d changes a softmax weight by a factor within 2^(2d) (numerator and normalizer), which moves
// a weighted mean of values by at most that times max|v|; summing `context` weighted values
// adds context * eps * max|v|; exp2 and the divisions add a few eps. Twice that: both sides err.
template <int HeadDim>
double attention_bound(float const* q, std::vector<float> const& keys,
                       std::vector<float> const& values, std::size_t first_row, int kv_head,
                       int context) {
    double const scale = std::numbers::log2e / std::sqrt(static_cast<double>(HeadDim));
    double score_error = 0, max_value = 0;
    for (int p = 0; p < context; ++p) {
        std::size_t const at = ((first_row + p) * kv_heads + kv_head) * HeadDim;
        double magnitude = 0;
        for (int d = 0; d < HeadDim; ++d) {
            magnitude += std::abs(static_cast<double>(q[d]) * keys[at + d]);
            max_value = std::max(max_value, std::abs(static_cast<double>(values[at + d])));
        }
        score_error = std::max(score_error, (HeadDim + 4) * float_epsilon * magnitude * scale);
    }
    double const weight_error = std::exp2(2 * score_error) - 1 + 8 * float_epsilon;
    return 2 * max_value * (2 * weight_error + (context + 8) * float_epsilon);
}

// bf16 goes through the runtime shape dispatcher (instantiations.cuh), which instantiates every
// compiled-in shape; the other codecs call their one shape directly, to keep nvcc's work small.
template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
void launch_decode(PagedKvLayer const& layer,
                   kernels::cuda::DecodeAttentionArguments const& arguments) {
    if constexpr (std::is_same_v<Codec, kv::Bf16Codec> && std::is_same_v<ValueCodec, Codec>)
        kernels::cuda::decode_attention<Codec>(kernels::cuda::AttentionShape{HeadDim, Group}, layer,
                                               arguments);
    else
        kernels::cuda::decode_attention<Codec, HeadDim, Group, ValueCodec>(layer, arguments);
}

template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
void launch_prefill(PagedKvLayer const& layer,
                    kernels::cuda::PrefillAttentionArguments const& arguments) {
    if constexpr (std::is_same_v<Codec, kv::Bf16Codec> && std::is_same_v<ValueCodec, Codec>)
        kernels::cuda::prefill_attention<Codec>(kernels::cuda::AttentionShape{HeadDim, Group},
                                                layer, arguments);
    else
        kernels::cuda::prefill_attention<Codec, HeadDim, Group, ValueCodec>(layer, arguments);
}

// The message of the tinfer::Error `action` throws ("" when it throws none).
template <class Action>
std::string error_of(Action&& action) {
    try {
        action();
    } catch (Error const& error) {
        return error.what();
    }
    return "";
}

template <class Codec, int HeadDim, int Group, class ValueCodec = Codec>
void test_shape(Checker& checker, std::mt19937_64& rng, bool test_block_moves,
                bool test_refusals = false) {
    using Fixture = PagedFixture<Codec, HeadDim, Group, ValueCodec>;
    using Cache = typename Fixture::Cache;
    using HostAttention = kernels::Attention<HeadDim, Group>;
    constexpr int heads = kv_heads * Group;
    std::string const name =
        std::string(Codec::name) +
        (std::is_same_v<Codec, ValueCodec> ? "" : " K, " + std::string(ValueCodec::name) + " V") +
        " head_dim " + std::to_string(HeadDim) + " group " + std::to_string(Group);
    Fixture fixture(rng);

    // ---- append: every token of every sequence, in one launch, into a zeroed pool ----
    std::vector<int> token_seqs, token_positions;
    for (int s = 0; s < seqs; ++s)
        for (int p = 0; p < sequence_cases[s].context; ++p) {
            token_seqs.push_back(s);
            token_positions.push_back(p);
        }
    DeviceBuffer<std::byte> storage(fixture.storage.size());
    storage.fill_bytes(0);
    DeviceBuffer<int> const tables(fixture.tables), dseqs(token_seqs), dpositions(token_positions);
    DeviceBuffer<float> const dkeys(fixture.keys), dvalues(fixture.values);
    PagedKvLayer const layer = kernels::cuda::paged_kv_layer<Cache>(
        storage.data(), tested_layer, tables.data(), fixture.table_stride);
    kernels::cuda::kv_append<Codec, HeadDim, ValueCodec>(
        layer, kv_heads, dkeys.data(), dvalues.data(), dseqs.data(), dpositions.data(),
        static_cast<int>(token_seqs.size()));
    checker.expect(storage.to_host() == fixture.storage,
                   "kv_append bytes equal host encode, " + name);

    // ---- block moves: copy-on-write copies and a swap out and back in ----
    if (test_block_moves) {
        std::size_t const block_bytes = Cache::bytes_per_block;
        int const spare = fixture.blocks - 3;
        std::vector<kernels::cuda::BlockCopy> const copies = {
            {fixture.tables[0], spare}, {fixture.tables[1 * fixture.table_stride], spare + 1}};
        DeviceBuffer<kernels::cuda::BlockCopy> const dcopies(copies);
        kernels::cuda::copy_blocks(storage.data(), block_bytes, dcopies.data(),
                                   static_cast<int>(copies.size()));
        auto expected = fixture.storage;
        for (auto const& c : copies)
            std::memcpy(expected.data() + c.target * block_bytes,
                        expected.data() + c.source * block_bytes, block_bytes);
        checker.expect(storage.to_host() == expected, "copy_blocks, " + name);

        std::byte* pinned = nullptr;
        kernels::cuda::check(cudaMallocHost(&pinned, 2 * block_bytes), "cudaMallocHost");
        std::vector<kernels::cuda::BlockCopy> const out = {
            {fixture.tables[3 * fixture.table_stride + 2], 0}, {spare, 1}};
        kernels::cuda::swap_blocks(pinned, storage.data(), block_bytes, out,
                                   kernels::cuda::SwapDirection::to_host);
        std::vector<kernels::cuda::BlockCopy> const in = {{0, spare + 2}};
        kernels::cuda::swap_blocks(pinned, storage.data(), block_bytes, in,
                                   kernels::cuda::SwapDirection::to_device);
        kernels::cuda::check(cudaDeviceSynchronize(), "swap_blocks");
        bool const swapped_out =
            std::memcmp(pinned, expected.data() + out[0].source * block_bytes, block_bytes) == 0 &&
            std::memcmp(pinned + block_bytes, expected.data() + spare * block_bytes, block_bytes) ==
                0;
        std::memcpy(expected.data() + (spare + 2) * block_bytes, pinned, block_bytes);
        checker.expect(swapped_out && storage.to_host() == expected,
                       "swap_blocks out and in, " + name);
        kernels::cuda::check(cudaFreeHost(pinned), "cudaFreeHost");
        storage.copy_from(fixture.storage);  // attention below reads the unmodified layout
    }

    std::vector<int> contexts;
    for (auto const& c : sequence_cases) contexts.push_back(c.context);
    DeviceBuffer<int> const dcontexts(contexts);
    int const max_context = *std::max_element(contexts.begin(), contexts.end());
    std::vector<float> scratch(HostAttention::scratch_floats);

    // ---- decode: one query per sequence at its last position ----
    {
        auto const queries = random_floats(rng, static_cast<std::size_t>(seqs) * heads * HeadDim);
        std::vector<float> expected(queries.size());
        std::vector<double> bound(queries.size());
        for (int s = 0; s < seqs; ++s) {
            typename Fixture::View const view{&fixture, s};
            std::size_t const row = static_cast<std::size_t>(s) * heads * HeadDim;
            kernels::AttentionChunk const chunk{
                .first_position = contexts[s] - 1,
                .queries = 1,
                .q = queries.data() + row,
                .q_stride = static_cast<std::size_t>(heads) * HeadDim,
                .out = expected.data() + row,
                .out_stride = static_cast<std::size_t>(heads) * HeadDim};
            HostAttention::attend(view, kv_heads, chunk, 1, scratch);
            for (int h = 0; h < heads; ++h) {
                double const b = attention_bound<HeadDim>(
                    queries.data() + row + h * HeadDim, fixture.keys, fixture.values,
                    fixture.first_row[s], h / Group, contexts[s]);
                std::fill_n(bound.begin() + static_cast<std::ptrdiff_t>(row + h * HeadDim), HeadDim,
                            b);
            }
        }
        DeviceBuffer<float> const dqueries(queries);
        auto out = poisoned_floats(queries.size());
        auto workspace =
            poisoned_floats(kernels::cuda::decode_attention_workspace_floats<Codec, HeadDim, Group>(
                seqs, kv_heads, max_context));
        kernels::cuda::DecodeAttentionArguments const arguments{.queries = dqueries.data(),
                                                                .out = out.data(),
                                                                .context_lengths = dcontexts.data(),
                                                                .seqs = seqs,
                                                                .kv_heads = kv_heads,
                                                                .max_context_length = max_context,
                                                                .workspace = workspace.data()};
        launch_decode<Codec, HeadDim, Group, ValueCodec>(layer, arguments);
        auto const batched = out.to_host();
        checker.expect_within(max_scaled_error(batched, expected, bound),
                              "paged decode attention, " + name);

        // Batch invariance: the longest sequence alone gives bitwise the same rows.
        constexpr int alone = 3;
        std::size_t const row = static_cast<std::size_t>(alone) * heads * HeadDim;
        auto single_out = poisoned_floats(static_cast<std::size_t>(heads) * HeadDim);
        PagedKvLayer single_layer = layer;
        single_layer.block_tables =
            tables.data() + static_cast<std::size_t>(alone) * fixture.table_stride;
        kernels::cuda::DecodeAttentionArguments const single{
            .queries = dqueries.data() + row,
            .out = single_out.data(),
            .context_lengths = dcontexts.data() + alone,
            .seqs = 1,
            .kv_heads = kv_heads,
            .max_context_length = contexts[alone],
            .workspace = workspace.data()};
        launch_decode<Codec, HeadDim, Group, ValueCodec>(single_layer, single);
        auto const single_result = single_out.to_host();
        checker.expect(std::equal(single_result.begin(), single_result.end(),
                                  batched.begin() + static_cast<std::ptrdiff_t>(row)),
                       "decode attention batch invariant (bitwise), " + name);

        if (test_refusals) {
            // A context longer than max_context_length is refused, naming the sequence,
            // instead of losing its tail (and overrunning the workspace in the merge).
            kernels::cuda::DeviceStatus status;
            kernels::cuda::DecodeAttentionArguments short_grid = arguments;
            short_grid.max_context_length = max_context - 1;
            short_grid.status = status.get();
            launch_decode<Codec, HeadDim, Group, ValueCodec>(layer, short_grid);
            std::string const message = error_of([&] { status.throw_if_failed(); });
            checker.expect(message.find("sequence 3: context length 1300 exceeds the launch's "
                                        "max_context_length 1299") != std::string::npos,
                           "decode refuses a context beyond max_context_length: '" + message + "'");
        }
    }

    // ---- prefill: each sequence's chunk of last positions, causal over its whole context ----
    {
        std::vector<int> starts = {0};
        for (auto const& c : sequence_cases) starts.push_back(starts.back() + c.chunk);
        int max_chunk = 0;
        for (auto const& c : sequence_cases) max_chunk = std::max(max_chunk, c.chunk);
        auto const queries =
            random_floats(rng, static_cast<std::size_t>(starts.back()) * heads * HeadDim);
        std::vector<float> expected(queries.size());
        std::vector<double> bound(queries.size());
        for (int s = 0; s < seqs; ++s) {
            typename Fixture::View const view{&fixture, s};
            std::size_t const row = static_cast<std::size_t>(starts[s]) * heads * HeadDim;
            int const chunk_length = sequence_cases[s].chunk;
            kernels::AttentionChunk const chunk{
                .first_position = contexts[s] - chunk_length,
                .queries = chunk_length,
                .q = queries.data() + row,
                .q_stride = static_cast<std::size_t>(heads) * HeadDim,
                .out = expected.data() + row,
                .out_stride = static_cast<std::size_t>(heads) * HeadDim};
            HostAttention::attend(view, kv_heads, chunk, 1, scratch);
            for (int i = 0; i < chunk_length; ++i)
                for (int h = 0; h < heads; ++h) {
                    std::size_t const at =
                        row + (static_cast<std::size_t>(i) * heads + h) * HeadDim;
                    double const b = attention_bound<HeadDim>(
                        queries.data() + at, fixture.keys, fixture.values, fixture.first_row[s],
                        h / Group, contexts[s] - chunk_length + i + 1);
                    std::fill_n(bound.begin() + static_cast<std::ptrdiff_t>(at), HeadDim, b);
                }
        }
        DeviceBuffer<float> const dqueries(queries);
        DeviceBuffer<int> const dstarts(starts);
        auto out = poisoned_floats(queries.size());
        kernels::cuda::PrefillAttentionArguments const arguments{
            .queries = dqueries.data(),
            .out = out.data(),
            .query_starts = dstarts.data(),
            .context_lengths = dcontexts.data(),
            .seqs = seqs,
            .kv_heads = kv_heads,
            .max_queries = max_chunk};
        launch_prefill<Codec, HeadDim, Group, ValueCodec>(layer, arguments);
        auto const batched = out.to_host();
        checker.expect_within(max_scaled_error(batched, expected, bound),
                              "paged prefill attention, " + name);

        // Batch invariance: one sequence's chunk alone gives bitwise the same rows.
        constexpr int alone = 2;
        int const chunk_length = sequence_cases[alone].chunk;
        std::size_t const row = static_cast<std::size_t>(starts[alone]) * heads * HeadDim;
        std::size_t const floats = static_cast<std::size_t>(chunk_length) * heads * HeadDim;
        auto single_out = poisoned_floats(floats);
        DeviceBuffer<int> const single_starts(std::vector<int>{0, chunk_length});
        PagedKvLayer single_layer = layer;
        single_layer.block_tables =
            tables.data() + static_cast<std::size_t>(alone) * fixture.table_stride;
        kernels::cuda::PrefillAttentionArguments const single{
            .queries = dqueries.data() + row,
            .out = single_out.data(),
            .query_starts = single_starts.data(),
            .context_lengths = dcontexts.data() + alone,
            .seqs = 1,
            .kv_heads = kv_heads,
            .max_queries = chunk_length};
        launch_prefill<Codec, HeadDim, Group, ValueCodec>(single_layer, single);
        auto const single_result = single_out.to_host();
        checker.expect(std::equal(single_result.begin(), single_result.end(),
                                  batched.begin() + static_cast<std::ptrdiff_t>(row)),
                       "prefill attention batch invariant (bitwise), " + name);

        if (test_refusals) {
            // A chunk longer than max_queries is refused instead of losing its last rows.
            kernels::cuda::DeviceStatus status;
            kernels::cuda::PrefillAttentionArguments short_grid = arguments;
            short_grid.max_queries = max_chunk - 1;
            short_grid.status = status.get();
            launch_prefill<Codec, HeadDim, Group, ValueCodec>(layer, short_grid);
            std::string const message = error_of([&] { status.throw_if_failed(); });
            checker.expect(message.find("sequence 3: 200 queries exceed the launch's max_queries "
                                        "199") != std::string::npos,
                           "prefill refuses a chunk beyond max_queries: '" + message + "'");
            // Zero rows of grid would drop every chunk: refused on the host.
            short_grid.max_queries = 0;
            checker.expect(!error_of([&] {
                                launch_prefill<Codec, HeadDim, Group, ValueCodec>(layer,
                                                                                  short_grid);
                            }).empty(),
                           "prefill refuses max_queries 0");
        }
    }
}

// A layer of a cache whose V codec is not the kernel's is refused before any launch (it would
// decode V with K's codec, at K's vector size).
void test_mismatched_codecs(Checker& checker) {
    using Mixed = kv::PagedKvCache<test_config<64, 3>, block_size, kv::Bf16Codec, kv::Fp32Codec>;
    PagedKvLayer const layer = kernels::cuda::paged_kv_layer<Mixed>(nullptr, 0, nullptr, 1);
    std::string const message = error_of([&] {
        kernels::cuda::decode_attention<kv::Bf16Codec, 64, 3>(
            layer, {.seqs = 1, .kv_heads = kv_heads, .max_context_length = 1});
    });
    checker.expect(message.find("pass the cache's value codec") != std::string::npos,
                   "a layer of other codecs than the kernel's is refused: '" + message + "'");
}

}  // namespace

// A shape outside instantiations.cuh is refused, naming the compiled-in ones.
void test_unlisted_shape(Checker& checker) {
    std::string message;
    try {
        kernels::cuda::decode_attention<kv::Bf16Codec>(kernels::cuda::AttentionShape{96, 2},
                                                       PagedKvLayer{}, {});
    } catch (Error const& error) {
        message = error.what();
    }
    checker.expect(
        message.find("(head_dim 128, group 8)") != std::string::npos,
        "an unlisted attention shape is refused naming the compiled-in ones: '" + message + "'");
}

int main() {
    return run_device_tests("cuda_attention_test", [](Checker& checker) {
        auto rng = seeded_rng(test_seed());
        test_unlisted_shape(checker);
        test_mismatched_codecs(checker);
        test_shape<kv::Fp32Codec, 64, 3>(checker, rng, false, true);  // SmolLM2-135M
        // K and V in different codecs (and load widths: 8 bf16, 4 f32 per access).
        test_shape<kv::Bf16Codec, 64, 3, kv::Fp32Codec>(checker, rng, false);
        test_shape<kv::Bf16Codec, 128, 4>(checker, rng, true);      // Llama-3-8B
        test_shape<kv::Fp8E4M3Codec, 128, 8>(checker, rng, false);  // 70B-class GQA, FP8 KV
        test_shape<kv::Bf16Codec, 128, 8>(checker, rng, false);     // the benchmark's shape
        // Every further device: prefill's shared-memory attribute is set on each device, not
        // once per process (launches on a second device failed).
        int const devices = kernels::cuda::device_count();
        for (int device = 1; device < devices; ++device) {
            kernels::cuda::check(cudaSetDevice(device), "cudaSetDevice");
            std::printf("device %d:\n", device);
            test_shape<kv::Fp32Codec, 64, 3>(checker, rng, false);
            test_shape<kv::Bf16Codec, 128, 4>(checker, rng, false);
        }
        kernels::cuda::check(cudaSetDevice(0), "cudaSetDevice");
    });
}
