#pragma once
// A request's life in the paged KV cache, as the engine drives it: admit (with prefix reuse),
// grow (reserve positions for a step), fork (share a prefix copy-on-write), preempt (swap the
// blocks to a host pool, or give them to the prefix cache to recompute later), swap back in,
// evict tokens (the scheduler's eviction policy), and free. The cache's allocator and block
// tables are the single source of truth; this part owns the cache and the host pool's books.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include <tinfer/engine/live_request.hpp>
#include <tinfer/sched/eviction.hpp>
#include <tinfer/sched/metrics.hpp>
#include <tinfer/sched/preemption.hpp>
#include <tinfer/sched/step_plan.hpp>

namespace tinfer {

template <class Cache, class Eviction>
class KvLifecycle {
  public:
    static constexpr bool evicts = !std::same_as<Eviction, sched::NoEviction>;
    // An evicting cache no longer mirrors the token sequence, so it never shares blocks.
    static constexpr bool can_share_prefixes = !evicts;

    KvLifecycle(std::size_t kv_budget_bytes, std::size_t host_swap_bytes, bool prefix_caching,
                sched::MetricsRecorder& metrics)
        : cache_(kv_budget_bytes),
          host_pool_blocks_(static_cast<int>(host_swap_bytes / Cache::bytes_per_block)),
          prefix_caching_(prefix_caching && can_share_prefixes),
          metrics_(&metrics) {}

    Cache& cache() { return cache_; }
    Cache const& cache() const { return cache_; }

    // The most positions one request can ever be served in (a sliding window's old blocks go
    // back as it grows a token at a time; the scheduler shortens prefill chunks to what fits).
    std::int64_t max_request_tokens(int max_context) const {
        if (Cache::min_blocks_for(max_context) <= cache_.total_blocks()) return max_context;
        std::int64_t lo = 0, hi = max_context;  // min_blocks_for(lo) fits, (hi) does not
        while (hi - lo > 1) {
            std::int64_t const mid = lo + (hi - lo) / 2;
            (Cache::min_blocks_for(mid) <= cache_.total_blocks() ? lo : hi) = mid;
        }
        return lo;
    }

    // ---- the scheduler's view: device blocks, plus the host pool for swapping ----
    int free_blocks() const { return cache_.available_blocks(); }
    int blocks_needed(LiveRequest const* r, int length) const {
        SequenceKv const* kv = r ? &r->kv : nullptr;
        if (kv && kv->seq >= 0) return cache_.blocks_needed(kv->seq, length);
        // Swapped out: its import holds only what it held (a hybrid cache: the window).
        if (kv && kv->swapped_tokens > 0)
            return Cache::blocks_to_resume(kv->swapped_tokens, length);
        // Admitted through the prefix cache, it pins the cached blocks it matches, all of them
        // (also past `length`), and needs new ones only past them.
        if (r && prefix_caching_)
            return cache_.admission_blocks(
                std::span<int const>(r->context.data(), r->context.size()), length);
        return Cache::blocks_for(length);
    }
    int reclaimable_blocks(SequenceKv const* kv) const {
        return kv && kv->seq >= 0 ? cache_.reclaimable_blocks(kv->seq) : 0;
    }
    int free_host_blocks() const { return host_pool_blocks_ - host_used_; }
    int host_blocks_needed(SequenceKv const* kv) const {
        return kv && kv->seq >= 0 ? Cache::blocks_for(cache_.tokens(kv->seq)) : 0;
    }

    // Admits a request that holds no sequence yet (reusing what the prefix cache has of its
    // context), then reserves the positions `w` needs. Returns the first position the cache
    // does not hold: the step runs the context from there.
    int grow(sched::RequestId id, LiveRequest& r, sched::ScheduledWork const& w) {
        SequenceKv& kv = r.kv;
        if (kv.seq < 0) {
            if (prefix_caching_) {
                auto const admission = cache_.admit(
                    std::span<int const>(r.context.data(), r.context.size()), r.max_context());
                kv.seq = admission.seq;
                metrics_->on_prefix_hit(id, admission.cached_tokens);
            } else {
                kv.seq = cache_.admit(r.max_context());
            }
        }
        if (!cache_.reserve(kv.seq, w.kv_length))
            throw std::logic_error("Engine: the scheduler planned more KV than the cache holds");
        if constexpr (Eviction::needs_attention_scores) {
            if (kv.scores.size() < static_cast<std::size_t>(w.kv_length))
                kv.scores.resize(static_cast<std::size_t>(w.kv_length), 0.0f);
        }
        return std::max(w.first_position, cache_.tokens(kv.seq) + kv.evicted);
    }

    // Reserves positions up to `length` beyond the plan (draft tokens); false when the blocks
    // are not there, and nothing changes.
    bool reserve(SequenceKv& kv, int length) { return cache_.reserve(kv.seq, length); }
    // Forgets every position from `length` on (rejected drafts).
    void truncate(SequenceKv& kv, int length) { cache_.truncate(kv.seq, length); }

    // A second sequence sharing every block `parent` holds, copy-on-write.
    SequenceKv fork(SequenceKv const& parent) {
        SequenceKv child;
        child.seq = cache_.fork(parent.seq);
        child.evicted = parent.evicted;
        child.scores = parent.scores;
        return child;
    }

