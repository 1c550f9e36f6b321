// Tensor-parallel shard shapes of the presets, checked against the models' published shapes,
// and the head/feature ranges every rank owns.
#include <boost/test/unit_test.hpp>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <tinfer/core/communicator.hpp>
#include <tinfer/model/tensor_parallel_shard.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::model;

namespace {

// Every rank's range, in rank order, tiles [0, total) with no gap and no overlap.
template <class Range>
bool ranges_tile(int ranks, int total, Range range_of) {
    int next = 0;
    for (int rank = 0; rank < ranks; ++rank) {
        IndexRange const r = range_of(rank);
        if (r.first != next || r.count <= 0) return false;
        next = r.end();
    }
    return next == total;
}

// The Megatron invariant that keeps attention local: the query heads a rank owns are exactly
// those that read the KV heads it owns.
template <class Shard>
bool groups_stay_together() {
    for (int rank = 0; rank < Shard::degree; ++rank) {
        IndexRange const q = Shard::heads_of(rank), kv = Shard::kv_heads_of(rank);
        for (int head = q.first; head < q.end(); ++head) {
            int const kv_head = head / Shard::model.group_size();
            if (kv_head < kv.first || kv_head >= kv.end()) return false;
        }
    }
    return true;
}

// KV ranges under replication: the ranks of one replica group (kv_replicas consecutive ranks)
// hold the same range, and the groups in order tile [0, total).
template <class Shard, class Range>
bool replicas_tile(int total, Range range_of) {
    constexpr int replicas = Shard::kv_replicas;
    for (int rank = 0; rank < Shard::degree; ++rank)
        if (!(range_of(rank) == range_of(rank / replicas * replicas))) return false;
    return ranges_tile(Shard::degree / replicas, total,
                       [&](int group) { return range_of(group * replicas); });
}

template <class Shard>
void check_tiling() {
    constexpr ModelConfig c = Shard::model;
    constexpr int p = Shard::degree;
    BOOST_TEST(ranges_tile(p, c.heads, Shard::heads_of));
    BOOST_TEST(replicas_tile<Shard>(c.kv_heads, Shard::kv_heads_of));
    BOOST_TEST(ranges_tile(p, c.q_width(), Shard::q_features_of));
    BOOST_TEST(replicas_tile<Shard>(c.kv_width(), Shard::kv_features_of));
    BOOST_TEST(ranges_tile(p, c.ffn, Shard::ffn_features_of));
    BOOST_TEST(groups_stay_together<Shard>());
    for (auto const projection :
         {LlamaProjection::query, LlamaProjection::key, LlamaProjection::value,
          LlamaProjection::attention_output, LlamaProjection::ffn_gate, LlamaProjection::ffn_up,
          LlamaProjection::ffn_down}) {
        int const split_extent = split_of(projection) == Split::column_parallel
                                     ? Shard::full_rows(projection)
                                     : Shard::full_cols(projection);
        auto const slice = [&](int rank) { return Shard::slice_of(projection, rank); };
        bool const replicated =
            projection == LlamaProjection::key || projection == LlamaProjection::value;
        BOOST_TEST((replicated ? replicas_tile<Shard>(split_extent, slice)
                               : ranges_tile(p, split_extent, slice)));
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_parallel_shard)

BOOST_AUTO_TEST_CASE(smollm2_splits_three_ways_and_one) {
    using Tp3 = TensorParallelShard<presets::smollm2_135m, 3>;
    static_assert(Tp3::heads == 3 && Tp3::kv_heads == 1 && Tp3::group_size == 3);
    static_assert(Tp3::ffn == 512 && Tp3::q_width == 192 && Tp3::kv_width == 64);
    static_assert(Tp3::hidden == 576);
    // Q4_1 blocks are 32 elements: 192 and 512 input columns per rank are 6 and 16 blocks.
    static_assert(Tp3::q_width % quant::BlockQ4_1::elements == 0);
    static_assert(Tp3::ffn % quant::BlockQ4_1::elements == 0);
    static_assert(Tp3::heads_of(2) == IndexRange{6, 3} && Tp3::kv_heads_of(2) == IndexRange{2, 1});
    static_assert(Tp3::ffn_features_of(1) == IndexRange{512, 512});
    static_assert(Tp3::local.heads == 3 && Tp3::local.kv_heads == 1 && Tp3::local.ffn == 512);
    static_assert(ModelShape<Tp3::local>);
    check_tiling<Tp3>();

    using Tp1 = TensorParallelShard<presets::smollm2_135m, 1>;
    static_assert(Tp1::local == presets::smollm2_135m);
    static_assert(Tp1::slice_of(LlamaProjection::ffn_down, 0) == IndexRange{0, 1536});
    check_tiling<Tp1>();
}

BOOST_AUTO_TEST_CASE(llama2_70b_splits_eight_ways) {
    using Tp8 = TensorParallelShard<presets::llama2_70b, 8>;
    static_assert(Tp8::heads == 8 && Tp8::kv_heads == 1 && Tp8::group_size == 8);
    static_assert(Tp8::ffn == 3584 && Tp8::q_width == 1024 && Tp8::kv_width == 128);
    static_assert(Tp8::kv_features_of(7) == IndexRange{7 * 128, 128});
    check_tiling<Tp8>();
}

BOOST_AUTO_TEST_CASE(llama3_8b_splits_eight_ways) {
    using Tp8 = TensorParallelShard<presets::llama3_8b, 8>;
    static_assert(Tp8::heads == 4 && Tp8::kv_heads == 1 && Tp8::group_size == 4);
    static_assert(Tp8::ffn == 1792 && Tp8::q_width == 512 && Tp8::kv_width == 128);
    static_assert(Tp8::slice_of(LlamaProjection::attention_output, 3) == IndexRange{1536, 512});
    check_tiling<Tp8>();
}

// Fewer KV heads than ranks: each KV head is replicated and its query heads split. Gemma 3
// 270M's one KV head on both of 2 ranks, each with 2 of its 4 query heads; Llama-3-8B's 8 KV
// heads over 16 ranks, two ranks per KV head.
BOOST_AUTO_TEST_CASE(kv_heads_fewer_than_ranks_are_replicated) {
    using Gemma2 = TensorParallelShard<presets::gemma3_270m, 2>;
    static_assert(Gemma2::kv_replicas == 2 && Gemma2::kv_heads == 1 && Gemma2::heads == 2);
    static_assert(Gemma2::group_size == 2 && Gemma2::local.kv_heads == 1);
    static_assert(Gemma2::kv_heads_of(0) == IndexRange{0, 1} &&
                  Gemma2::kv_heads_of(1) == IndexRange{0, 1});
    static_assert(Gemma2::slice_of(LlamaProjection::key, 1) == IndexRange{0, 256});
    static_assert(Gemma2::slice_of(LlamaProjection::query, 1) == IndexRange{512, 512});
    static_assert(ModelShape<Gemma2::local>);
    check_tiling<Gemma2>();

    using Llama16 = TensorParallelShard<presets::llama3_8b, 16>;
    static_assert(Llama16::kv_replicas == 2 && Llama16::heads == 2 && Llama16::group_size == 2);
    static_assert(Llama16::kv_heads_of(5) == IndexRange{2, 1});
    check_tiling<Llama16>();
}

// A rank's KV cache holds 1/Tp of every token's KV: what makes TP attractive for long contexts.
BOOST_AUTO_TEST_CASE(each_rank_caches_its_share_of_the_kv) {
    using Shard = TensorParallelShard<presets::llama2_70b, 8>;
    static_assert(Shard::local.kv_bytes_per_token() * 8 ==
                  presets::llama2_70b.kv_bytes_per_token());
    using Small = TensorParallelShard<presets::smollm2_135m, 3>;
    static_assert(Small::local.kv_bytes_per_token() * 3 ==
                  presets::smollm2_135m.kv_bytes_per_token());
}

BOOST_AUTO_TEST_CASE(projections_split_the_megatron_way) {
    static_assert(split_of(LlamaProjection::query) == Split::column_parallel);
    static_assert(split_of(LlamaProjection::key) == Split::column_parallel);
    static_assert(split_of(LlamaProjection::value) == Split::column_parallel);
    static_assert(split_of(LlamaProjection::ffn_gate) == Split::column_parallel);
    static_assert(split_of(LlamaProjection::ffn_up) == Split::column_parallel);
    static_assert(split_of(LlamaProjection::attention_output) == Split::row_parallel);
    static_assert(split_of(LlamaProjection::ffn_down) == Split::row_parallel);
    using Shard = TensorParallelShard<presets::smollm2_135m, 3>;
    static_assert(Shard::all_reduces_per_layer == 2);
}

BOOST_AUTO_TEST_CASE(a_rank_outside_the_group_is_refused) {
    using Shard = TensorParallelShard<presets::smollm2_135m, 3>;
    int const outside[] = {-1, 3};
    for (int const rank : outside) {
        BOOST_CHECK_THROW(Shard::heads_of(rank), std::out_of_range);
        BOOST_CHECK_THROW(Shard::ffn_features_of(rank), std::out_of_range);
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(single_process_communicator)

BOOST_AUTO_TEST_CASE(collectives_over_one_rank_are_the_identity) {
    static_assert(Communicator<SingleProcess>);
    SingleProcess comm;
    BOOST_TEST(comm.rank() == 0);
    BOOST_TEST(comm.size() == 1);
    auto rng = testing::seeded_rng(1001);
    std::vector<float> const original = testing::random_floats(rng, 37);
    std::vector<float> data = original;
    comm.all_reduce_sum(data);
    BOOST_TEST(data == original, boost::test_tools::per_element());
    std::vector<float> gathered(original.size());
    testing::poison(std::span<float>(gathered));
    comm.all_gather(original, gathered);
    BOOST_TEST(gathered == original, boost::test_tools::per_element());
    std::vector<float> too_small(original.size() - 1);
    BOOST_CHECK_THROW(comm.all_gather(original, too_small), std::length_error);
    comm.barrier();
}

BOOST_AUTO_TEST_CASE(point_to_point_has_no_peer) {
    SingleProcess comm;
    std::vector<std::byte> bytes(4);
    BOOST_CHECK_THROW(comm.send(bytes, 0, 0), std::logic_error);
    BOOST_CHECK_THROW(comm.recv(bytes, 0, 0), std::logic_error);
}

BOOST_AUTO_TEST_SUITE_END()
