// The device model's host bookkeeping, on the CPU: block tables (no block leaked, shared or
// handed out twice over a long random sequence of steps and releases), the packed step plan (each
// array where its offset says, aligned, chunk order), the checks that refuse a bad step before
// any state changes, and the weight arena's layout (aligned, tied tensors stored once).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/model/cuda/step_plan.hpp>
#include <tinfer/model/cuda/weight_layout.hpp>
#include <tinfer/presets/presets.hpp>

namespace tc = tinfer::cuda;

namespace {

constexpr tc::StepLimits limits{
    .max_chunks = 8, .max_rows = 256, .max_logit_rows = 64, .vocab = 100};

// Every block owned by at most one slot, owned + free = all, each slot's table long enough.
void check_tables(tc::DeviceBlockTables const& tables) {
    std::set<int> owned;
    std::size_t count = 0;
    for (int s = 0; s < tables.slots(); ++s) {
        auto const table = tables.table(s);
        BOOST_TEST(static_cast<int>(table.size()) >=
                   tc::DeviceBlockTables::blocks_for(tables.length(s), tables.block_size()));
        for (int b : table) {
            BOOST_TEST((b >= 0 && b < tables.total_blocks()));
            owned.insert(b);
            ++count;
        }
    }
    BOOST_TEST(owned.size() == count, "a block is in two tables");
    BOOST_TEST(static_cast<int>(count) + tables.free_blocks() == tables.total_blocks());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(device_llama_plan)

BOOST_AUTO_TEST_CASE(step_plan_lays_out_chunks_in_order) {
    tc::DeviceBlockTables tables(4, 32, 4, 64);
    std::vector<std::int32_t> const a = {1, 2, 3, 4, 5, 6}, b = {7}, c = {8, 9};
    // b's slot first gets 5 cached positions, so its decode has a prefix.
    std::vector<std::int32_t> const warm = {10, 11, 12, 13, 14};
    std::vector<tc::DeviceChunk> const first = {{2, 0, warm}};
    tc::commit_step(tc::plan_step(first, tables, limits), tables);
    std::vector<tc::DeviceChunk> const chunks = {{0, 0, a, true}, {2, 5, b}, {3, 0, c}};
    tc::DeviceStepPlan const plan = tc::plan_step(chunks, tables, limits);
    // Planned, not yet run: nothing new is cached until commit_step.
    BOOST_TEST(tables.length(0) == 0);
    BOOST_TEST(tables.length(2) == 5);
    BOOST_TEST(tables.length(3) == 0);

    BOOST_TEST(plan.chunks == 3);
    BOOST_TEST(plan.rows == 9);
    BOOST_TEST(plan.logit_rows == 6 + 1 + 1);
    BOOST_TEST(plan.max_queries == 6);
    BOOST_TEST(plan.max_context == 6);
    BOOST_TEST(!plan.decode_only);
    BOOST_TEST(plan.table_stride == 2);  // 6 positions in blocks of 4
    for (std::size_t offset : {plan.tokens, plan.positions, plan.row_chunks, plan.query_starts,
                               plan.context_lengths, plan.logit_row_ids, plan.block_tables})
        BOOST_TEST(offset % 4 == 0, "arrays start 16-byte aligned");

    std::vector<int> const tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    std::vector<int> const positions = {0, 1, 2, 3, 4, 5, 5, 0, 1};
    std::vector<int> const row_chunks = {0, 0, 0, 0, 0, 0, 1, 2, 2};
    std::vector<int> const starts = {0, 6, 7, 9};
    std::vector<int> const contexts = {6, 6, 2};
    std::vector<int> const logit_rows = {0, 1, 2, 3, 4, 5, 6, 8};
    auto const same = [&](std::size_t offset, std::vector<int> const& expected) {
        auto const got = plan.array(offset, expected.size());
        return std::equal(got.begin(), got.end(), expected.begin());
    };
    BOOST_TEST(same(plan.tokens, tokens));
    BOOST_TEST(same(plan.positions, positions));
    BOOST_TEST(same(plan.row_chunks, row_chunks));
    BOOST_TEST(same(plan.query_starts, starts));
    BOOST_TEST(same(plan.context_lengths, contexts));
    BOOST_TEST(same(plan.logit_row_ids, logit_rows));
    // Chunk order, not slot order: row c of the tables is chunk c's slot's table, -1 past it.
    for (int chunk = 0; chunk < 3; ++chunk) {
        auto const table = tables.table(chunks[static_cast<std::size_t>(chunk)].slot);
        for (int block = 0; block < plan.table_stride; ++block) {
            int const got = plan.packed[plan.block_tables + static_cast<std::size_t>(
                                                                chunk * plan.table_stride + block)];
            int const expected = block < static_cast<int>(table.size())
                                     ? table[static_cast<std::size_t>(block)]
                                     : -1;
            BOOST_TEST(got == expected);
        }
    }
    tc::commit_step(plan, tables);
    BOOST_TEST(tables.length(0) == 6);
    BOOST_TEST(tables.length(2) == 6);
    BOOST_TEST(tables.length(3) == 2);
    check_tables(tables);

    std::vector<std::int32_t> const next = {1};
    std::vector<tc::DeviceChunk> const decode = {{0, 6, next}, {3, 2, next}};
    BOOST_TEST(tc::plan_step(decode, tables, limits).decode_only);
}

BOOST_AUTO_TEST_CASE(bad_steps_are_refused_before_any_change) {
    tc::DeviceBlockTables tables(2, 4, 4, 16);
    std::vector<std::int32_t> const three = {1, 2, 3}, bad_token = {1, 100}, many(20, 1);
    auto const refused = [&](std::vector<tc::DeviceChunk> const& chunks) {
        int const free = tables.free_blocks();
        bool thrown = false;
        try {
            tc::plan_step(chunks, tables, limits);
        } catch (tinfer::RequestError const&) {
            thrown = true;
        }
        return thrown && tables.free_blocks() == free && tables.length(0) == 0 &&
               tables.length(1) == 0;
    };
    BOOST_TEST(refused({}));
    BOOST_TEST(refused({{0, 1, three}}));                 // a gap after the cached positions
    BOOST_TEST(refused({{0, 0, three}, {0, 0, three}}));  // one slot twice
    BOOST_TEST(refused({{2, 0, three}}));                 // no such slot
    BOOST_TEST(refused({{0, 0, bad_token}}));             // outside the vocabulary
    BOOST_TEST(refused({{0, 0, many}}));                  // past the slot's 16 positions
    BOOST_TEST(refused({{0, 0, {}}}));                    // empty
    tc::StepLimits const few_logits{
        .max_chunks = 8, .max_rows = 256, .max_logit_rows = 2, .vocab = 100};
    std::vector<tc::DeviceChunk> const all = {{0, 0, three, true}};
    BOOST_CHECK_THROW(tc::plan_step(all, tables, few_logits), tinfer::RequestError);
    BOOST_TEST(tables.length(0) == 0);
}

// Random steps over random slots, with releases, never leak or share a block; running out of
// blocks is a RequestError, after which releasing makes room again.
BOOST_AUTO_TEST_CASE(random_steps_keep_the_pool_consistent) {
    std::mt19937 rng(12345);
    constexpr int slots = 6;
    tc::DeviceBlockTables tables(slots, 40, 8, 128);
    std::vector<std::int32_t> const tokens(64, 3);
    int exhausted = 0;
    for (int step = 0; step < 3000; ++step) {
        int const slot = static_cast<int>(rng() % slots);
        if (rng() % 7 == 0) {
            tables.release(slot);
        } else {
            int const length = tables.length(slot);
            int const first = length == 0 ? 0 : static_cast<int>(rng() % (length + 1));
            int const n = 1 + static_cast<int>(rng() % 40);
            if (first + n > tables.max_tokens()) {
                tables.release(slot);
                continue;
            }
            std::vector<tc::DeviceChunk> const chunk = {
                {slot, first, std::span(tokens.data(), static_cast<std::size_t>(n))}};
            try {
                tc::DeviceStepPlan const plan = tc::plan_step(chunk, tables, limits);
                BOOST_TEST(plan.packed[plan.context_lengths] == first + n);
                BOOST_TEST(tables.length(slot) == length, "planning changed the cached length");
                // Some steps fail on the device: the slot then keeps only what precedes the
                // chunk; the others commit.
                if (rng() % 5 == 0) {
                    tc::abandon_step(plan, tables);
                    BOOST_TEST(tables.length(slot) == std::min(length, first));
                } else {
                    tc::commit_step(plan, tables);
                    BOOST_TEST(tables.length(slot) == first + n);
                }
            } catch (tinfer::RequestError const&) {
                ++exhausted;
                BOOST_TEST(tables.length(slot) == length, "a refused step changed the slot");
                for (int s = 0; s < slots; ++s) tables.release(s);
            }
        }
        check_tables(tables);
    }
    BOOST_TEST(exhausted > 0, "the pool never ran out: the test did not cover that path");
}

// A step whose kernels fail marks nothing cached: a fresh chunk leaves its slot empty, a
// rewinding one forgets from its first position on (it may have overwritten them), and a later
// step can start again from what is left.
BOOST_AUTO_TEST_CASE(a_failed_step_marks_no_position_cached) {
    tc::DeviceBlockTables tables(2, 16, 4, 64);
    std::vector<std::int32_t> const ten(10, 1), three = {1, 2, 3};
    std::vector<tc::DeviceChunk> const prompt = {{0, 0, ten}};
    tc::abandon_step(tc::plan_step(prompt, tables, limits), tables);
    BOOST_TEST(tables.length(0) == 0);
    tc::commit_step(tc::plan_step(prompt, tables, limits), tables);
    BOOST_TEST(tables.length(0) == 10);

    std::vector<tc::DeviceChunk> const rewind = {{0, 7, three}};  // positions 7, 8, 9 again
    tc::abandon_step(tc::plan_step(rewind, tables, limits), tables);
    BOOST_TEST(tables.length(0) == 7);
    std::vector<tc::DeviceChunk> const append = {{0, 7, three}, {1, 0, three}};
    tc::DeviceStepPlan const plan = tc::plan_step(append, tables, limits);
    tc::abandon_step(plan, tables);
    BOOST_TEST(tables.length(0) == 7);
    BOOST_TEST(tables.length(1) == 0);
    tc::commit_step(plan, tables);
    BOOST_TEST(tables.length(0) == 10);
    BOOST_TEST(tables.length(1) == 3);
    check_tables(tables);
}

BOOST_AUTO_TEST_CASE(weight_layout_is_aligned_and_stores_tied_tensors_once) {
    constexpr tinfer::ModelConfig tiny{.layers = 2,
                                       .hidden = 64,
                                       .heads = 2,
                                       .kv_heads = 1,
                                       .head_dim = 32,
                                       .ffn = 96,
                                       .vocab = 10,
                                       .max_context = 128,
                                       .rope_base = 10000.0,
                                       .norm_eps = 1e-5,
                                       .weights = tinfer::DType::q4_1};
    std::vector<std::byte> host(1 << 16);
    std::size_t cursor = 0;
    auto const take = [&](std::size_t bytes) {
        std::byte const* p = host.data() + cursor;
        cursor += bytes;
        return p;
    };
    auto const matrix = [&](tinfer::DType type, int rows, int cols, std::size_t row_bytes) {
        return tinfer::kernels::WeightMatrix{type, rows, cols, take(row_bytes * rows)};
    };
    auto const norm = [&] {
        return std::span(reinterpret_cast<float const*>(take(tiny.hidden * sizeof(float))),
                         static_cast<std::size_t>(tiny.hidden));
    };
    constexpr std::size_t q41_row = 20 * 2;  // 64 columns: 2 blocks of 20 bytes
    tinfer::model::ModelWeights<tiny> w;
    w.token_embedding = matrix(tinfer::DType::q8_0, tiny.vocab, tiny.hidden, 34 * 2);
    w.output = w.token_embedding;  // tied
    w.output_norm = norm();
    for (auto& layer : w.layers) {
        layer.attention_norm = norm();
        layer.q = matrix(tinfer::DType::q4_1, 64, 64, q41_row);
        layer.k = matrix(tinfer::DType::q4_1, 32, 64, q41_row);
        layer.v = matrix(tinfer::DType::q4_1, 32, 64, q41_row);
        layer.output = matrix(tinfer::DType::q4_1, 64, 64, q41_row);
        layer.ffn_norm = norm();
        layer.gate = matrix(tinfer::DType::q4_1, 96, 64, q41_row);
        layer.up = matrix(tinfer::DType::q4_1, 96, 64, q41_row);
        layer.down = matrix(tinfer::DType::q4_1, 64, 96, 20 * 3);
    }
    auto const layout = tc::DeviceWeightLayout<tiny>::plan(w);
    BOOST_TEST(layout.output.offset == layout.token_embedding.offset);
    BOOST_TEST(layout.segments.size() == 1 + 1 + 9 * 2u);  // embedding once, output norm, layers
    std::size_t total = 0, end = 0;
    for (auto const& s : layout.segments) {
        BOOST_TEST(s.offset % tc::device_weight_alignment == 0);
        BOOST_TEST(s.offset >= end, "segments overlap");
        end = s.offset + s.bytes;
        total += s.bytes;
    }
    BOOST_TEST(layout.bytes == end);
    BOOST_TEST(total == cursor, "every host byte placed exactly once");
    BOOST_TEST(layout.layers[1].down.cols == 96);
    BOOST_TEST(layout.layers[1].down.at(nullptr).rows == 64);

    // The device views: every tensor at the arena base plus its offset, shapes and types kept.
    std::byte const* const base = reinterpret_cast<std::byte const*>(std::uintptr_t{1} << 40);
    tinfer::model::ModelWeights<tiny> const on_device = layout.on_device(base);
    BOOST_TEST(on_device.token_embedding.data == base + layout.token_embedding.offset);
    BOOST_TEST(on_device.output.data == on_device.token_embedding.data);  // tied: one copy
    BOOST_TEST((on_device.token_embedding.type == tinfer::DType::q8_0));
    BOOST_TEST(reinterpret_cast<std::byte const*>(on_device.output_norm.data()) ==
               base + layout.output_norm.offset);
    BOOST_TEST(on_device.output_norm.size() == static_cast<std::size_t>(tiny.hidden));
    for (std::size_t i = 0; i < w.layers.size(); ++i) {
        auto const& d = on_device.layers[i];
        BOOST_TEST(d.down.data == base + layout.layers[i].down.offset);
        BOOST_TEST(d.down.rows == 64);
        BOOST_TEST(d.down.cols == 96);
        BOOST_TEST(reinterpret_cast<std::byte const*>(d.ffn_norm.data()) ==
                   base + layout.layers[i].ffn_norm.offset);
        BOOST_TEST(d.q_bias.empty(), "parts the architecture lacks stay empty");
        BOOST_TEST(d.post_ffn_norm.empty());
    }

    // Each matrix in its own encoding, as on the host: a layer may mix device types...
    w.layers[0].v = matrix(tinfer::DType::q8_0, 32, 64, 34 * 2);
    auto const mixed = tc::DeviceWeightLayout<tiny>::plan(w);
    BOOST_TEST((mixed.layers[0].v.type == tinfer::DType::q8_0));
    BOOST_TEST((mixed.layers[0].q.type == tinfer::DType::q4_1));
    // ...but a type the device kernels do not read is refused, naming the tensor.
    w.layers[0].q.type = tinfer::DType::q4_k;
    try {
        (void)tc::DeviceWeightLayout<tiny>::plan(w);
        BOOST_FAIL("a q4_k matrix was accepted");
    } catch (tinfer::ConfigMismatch const& e) {
        BOOST_TEST(std::string(e.what()).find("blk.0.attn_q.weight") != std::string::npos);
    }
}

BOOST_AUTO_TEST_SUITE_END()