    std::span<float> scores_of(SequenceKv& kv) {
        if constexpr (Eviction::needs_attention_scores) return kv.scores;
        return {};
    }

    void preempt(sched::RequestId id, LiveRequest& r, sched::PreemptionMode mode) {
        SequenceKv& kv = r.kv;
        metrics_->on_preempted(id);
        if (mode == sched::PreemptionMode::swap && kv.seq >= 0) {
            kv.swapped.clear();
            kv.swapped_tokens = cache_.export_blocks(kv.seq, kv.swapped);
            host_used_ += Cache::blocks_for(kv.swapped_tokens);
            metrics_->on_swapped_out(id, Cache::blocks_for(kv.swapped_tokens));
            cache_.release(kv.seq);
            kv.seq = -1;
            return;
        }
        // Recompute: the blocks go to the prefix cache, so the re-prefill mostly hits it; the
        // re-prefill starts from an empty cache, so nothing counts as evicted.
        release(r, /*keep_prefix=*/true);
        kv.evicted = 0;
        kv.scores.clear();
    }

    void swap_in(sched::RequestId id, LiveRequest& r) {
        SequenceKv& kv = r.kv;
        auto const seq = cache_.import_blocks(kv.swapped, kv.swapped_tokens, r.max_context());
        if (!seq)
            throw std::logic_error("Engine: the scheduler swapped in a request that does not fit");
        host_used_ -= Cache::blocks_for(kv.swapped_tokens);
        metrics_->on_swapped_in(id, Cache::blocks_for(kv.swapped_tokens));
        kv.seq = *seq;
        kv.swapped.clear();
        kv.swapped.shrink_to_fit();
        kv.swapped_tokens = 0;
    }

    // Disaggregation (engine/handoff.hpp). The prefill side copies out every written position
    // of a request's sequence in the cache's own block layout; returns the positions.
    int export_blocks(SequenceKv const& kv, std::vector<std::byte>& out) const {
        if (kv.seq < 0) throw std::logic_error("Engine: exporting a request that holds no KV");
        return cache_.export_blocks(kv.seq, out);
    }
    // The decode side takes such blocks in as a swapped-out request holds its KV: in host
    // memory until the scheduler swaps it in (swap_in imports them into the cache). They count
    // against the host pool while they wait, so a swap preemption cannot overcommit it.
    void adopt(SequenceKv& kv, std::vector<std::byte> blocks, int tokens) {
        kv.swapped = std::move(blocks);
        kv.swapped_tokens = tokens;
        host_used_ += Cache::blocks_for(tokens);
    }
    // Bytes export_blocks writes for `tokens` positions.
    static constexpr std::size_t exported_bytes(int tokens) {
        return static_cast<std::size_t>(Cache::held_blocks_for(tokens)) * Cache::bytes_per_block;
    }

    // Gives the sequence's blocks back; with keep_prefix (and prefix caching on) its written
    // positions stay in the prefix cache for later prompts that share them.
    void release(LiveRequest& r, bool keep_prefix) {
        SequenceKv& kv = r.kv;
        if (kv.seq < 0) return;
        if (keep_prefix && prefix_caching_) {
            int const tokens = cache_.tokens(kv.seq);
            cache_.cache_prefix(
                kv.seq, std::span<int const>(r.context.data(), static_cast<std::size_t>(tokens)));
        }
        cache_.release(kv.seq);
        kv.seq = -1;
    }

    // Everything a request holds, device and host, goes back.
    void free(LiveRequest& r, bool keep_prefix) {
        release(r, keep_prefix);
        if (r.kv.swapped_tokens > 0) host_used_ -= Cache::blocks_for(r.kv.swapped_tokens);
        r.kv.swapped_tokens = 0;
        r.kv.swapped.clear();
    }

    // The scheduler's contract: after each step, a sequence holding more than max_kept() slots
    // keeps only the policy's choice of them (compacted in place); its tokens keep the RoPE
    // positions they were written with, so a token's slot is its position minus `evicted`.
    void evict(SequenceKv& kv) {
        if (kv.seq < 0) return;
        int const held = cache_.tokens(kv.seq);
        if (held <= Eviction::max_kept()) return;
        std::span<float const> scores;
        if constexpr (Eviction::needs_attention_scores)
            scores = std::span<float const>(kv.scores).first(static_cast<std::size_t>(held));
        std::vector<int> const kept = Eviction::select_kept(held, scores);
        cache_.retain_slots(kv.seq, kept);
        if constexpr (Eviction::needs_attention_scores) {
            std::vector<float> compacted(kept.size());
            for (std::size_t i = 0; i < kept.size(); ++i)
                compacted[i] = kv.scores[static_cast<std::size_t>(kept[i])];
            kv.scores = std::move(compacted);
        }
        kv.evicted += held - static_cast<int>(kept.size());
    }

    // Share of the pool held by live sequences (what serving reports as usage: blocks only the
    // prefix cache holds are free to evict), and of their slots holding live tokens.
    double usage() const {
        return cache_.total_blocks()
                   ? static_cast<double>(cache_.sequence_blocks()) / cache_.total_blocks()
                   : 0.0;
    }
    double utilization() const { return cache_.memory_utilization(); }

  private:
    Cache cache_;
    int host_pool_blocks_;
    int host_used_ = 0;
    bool prefix_caching_;
    sched::MetricsRecorder* metrics_;
};

}  // namespace tinfer
