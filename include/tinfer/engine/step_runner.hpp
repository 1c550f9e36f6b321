#pragma once
// One step of the serving loop, once the scheduler has planned it and the KV lifecycle has
// carried out its preemptions and swaps: prepare each work item's tokens (admitting and growing
// its KV), draft for the speculating ones, run the whole plan as forward passes of at most the
// workspace's rows over a mixed batch of prefill chunks and decodes, then sample (or verify a
// round) and stream text for the items that reach the end of their context.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/engine/live_request.hpp>
#include <tinfer/engine/speculative_round.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/step_plan.hpp>

namespace tinfer {

template <class Model>
class StepRunner {
  public:
    static constexpr ModelConfig config = Model::config;
    using LiveRequests = std::unordered_map<sched::RequestId, LiveRequest>;
    // Requests whose settings left nothing to sample this step, with the reason.
    using Failures = std::vector<std::pair<sched::RequestId, std::string>>;
    // Choices that sampled their first token from their leader's prompt pass this step: the
    // engine forks the leader's KV for those that go on (`finished`: ended on that token).
    struct Fork {
        sched::RequestId leader, follower;
        bool finished = false;
    };
    using Forks = std::vector<Fork>;

    StepRunner(int max_rows, int threads, bool int8_activations)
        : workspace_(max_rows, threads),
          sampling_(config.vocab),
          logits_(static_cast<std::size_t>(max_rows) * config.vocab),
          int8_activations_(int8_activations) {}

    typename Model::Workspace& workspace() { return workspace_; }
    int max_rows() const { return workspace_.max_tokens(); }

    template <class Kv, class Speculation>
    std::vector<sched::StepOutcome> run(Model const& model,
                                        std::vector<sched::ScheduledWork> const& work,
                                        LiveRequests& live, Kv& kv, Speculation& speculation,
                                        sched::MetricsRecorder& metrics, Failures& failed,
                                        Forks& forked) {
        std::vector<std::span<std::int32_t const>> tokens_of(work.size());
        std::vector<int> first_of(work.size(), 0);
        for (std::size_t i = 0; i < work.size(); ++i) {
            metrics.on_scheduled(work[i].id);
            tokens_of[i] = prepare(work[i], live.at(work[i].id), kv, first_of[i]);
        }
        rounds_.resize(std::max(rounds_.size(), work.size()));
        for (std::size_t i = 0; i < work.size(); ++i)
            speculation.draft(work[i], live.at(work[i].id), tokens_of[i], first_of[i], max_rows(),
                              kv, rounds_[i]);

        std::vector<std::vector<float>> const logits_of_work =
            forward(model, work, live, kv, tokens_of, first_of);

        std::vector<sched::StepOutcome> outcomes;
        for (std::size_t i = 0; i < work.size(); ++i) {
            if (!work[i].samples_token) continue;
            LiveRequest& r = live.at(work[i].id);
            if (logits_of_work[i].empty())
                throw std::logic_error("Engine: a sampling work item produced no logits");
            try {
                if (!rounds_[i].tokens.empty()) {
                    outcomes.push_back(speculation.verify(work[i].id, r, first_of[i] + 1,
                                                          rounds_[i], logits_of_work[i], kv,
                                                          metrics));
                    continue;
                }
                if (rounds_[i].decoding) speculation.record_plain(r);
                outcomes.push_back(sample(work[i].id, r, logits_of_work[i], metrics));
                sample_followers(work[i].id, r, logits_of_work[i], live, metrics, failed, forked);
            } catch (RequestError const& e) {
                // This request's settings leave nothing to sample (every token banned, say):
                // it ends with the error, the others go on.
                failed.emplace_back(work[i].id, e.what());
                outcomes.push_back({.id = work[i].id, .tokens_generated = 1, .finished = true});
            }
        }
        return outcomes;
    }

  private:
    // Makes room for a work item and returns the tokens to run: those of its positions the
    // cache does not hold yet (a prefix-cache hit skips the matched ones).
    template <class Kv>
    static std::span<std::int32_t const> prepare(sched::ScheduledWork const& w, LiveRequest& r,
                                                 Kv& kv, int& first) {
        first = kv.grow(w.id, r, w);
        int const end = w.first_position + w.token_count;
        if (first >= end) return {};
        return std::span<std::int32_t const>(r.context).subspan(
            static_cast<std::size_t>(first), static_cast<std::size_t>(end - first));
    }

