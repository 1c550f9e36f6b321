#pragma once
// The contract between attention kernels and KV storage. Attention never sees how K and V are
// laid out (contiguous, paged, quantized): it asks a view for a run of tokens of one KV head,
// decoded to float, and works tile by tile. A paged cache and a contiguous one produce the same
// floats for the same tokens, so attention over either gives bitwise the same result.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>

#include <tinfer/core/prefetch.hpp>

namespace tinfer::kv {

// One sequence's cached keys and values for one layer.
template <class View>
concept KvView = requires(View const& view, int kv_head, int first, int count, float* out) {
    { view.tokens() } -> std::convertible_to<int>;  // cached positions: 0 .. tokens()-1
    view.load_keys(kv_head, first, count, out);     // out: [count][head_dim]
    view.load_values(kv_head, first, count, out);   // out: [count][head_dim]
};

// A view that can also hand out a run of rows in place: float [count][head_dim] where the
// storage holds them so, or nullptr where it does not (a quantized codec, a run across blocks),
// and the caller loads them instead. The floats are the ones load_* would copy, so attention
// gives the same bits either way.
template <class View>
concept KvRowsView = KvView<View> && requires(View const& view, int kv_head, int first, int count) {
    { view.key_rows(kv_head, first, count) } -> std::same_as<float const*>;
    { view.value_rows(kv_head, first, count) } -> std::same_as<float const*>;
};

// A KvRowsView whose rows are always in place (never nullptr): attention compiles no copy for it.
template <class View>
concept AlwaysInPlaceRows = KvRowsView<View> && requires {
    requires View::rows_always_in_place;
};

// A view that can ask for the stored bytes of a run of tokens (K and V, in whatever form its
// codec keeps them) ahead of a read: a hint (core/prefetch.hpp) that changes no value.
template <class View>
concept KvPrefetchView = KvView<View> &&
    requires(View const& view, int kv_head, int first, int count) {
    view.prefetch(kv_head, first, count);
};

// Storage the model writes into and reads views from. `seq` is the caller's slot for a
// sequence; the cache owner (engine, scheduler) has already made room for every position the
// forward pass writes, so append never allocates.
template <class Cache>
concept KvStore = requires(Cache& cache, Cache const& const_cache, int seq, int layer, int position,
                           float const* k, float const* v) {
    cache.write(seq, layer, position, k, v);  // k, v: [kv_heads][head_dim] for one token
    { const_cache.view(seq, layer) } -> KvView;
};

// A view over float keys and values laid out [kv_heads][tokens][head_dim], owned by the
// caller: what benchmarks, examples and kernel tests hand attention when no cache is involved.
struct FloatKvView {
    int head_dim = 0;
    int length = 0;  // tokens per KV head
    std::span<float const> keys, values;

    int tokens() const { return length; }
    void load_keys(int kv_head, int first, int count, float* out) const {
        load(keys, kv_head, first, count, out);
    }
    void load_values(int kv_head, int first, int count, float* out) const {
        load(values, kv_head, first, count, out);
    }
    // The same rows in place (KvRowsView), always.
    static constexpr bool rows_always_in_place = true;
    float const* key_rows(int kv_head, int first, int /*count*/) const {
        return keys.data() + start(kv_head, first);
    }
    float const* value_rows(int kv_head, int first, int /*count*/) const {
        return values.data() + start(kv_head, first);
    }

    void prefetch(int kv_head, int first, int count) const {
        std::size_t const bytes = static_cast<std::size_t>(count) * head_dim * sizeof(float);
        prefetch_bytes(keys.data() + start(kv_head, first), bytes);
        prefetch_bytes(values.data() + start(kv_head, first), bytes);
    }

  private:
    std::size_t start(int kv_head, int first) const {
        return (static_cast<std::size_t>(kv_head) * length + first) * head_dim;
    }
    void load(std::span<float const> from, int kv_head, int first, int count, float* out) const {
        std::copy_n(from.data() + start(kv_head, first), static_cast<std::size_t>(count) * head_dim,
                    out);
    }
};

}  // namespace tinfer::kv
