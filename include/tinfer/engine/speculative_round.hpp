#pragma once
// The speculative round of one request in a step (docs/speculative.md): before the forward
// pass, the drafter proposes up to γ tokens and their KV is reserved, so the request's work item
// becomes [last token, drafts...] with logits for every row; after it, spec::verify_drafts keeps
// a prefix of the drafts plus one token of the target's, streams them, and rolls the cache back
// to the kept ones. A drafter with per-request state (spec::SequenceDrafter) is told which
// tokens were kept, and when a request ends or is preempted.
//
// Under a grammar, drafts are checked before the pass: the first draft the grammar's matcher
// rejects ends the proposal there. Verification then sees every row's logits masked by the
// matcher's state after the drafts before it, so it samples from the constrained target
// distribution and the rule's exactness holds for it (a draft the mask forbids has p = 0, so
// keeping it in the proposal could only have been rejected).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/engine/live_request.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/step_plan.hpp>
#include <tinfer/speculative/drafters.hpp>
#include <tinfer/speculative/speculative.hpp>

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
        if (round.proposal.size() > wanted)
            throw std::logic_error("Engine: the drafter proposed " +
                                   std::to_string(round.proposal.size()) +
                                   " tokens, more than the " + std::to_string(wanted) + " asked");
        if (r.request.grammar) round.proposal.truncate(grammatical_prefix(r, round.proposal));
        if (round.proposal.empty()) return;
        int const drafts = round.proposal.size();
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
        if (r.request.grammar) logits = masked_rows(r, proposal, logits);
        spec::Verdict const verdict =
            spec::verify_drafts(sequence, proposal, logits, r.request.sampling, workspace_);
        std::vector<std::int32_t> kept;
        spec::append_round_tokens(kept, proposal, verdict);

        int fed = 0;
        bool finished = false;
        std::vector<TokenEvent> events;
        for (std::int32_t const token : kept) {
            if (r.matcher) r.matcher->accept_token(token);
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
    static grammar::Matcher& matcher_of(LiveRequest& r) {
        if (!r.matcher) r.matcher.emplace(r.request.grammar);
        return *r.matcher;
    }

    // How many leading drafts continue the output under the grammar.
    static int grammatical_prefix(LiveRequest& r, spec::DraftProposal const& proposal) {
        grammar::Matcher& matcher = matcher_of(r);
        auto const saved = matcher.position();
        int valid = 0;
        for (std::int32_t const token : proposal.tokens()) {
            if (!matcher.allows(token)) break;
            matcher.accept_token(token);
            ++valid;
        }
        matcher.restore(saved);
        return valid;
    }

    // The round's logits with row i masked by the grammar's state after drafts [0, i) (every
    // draft is grammatical: grammatical_prefix cut the proposal).
    std::span<float const> masked_rows(LiveRequest& r, spec::DraftProposal const& proposal,
                                       std::span<float const> logits) {
        grammar::Matcher& matcher = matcher_of(r);
        auto const saved = matcher.position();
        masked_.assign(logits.begin(), logits.end());
        std::size_t const rows = static_cast<std::size_t>(proposal.size()) + 1;
        std::size_t const vocab = masked_.size() / rows;
        for (std::size_t row = 0; row < rows; ++row) {
            // Past an end token the output is over: those rows are never used.
            if (matcher.ended()) break;
            int const allowed =
                matcher.mask_logits(std::span<float>(masked_).subspan(row * vocab, vocab));
            if (allowed == 0) {
                matcher.restore(saved);
                throw RequestError("grammar: no token of the vocabulary continues the output");
            }
            if (row + 1 < rows) matcher.accept_token(proposal.tokens()[row]);
        }
        matcher.restore(saved);
        return masked_;
    }

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
    std::vector<float> masked_;  // a constrained round's logits after the grammar's masks
};

}  // namespace tinfer
