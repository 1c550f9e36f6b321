#pragma once
// The simplest KV store: a fixed number of sequence slots, each with room for max_context
// positions, float32, laid out [slot][layer][kv_head][position][head_dim] so one KV head's run of
// positions is contiguous and a view's load is one copy. Serves as the reference store for
// attention tests and for single-user runs; the paged cache implements the same concepts.
// "Position" below is the cache slot: the token's index in the slot's cache, which equals its
// position in the sequence until retain_slots evicts tokens.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/kv/kv_view.hpp>

namespace tinfer::kv {

template <ModelConfig Cfg>
requires ModelShape<Cfg>
class ContiguousKvCache {
  public:
    static constexpr int head_dim = Cfg.head_dim;

    // One sequence's keys and values of one layer.
    class View {
      public:
        int tokens() const { return tokens_; }
        // out: [count][head_dim], positions first .. first + count - 1 of kv_head.
        void load_keys(int kv_head, int first, int count, float* out) const {
            copy(keys_, kv_head, first, count, out);
        }
        void load_values(int kv_head, int first, int count, float* out) const {
            copy(values_, kv_head, first, count, out);
        }
        // The same rows in place (kv::KvRowsView): always stored so here.
        static constexpr bool rows_always_in_place = true;
        float const* key_rows(int kv_head, int first, int /*count*/) const {
            return row(keys_, kv_head, first);
        }
        float const* value_rows(int kv_head, int first, int /*count*/) const {
            return row(values_, kv_head, first);
        }
        // kv::KvPrefetchView.
        void prefetch(int kv_head, int first, int count) const {
            std::size_t const bytes = static_cast<std::size_t>(count) * head_dim * sizeof(float);
            prefetch_bytes(row(keys_, kv_head, first), bytes);
            prefetch_bytes(row(values_, kv_head, first), bytes);
        }

      private:
        friend class ContiguousKvCache;
        View(float const* keys, float const* values, int tokens, int capacity)
            : keys_(keys), values_(values), tokens_(tokens), capacity_(capacity) {}

        float const* row(float const* base, int kv_head, int first) const {
            return base + (static_cast<std::size_t>(kv_head) * capacity_ + first) * head_dim;
        }
        void copy(float const* base, int kv_head, int first, int count, float* out) const {
            std::memcpy(out, row(base, kv_head, first),
                        static_cast<std::size_t>(count) * head_dim * sizeof(float));
        }

        float const* keys_;    // [kv_heads][capacity][head_dim]
        float const* values_;  // [kv_heads][capacity][head_dim]
        int tokens_;
        int capacity_;
    };

    ContiguousKvCache(int slots, int max_context) : slots_(slots), capacity_(max_context) {
        if (slots <= 0)
            throw Error("ContiguousKvCache: slots must be positive, got " + std::to_string(slots));
        if (max_context <= 0 || max_context > Cfg.max_context) {
            throw Error("ContiguousKvCache: max_context must be in 1.." +
                        std::to_string(Cfg.max_context) + " (the config's), got " +
                        std::to_string(max_context));
        }
        std::size_t const floats = static_cast<std::size_t>(slots) * layer_floats() * Cfg.layers;
        keys_.assign(floats, 0.0f);
        values_.assign(floats, 0.0f);
        tokens_.assign(static_cast<std::size_t>(slots) * Cfg.layers, 0);
    }

    int slots() const { return slots_; }
    int max_context() const { return capacity_; }

    // Positions cached for a slot (those every layer holds).
    int tokens(int slot) const {
        check_slot(slot);
        auto const first = tokens_.begin() + static_cast<std::ptrdiff_t>(slot) * Cfg.layers;
        return *std::min_element(first, first + Cfg.layers);
    }

    // k, v: [kv_heads][head_dim] of one token. Positions fill in order: writing position p needs
    // 0 .. p-1 cached; rewriting an earlier position (recompute after truncate) is allowed.
    void write(int slot, int layer, int position, float const* k, float const* v) {
        check_slot(slot);
        check_layer(layer);
        int& cached = tokens_[static_cast<std::size_t>(slot) * Cfg.layers + layer];
        if (position < 0 || position >= capacity_) {
            throw RequestError("KV cache: position " + std::to_string(position) +
                               " is outside the slot's capacity of " + std::to_string(capacity_));
        }
        if (position > cached) {
            throw RequestError("KV cache: position " + std::to_string(position) + " of slot " +
                               std::to_string(slot) + " would leave a gap after its " +
                               std::to_string(cached) + " cached positions");
        }
        std::size_t const base = layer_offset(slot, layer);
        for (int head = 0; head < Cfg.kv_heads; ++head) {
            std::size_t const at =
                base + (static_cast<std::size_t>(head) * capacity_ + position) * head_dim;
            std::memcpy(keys_.data() + at, k + head * head_dim, head_dim * sizeof(float));
            std::memcpy(values_.data() + at, v + head * head_dim, head_dim * sizeof(float));
        }
        cached = std::max(cached, position + 1);
    }

