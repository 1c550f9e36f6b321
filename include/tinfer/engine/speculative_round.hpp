#pragma once
// The speculative round of one request in a step (docs/speculative.md): before the forward
// pass, the drafter proposes up to γ tokens and their KV is reserved, so the request's work item
// becomes [last token, drafts...] with logits for every row; after it, spec::verify_drafts keeps
// a prefix of the drafts plus one token of the target's, streams them, and rolls the cache back
// to the kept ones. A drafter with per-request state (spec::SequenceDrafter) is told which
// tokens were kept, and when a request ends or is preempted.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/engine/drafters.hpp>
#include <tinfer/engine/live_request.hpp>
#include <tinfer/engine/speculative.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/step_plan.hpp>

namespace tinfer {

// A work item's round this step: its drafts and the tokens it runs, [last token, drafts].
struct DraftRound {
    bool decoding = false;  // a decode of a request with draft_tokens > 0: counts as a round
    spec::DraftProposal proposal;
    std::vector<std::int32_t> tokens;  // empty: no drafts this step, run as a plain decode
};

template <class Drafter>
class SpeculativeRound {
  public:
    using Round = DraftRound;

    SpeculativeRound(Drafter drafter, int vocab)
        : drafter_(std::move(drafter)), workspace_(vocab) {}

    Drafter& drafter() { return drafter_; }
    Drafter const& drafter() const { return drafter_; }
    spec::SpeculationStats const& totals() const { return totals_; }

    // Drafts for a work item that decodes (the cache holds all of its context but the last
    // token) and reserves their KV through `kv` (a KvLifecycle). Runs after every planned
    // reservation, so the drafts only take blocks the plan left free; when none are left the
    // item runs without drafts.
    template <class Kv>
    void draft(sched::ScheduledWork const& w, LiveRequest& r, std::span<std::int32_t const> tokens,
               int first, int max_rows, Kv& kv, Round& round) {
        round.tokens.clear();
        int const generated = static_cast<int>(r.output.tokens().size());
        // The first token comes from the prompt's pass (even when the prefix cache left only the
        // prompt's last token to run): rounds start with the second.
        round.decoding =
            r.request.draft_tokens > 0 && w.samples_token && tokens.size() == 1 && generated > 0;
        if (!round.decoding) return;
        // A round appends drafts + 1 tokens: never draft past max_tokens, nor past one pass.
        int const wanted =
            std::min({r.request.draft_tokens, r.request.max_tokens - generated - 1, max_rows - 1});
        if (wanted <= 0) return;
        spec::SequenceView const sequence{
            .tokens = r.context, .prompt_length = r.prompt.size(), .request_id = 0};
        drafter_.propose({.sequence = sequence,
                          .max_drafts = wanted,
                          .params = r.request.sampling,
                          .sequence_id = static_cast<std::uint64_t>(w.id)},
                         round.proposal);
        if (round.proposal.empty()) return;
        int const drafts = round.proposal.size();
        if (drafts > wanted)
            throw std::logic_error("Engine: the drafter proposed " + std::to_string(drafts) +
                                   " tokens, more than the " + std::to_string(wanted) + " asked");
        if (!kv.reserve(r.kv, first + 1 + drafts)) {
            round.proposal.clear();
            return;
        }
        round.tokens.push_back(tokens.front());
        auto const proposed = round.proposal.tokens().first(static_cast<std::size_t>(drafts));
        round.tokens.insert(round.tokens.end(), proposed.begin(), proposed.end());
    }

    // Verifies a round of a sequence of `length` tokens (the cache held length - 1 before it),
    // streams its tokens and rolls the cache back to the kept ones. A stop condition may end the
    // request mid-round: the tokens after it are dropped.
    template <class Kv>
    sched::StepOutcome verify(sched::RequestId id, LiveRequest& r, int length, Round& round,
                              std::span<float const> logits, Kv& kv,
                              sched::MetricsRecorder& metrics) {
        int const drafts = static_cast<int>(round.tokens.size()) - 1;
        spec::DraftProposal const& proposal = round.proposal;
        spec::SequenceView const sequence{
            .tokens = r.context, .prompt_length = r.prompt.size(), .request_id = 0};
        spec::Verdict const verdict =
            spec::verify_drafts(sequence, proposal, logits, r.request.sampling, workspace_);
        std::vector<std::int32_t> kept;
        spec::append_round_tokens(kept, proposal, verdict);

        int fed = 0;
        bool finished = false;
        std::vector<TokenEvent> events;
        for (std::int32_t const token : kept) {
            events.push_back(accept_token(id, r, token));
            ++fed;
            if (events.back().finish) {
                finished = true;
                break;
            }
        }
        // Position length + i holds draft i; only the accepted drafts that were also streamed
        // belong to the context.
        kv.truncate(r.kv, length + std::min(verdict.accepted_drafts, fed));
        // The drafter's own state drops the rejected drafts too.
        if constexpr (spec::SequenceDrafter<Drafter>)
            drafter_.rollback(static_cast<std::uint64_t>(id), r.context);
        record(r, drafts, verdict.accepted_drafts, fed);
        for (TokenEvent& event : events) deliver(r, event, metrics);
        return {.id = id, .tokens_generated = fed, .finished = finished};
    }

    // A decode of a speculating request that ran without drafts still counts as a round.
    void record_plain(LiveRequest& r) { record(r, 0, 0, 1); }

    // A drafter's per-request state goes when the request ends or is preempted (a preempted
    // request drafts again from scratch when it runs again).
    void release(sched::RequestId id) {
        if constexpr (spec::SequenceDrafter<Drafter>)
            drafter_.release(static_cast<std::uint64_t>(id));
    }

  private:
    void record(LiveRequest& r, int drafted, int accepted, int tokens) {
        for (spec::SpeculationStats* stats : {&r.speculation, &totals_}) {
            ++stats->rounds;
            stats->drafted += drafted;
            stats->accepted += accepted;
            stats->tokens_generated += tokens;
        }
    }

    Drafter drafter_;
    spec::SpeculativeWorkspace workspace_;
    spec::SpeculationStats totals_;
};

}  // namespace tinfer
