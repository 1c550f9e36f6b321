// The pipeline's micro-batch split (model/pipeline_parallel.hpp) over random steps, against an
// independent row-by-row account of the step: every row appears once, in order, with its own
// position, cache slot and sequence; micro-batches differ in rows by at most one; every logit
// row of the step is produced exactly once, by the row the whole step would take it from.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

using namespace tinfer;

BOOST_AUTO_TEST_SUITE(pipeline_split)

namespace {

struct Row {
    int slot, position, cache_slot;
    std::int32_t token;
    friend bool operator==(Row const&, Row const&) = default;
};

}  // namespace

BOOST_AUTO_TEST_CASE(pieces_cover_the_step_in_order_and_logits_once) {
    std::uint64_t const seed = std::random_device{}();  // fresh each run, named on failure
    auto rng = tinfer::testing::seeded_rng(seed);
    int cut_chunks = 0;  // coverage: steps where a chunk was cut between micro-batches
    for (int trial = 0; trial < 300; ++trial)
        BOOST_TEST_CONTEXT("seed " << seed << ", trial " << trial) {
            int const chunk_count = 1 + static_cast<int>(rng() % 6);
            std::vector<std::vector<std::int32_t>> tokens(static_cast<std::size_t>(chunk_count));
            std::vector<SequenceChunk> chunks;
            std::vector<Row> expected_rows;
            std::vector<Row> expected_logit_rows;  // the row each step logit row comes from
            for (int c = 0; c < chunk_count; ++c) {
                auto& t = tokens[static_cast<std::size_t>(c)];
                t.resize(1 + rng() % 20);
                for (auto& x : t) x = static_cast<std::int32_t>(rng() % 1000);
                int const position = static_cast<int>(rng() % 50);
                int const cache_slot = position - static_cast<int>(rng() % (position + 1));
                bool const all_logits = rng() % 3 == 0;
                chunks.push_back({.slot = c,
                                  .first_position = position,
                                  .tokens = t,
                                  .all_logits = all_logits,
                                  .first_cache_slot = cache_slot});
                for (std::size_t i = 0; i < t.size(); ++i) {
                    Row const row{c, position + static_cast<int>(i),
                                  cache_slot + static_cast<int>(i), t[i]};
                    expected_rows.push_back(row);
                    if (all_logits || i + 1 == t.size()) expected_logit_rows.push_back(row);
                }
            }
            int const count = 1 + static_cast<int>(rng() % 6);
            auto const batches = model::split_into_micro_batches(chunks, count);
            BOOST_TEST(batches.size() == std::min<std::size_t>(count, expected_rows.size()));

            std::size_t pieces = 0;
            for (model::MicroBatch const& b : batches) pieces += b.chunks.size();
            cut_chunks += pieces > chunks.size();
            std::vector<Row> rows;
            std::vector<int> produced(expected_logit_rows.size(), 0);
            std::size_t smallest = SIZE_MAX, largest = 0;
            for (model::MicroBatch const& b : batches) {
                std::size_t batch_rows = 0, logit_index = 0;
                for (SequenceChunk const& piece : b.chunks) {
                    BOOST_TEST(!piece.tokens.empty());
                    BOOST_TEST(piece.first_position >= 0);
                    for (std::size_t i = 0; i < piece.tokens.size(); ++i) {
                        Row const row{piece.slot, piece.first_position + static_cast<int>(i),
                                      piece.first_cache_slot + static_cast<int>(i),
                                      piece.tokens[i]};
                        rows.push_back(row);
                        if (!piece.all_logits && i + 1 < piece.tokens.size()) continue;
                        // This row gives a logit row: the step's, or one nobody wants.
                        BOOST_TEST_REQUIRE(logit_index < b.step_logit_row.size());
                        int const to = b.step_logit_row[logit_index++];
                        if (to < 0) continue;
                        BOOST_TEST_REQUIRE(to < static_cast<int>(produced.size()));
                        ++produced[static_cast<std::size_t>(to)];
                        BOOST_TEST((row == expected_logit_rows[static_cast<std::size_t>(to)]));
                    }
                    batch_rows += piece.tokens.size();
                }
                BOOST_TEST(logit_index == b.step_logit_row.size());
                smallest = std::min(smallest, batch_rows);
                largest = std::max(largest, batch_rows);
            }
            BOOST_TEST((rows == expected_rows));
            BOOST_TEST(largest - smallest <= 1);
            for (int const n : produced) BOOST_TEST(n == 1);
        }
    BOOST_TEST(cut_chunks > 20);
    BOOST_CHECK_THROW(model::split_into_micro_batches({}, 0), Error);
}

// Which stage counts a shape takes, as the compile-time checks decide.
BOOST_AUTO_TEST_CASE(stage_counts_fit_the_layers) {
    static_assert(model::pipeline_fits<presets::smollm2_135m, 2>());
    static_assert(model::pipeline_fits<presets::smollm2_135m, 3>());
    static_assert(!model::pipeline_fits<presets::smollm2_135m, 4>());
    static_assert(model::pipeline_fits<presets::gemma3_270m, 3>());   // 6 layers: 5 sliding, 1
    static_assert(!model::pipeline_fits<presets::gemma3_270m, 2>());  // 9: patterns differ
    static_assert(model::pipeline_fits<presets::llama2_70b, 8>());
    using Smol3 = model::PipelineStages<presets::smollm2_135m, 3>;
    static_assert(Smol3::local.layers == 10 && Smol3::local.hidden == 576);
    static_assert(Smol3::layers_of(2) == model::IndexRange{20, 10});
}

BOOST_AUTO_TEST_SUITE_END()