    // Runs the work as passes of consecutive pieces while their rows fit; a chunk longer than a
    // pass is split (only its last piece's logits are used), a speculating item returns a row
    // per token. Returns the logits rows of each sampling item.
    template <class Kv>
    std::vector<std::vector<float>> forward(
        Model const& model, std::vector<sched::ScheduledWork> const& work, LiveRequests& live,
        Kv& kv, std::vector<std::span<std::int32_t const>> const& tokens_of,
        std::vector<int> const& first_of) {
        struct Piece {
            std::size_t work_index;
            SequenceChunk chunk;
        };
        int const rows_per_pass = max_rows();
        std::vector<Piece> pieces;
        for (std::size_t i = 0; i < work.size(); ++i) {
            LiveRequest& r = live.at(work[i].id);
            int first = first_of[i];
            if (!rounds_[i].tokens.empty()) {
                pieces.push_back({i, SequenceChunk{.slot = r.kv.seq,
                                                   .first_position = first,
                                                   .tokens = rounds_[i].tokens,
                                                   .all_logits = true}});
                continue;
            }
            auto tokens = tokens_of[i];
            while (!tokens.empty()) {
                auto const n =
                    std::min<std::size_t>(tokens.size(), static_cast<std::size_t>(rows_per_pass));
                pieces.push_back({i, SequenceChunk{.slot = r.kv.seq,
                                                   .first_position = first,
                                                   .tokens = tokens.first(n),
                                                   .first_cache_slot = first - r.kv.evicted,
                                                   .attention_scores = kv.scores_of(r.kv)}});
                tokens = tokens.subspan(n);
                first += static_cast<int>(n);
            }
        }

        std::vector<std::vector<float>> logits_of_work(work.size());
        for (std::size_t begin = 0; begin < pieces.size();) {
            std::size_t end = begin;
            int rows = 0;
            while (end < pieces.size() &&
                   rows + static_cast<int>(pieces[end].chunk.tokens.size()) <= rows_per_pass) {
                rows += static_cast<int>(pieces[end].chunk.tokens.size());
                ++end;
            }
            std::vector<SequenceChunk> chunks;
            for (std::size_t p = begin; p < end; ++p) chunks.push_back(pieces[p].chunk);
            if (int8_activations_) {
                model.template forward<kernels::Int8Activations>(chunks, kv.cache(), workspace_,
                                                                 logits_);
            } else {
                model.forward(chunks, kv.cache(), workspace_, logits_);
            }
            std::size_t row = 0;
            for (std::size_t p = begin; p < end; ++p) {
                std::size_t const w = pieces[p].work_index;
                std::size_t const piece_rows =
                    pieces[p].chunk.all_logits ? pieces[p].chunk.tokens.size() : 1;
                auto const rows_of_piece = std::span<float const>(logits_).subspan(
                    row * config.vocab, piece_rows * config.vocab);
                row += piece_rows;
                if (!work[w].samples_token) continue;
                logits_of_work[w].assign(rows_of_piece.begin(),
                                         rows_of_piece.end());  // the latest piece wins
            }
            begin = end;
        }
        return logits_of_work;
    }

    // The other choices of a request sample their first tokens from its prompt's logits, each
    // with its own seed (and matcher): the same draws they would make after a prefill of
    // their own.
    void sample_followers(sched::RequestId leader, LiveRequest& r, std::span<float const> logits,
                          LiveRequests& live, sched::MetricsRecorder& metrics, Failures& failed,
                          Forks& forked) {
        std::vector<sched::RequestId> const followers = std::move(r.followers);
        r.followers.clear();
        for (sched::RequestId const f : followers) {
            try {
                bool const finished = sample(f, live.at(f), logits, metrics).finished;
                forked.push_back({leader, f, finished});
            } catch (RequestError const& e) {
                failed.emplace_back(f, e.what());
            }
        }
    }

    sched::StepOutcome sample(sched::RequestId id, LiveRequest& r, std::span<float const> logits,
                              sched::MetricsRecorder& metrics) {
        auto const& output_tokens = r.output.tokens();
        kernels::TokenHistory const history{r.prompt, output_tokens};
        auto const step = static_cast<std::uint32_t>(output_tokens.size());
        if (r.request.grammar) {
            if (!r.matcher) r.matcher.emplace(r.request.grammar);
            // The mask comes before every sampling setting: they see allowed tokens only.
            masked_.assign(logits.begin(), logits.end());
            if (r.matcher->mask_logits(masked_) == 0)
                throw RequestError("grammar: no token of the vocabulary continues the output");
            logits = masked_;
        }
        // Draws depend on (seed, step) only, so a seeded request repeats itself whatever else
        // runs beside it. The vocabulary at run time: a static one measured 0.70-0.93x this
        // form (slower) on both vocabularies (bench/specialization, docs/specialization.md).
        kernels::SampledToken const sampled = kernels::sample_token(
            logits, r.request.sampling, history, /*request_id=*/0, step, sampling_);
        if (r.matcher) r.matcher->accept_token(sampled.token);
        TokenEvent event = accept_token(id, r, sampled.token);
        event.logprob = sampled.logprob;
        event.top_logprobs.assign(sampled.top_logprobs.begin(), sampled.top_logprobs.end());
        bool const finished = event.finish.has_value();
        deliver(r, event, metrics);
        return {.id = id, .tokens_generated = 1, .finished = finished};
    }

    typename Model::Workspace workspace_;
    kernels::SamplingWorkspace sampling_;
    std::vector<float> logits_;
    std::vector<float> masked_;  // a constrained request's logits after the grammar's mask
    bool int8_activations_;
    std::vector<DraftRound> rounds_;  // per work item of the current step, reused across steps
};

}  // namespace tinfer