    View view(int slot, int layer) const {
        check_slot(slot);
        check_layer(layer);
        std::size_t const base = layer_offset(slot, layer);
        return View(keys_.data() + base, values_.data() + base,
                    tokens_[static_cast<std::size_t>(slot) * Cfg.layers + layer], capacity_);
    }

    // Keeps the first `tokens` positions of a slot (0 frees it for a new sequence).
    void truncate(int slot, int tokens) {
        check_slot(slot);
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            int& cached = tokens_[static_cast<std::size_t>(slot) * Cfg.layers + layer];
            cached = std::min(cached, std::max(tokens, 0));
        }
    }
    void clear(int slot) { truncate(slot, 0); }

    // Token eviction: keeps only the cached tokens at `kept` (ascending, distinct, each below
    // tokens(slot)), compacted so slot i holds the i-th kept token, in every layer. Keys keep
    // the RoPE rotation of their original positions: the model goes on at the next position
    // while writing at cache slot kept.size(). (StreamingLLM instead re-rotates the kept keys to
    // their new cache positions; baking the original position in keeps the cache free of
    // per-step rewrites and each kept token's key exactly as it was computed.)
    void retain_slots(int slot, std::span<int const> kept) {
        int const length = tokens(slot);
        for (std::size_t i = 0; i < kept.size(); ++i) {
            if (kept[i] < 0 || kept[i] >= length || (i > 0 && kept[i] <= kept[i - 1])) {
                throw RequestError("KV cache: retain_slots needs ascending distinct slots below " +
                                   std::to_string(length) + "; entry " + std::to_string(i) +
                                   " is " + std::to_string(kept[i]));
            }
        }
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            std::size_t const base = layer_offset(slot, layer);
            for (int head = 0; head < Cfg.kv_heads; ++head) {
                std::size_t const run =
                    base + static_cast<std::size_t>(head) * capacity_ * head_dim;
                // kept[i] >= i: moving forward never overwrites a token still to be moved.
                for (std::size_t i = 0; i < kept.size(); ++i) {
                    if (kept[i] == static_cast<int>(i)) continue;
                    std::size_t const to = run + i * head_dim;
                    std::size_t const from = run + static_cast<std::size_t>(kept[i]) * head_dim;
                    std::memcpy(keys_.data() + to, keys_.data() + from, head_dim * sizeof(float));
                    std::memcpy(values_.data() + to, values_.data() + from,
                                head_dim * sizeof(float));
                }
            }
            tokens_[static_cast<std::size_t>(slot) * Cfg.layers + layer] =
                static_cast<int>(kept.size());
        }
    }

  private:
    static constexpr std::size_t kv_floats_per_position =
        static_cast<std::size_t>(Cfg.kv_heads) * head_dim;
    std::size_t layer_floats() const { return kv_floats_per_position * capacity_; }
    std::size_t layer_offset(int slot, int layer) const {
        return (static_cast<std::size_t>(slot) * Cfg.layers + layer) * layer_floats();
    }
    void check_slot(int slot) const {
        if (slot < 0 || slot >= slots_) {
            throw RequestError("KV cache: slot " + std::to_string(slot) + " is outside 0.." +
                               std::to_string(slots_ - 1));
        }
    }

    static void check_layer(int layer) {
        if (layer < 0 || layer >= Cfg.layers) {
            throw RequestError("KV cache: layer " + std::to_string(layer) + " is outside 0.." +
                               std::to_string(Cfg.layers - 1));
        }
    }

    int slots_;
    int capacity_;
    std::vector<float> keys_;    // [slot][layer][kv_head][position][head_dim]
    std::vector<float> values_;  // [slot][layer][kv_head][position][head_dim]
    std::vector<int> tokens_;    // [slot][layer]
};

static_assert(KvStore<ContiguousKvCache<ModelConfig{.layers = 1,
                                                    .hidden = 8,
                                                    .heads = 1,
                                                    .kv_heads = 1,
                                                    .head_dim = 8,
                                                    .ffn = 8,
                                                    .vocab = 8,
                                                    .max_context = 8}>>);

}  // namespace tinfer::kv
