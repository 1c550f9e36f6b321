#pragma once
// How a paged cache splits a model's layers into groups that share one block size in bytes.
//
// A model whose layers all attend globally keeps every layer in one block (one group). A model
// with sliding-window layers (Gemma 3: five sliding layers per global one) wants to release a
// sliding layer's old tokens while the global layers keep theirs, so the two kinds cannot share
// a block. Blocks of different byte sizes would need two pools and a fixed split of the memory
// budget between them, wrong for every workload but one; instead (as vLLM's hybrid allocator
// does) the layers of each kind are cut into groups of the same number of layers, the greatest
// common divisor of the two counts, so every group's block has the same size and all groups
// draw from one pool. Gemma 3 270M: 3 global and 15 sliding layers give 1 global group and 5
// sliding groups of 3 layers; the scheduler's one currency (blocks) stays exact.
//
// Groups are numbered in the order of their first layer; a layer's group holds it at `slot`
// (its index among the group's layers, in layer order).
#include <array>
#include <numeric>

#include <tinfer/config/model_config.hpp>

namespace tinfer::kv {

template <ModelConfig Cfg>
struct LayerGroups {
    static constexpr int sliding_layers = [] {
        int n = 0;
        for (int layer = 0; layer < Cfg.layers; ++layer)
            n += Cfg.layer_kind(layer) == LayerKind::sliding ? 1 : 0;
        return n;
    }();
    static constexpr int global_layers = Cfg.layers - sliding_layers;
    // Some layer releases tokens that left its window.
    static constexpr bool has_sliding = sliding_layers > 0;
    // Tokens a sliding layer's query sees, itself included (0 without sliding layers).
    static constexpr int window = has_sliding ? Cfg.sliding_window : 0;
    static constexpr int layers_per_group = global_layers == 0 || sliding_layers == 0
                                                ? Cfg.layers
                                                : std::gcd(global_layers, sliding_layers);
    static constexpr int count = Cfg.layers / layers_per_group;
    static constexpr int sliding_groups = sliding_layers / layers_per_group;
    static constexpr int global_groups = count - sliding_groups;

    struct Layout {
        std::array<int, Cfg.layers> group{};        // [layers]: the layer's group
        std::array<int, Cfg.layers> slot{};         // [layers]: its place inside the group's block
        std::array<LayerKind, Cfg.layers> kind{};   // [groups] (first `count` used)
        std::array<int, Cfg.layers> first_layer{};  // [groups]: the group's first layer
    };

    static constexpr Layout layout = [] {
        Layout l{};
        int groups = 0;
        // The group each kind is filling, and how many layers it holds so far.
        std::array<int, 2> open{-1, -1};
        std::array<int, 2> filled{0, 0};
        for (int layer = 0; layer < Cfg.layers; ++layer) {
            LayerKind const kind = Cfg.layer_kind(layer);
            auto const k = static_cast<std::size_t>(kind);
            if (open[k] < 0 || filled[k] == layers_per_group) {
                open[k] = groups++;
                filled[k] = 0;
                l.kind[static_cast<std::size_t>(open[k])] = kind;
                l.first_layer[static_cast<std::size_t>(open[k])] = layer;
            }
            l.group[static_cast<std::size_t>(layer)] = open[k];
            l.slot[static_cast<std::size_t>(layer)] = filled[k]++;
        }
        return l;
    }();

    static constexpr int group_of(int layer) {
        if constexpr (count == 1) return 0;
        return layout.group[static_cast<std::size_t>(layer)];
    }
    static constexpr int slot_of(int layer) {
        if constexpr (count == 1) return layer;
        return layout.slot[static_cast<std::size_t>(layer)];
    }
    static constexpr LayerKind kind_of_group(int group) {
        return layout.kind[static_cast<std::size_t>(group)];
    }
    static constexpr bool is_sliding_group(int group) {
        return has_sliding && kind_of_group(group) == LayerKind::sliding;
    }

    static_assert(global_layers % layers_per_group == 0 && sliding_layers % layers_per_group == 0,
                  "LayerGroups: each kind's layer count must be a multiple of layers_per_group");
};

}  // namespace tinfer::kv
