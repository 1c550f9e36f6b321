#pragma once
// A synthetic language model for the speculative-decoding tests: the logits of the next token
// are a fixed row of a seeded random table chosen by the last token, so every distribution the
// tests need has a closed form.
#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/speculative/drafters.hpp>
#include <tinfer/speculative/speculative.hpp>
#include "testing.hpp"

namespace tinfer::testing::speculative {

struct BigramTable {
    std::int32_t vocab = 0;
    std::vector<float> logits;  // [vocab (last token), vocab (next token)]

    std::span<float const> row(std::int32_t last) const {
        return std::span<float const>(logits).subspan(
            static_cast<std::size_t>(last) * static_cast<std::size_t>(vocab),
            static_cast<std::size_t>(vocab));
    }
};

inline BigramTable random_bigram(std::uint64_t seed, std::int32_t vocab, float logit_scale) {
    auto rng = seeded_rng(seed);
    std::normal_distribution<float> logit(0.0f, logit_scale);
    BigramTable table{vocab, std::vector<float>(static_cast<std::size_t>(vocab) * vocab)};
    for (float& x : table.logits) x = logit(rng);
    return table;
}

// The table as a DraftModel, recording what it is asked to run so tests can check rollback.
class BigramDraftModel {
  public:
    explicit BigramDraftModel(BigramTable const& table) : table_(&table) {}

    std::int32_t vocab() const { return table_->vocab; }
    void append(std::span<std::int32_t const> tokens, std::span<float> next_logits) {
        if (tokens.empty()) throw std::logic_error("BigramDraftModel::append of no tokens");
        length_ += static_cast<int>(tokens.size());
        tokens_run_ += static_cast<long>(tokens.size());
        std::ranges::copy(table_->row(tokens.back()), next_logits.begin());
    }
    void truncate(int length) {
        if (length < 0 || length > length_)
            throw std::logic_error("BigramDraftModel::truncate to " + std::to_string(length) +
                                   " of " + std::to_string(length_));
        truncations_.push_back(length);
        length_ = length;
    }

    int length() const { return length_; }
    long tokens_run() const { return tokens_run_; }
    std::vector<int> const& truncations() const { return truncations_; }

  private:
    BigramTable const* table_;
    int length_ = 0;
    long tokens_run_ = 0;
    std::vector<int> truncations_;
};

static_assert(spec::DraftModel<BigramDraftModel>);

// The target side of a round, with a KV "cache" that only counts positions: it refuses a
// forward that does not start right after what it holds, so a wrong rollback length fails.
class BigramTarget {
  public:
    explicit BigramTarget(BigramTable const& table) : table_(&table) {}

    // Runs `tokens` at positions first_position ..; one row of logits per token.
    void forward_all_logits(int first_position, std::span<std::int32_t const> tokens,
                            std::vector<float>& rows) {
        if (first_position != cached_)
            throw std::logic_error("BigramTarget: forward at position " +
                                   std::to_string(first_position) + " but the cache holds " +
                                   std::to_string(cached_));
        cached_ += static_cast<int>(tokens.size());
        rows.clear();
        for (std::int32_t const token : tokens) {
            auto const row = table_->row(token);
            rows.insert(rows.end(), row.begin(), row.end());
        }
    }
    void truncate(int length) {
        if (length > cached_) throw std::logic_error("BigramTarget: truncate past the cache");
        cached_ = length;
    }
    int cached() const { return cached_; }

  private:
    BigramTable const* table_;
    int cached_ = 0;
};

// Speculative generation as the engine will run it: prefill all but the last prompt token,
// then rounds of draft, one target forward of [last token, drafts...], verify, roll back.
template <spec::Drafter D>
std::vector<std::int32_t> generate_speculatively(D& drafter, BigramTable const& target_table,
                                                 std::vector<std::int32_t> tokens, int new_tokens,
                                                 int gamma, kernels::SamplingParams const& params,
                                                 std::uint64_t request_id,
                                                 spec::SpeculativeWorkspace& workspace,
                                                 spec::SpeculationStats* stats = nullptr) {
    std::size_t const prompt_length = tokens.size();
    BigramTarget target(target_table);
    std::vector<float> rows;
    target.forward_all_logits(0, std::span(tokens).first(prompt_length - 1), rows);
    spec::DraftProposal proposal;
    std::vector<std::int32_t> chunk;
    while (tokens.size() - prompt_length < static_cast<std::size_t>(new_tokens)) {
        spec::SequenceView const sequence{tokens, prompt_length, request_id};
        drafter.propose({sequence, gamma, params}, proposal);
        chunk.assign(1, tokens.back());
        chunk.insert(chunk.end(), proposal.tokens().begin(), proposal.tokens().end());
        int const length_before = static_cast<int>(tokens.size());
        target.forward_all_logits(length_before - 1, chunk, rows);
        spec::Verdict const verdict =
            spec::verify_drafts(sequence, proposal, rows, params, workspace);
        if (stats) stats->record(proposal.size(), verdict);
        target.truncate(spec::kv_length_after_round(length_before, verdict));
        spec::append_round_tokens(tokens, proposal, verdict);
    }
    return tokens;
}

}  // namespace tinfer::testing::speculative
