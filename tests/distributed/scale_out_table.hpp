#pragma once
// The tables of docs/scale-out.md, rendered from
// include/tinfer/distributed/scale_out_arithmetic.hpp. scale_out_table prints them; dist_test
// checks the doc holds exactly this text.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

#include <tinfer/distributed/scale_out_arithmetic.hpp>
#include <tinfer/presets/presets.hpp>

namespace tinfer::distributed::doc {

inline constexpr int batch = 64;
inline constexpr int context_tokens = 4096;
inline constexpr int tp_degree = 8;
inline constexpr DType activations = DType::bf16;

struct NamedModel {
    char const* name;
    ModelConfig config;
};
inline constexpr NamedModel models[] = {{"Llama-2-70B", presets::llama2_70b},
                                        {"Llama-3-8B", presets::llama3_8b}};

inline std::string grouped(std::uint64_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// Exact byte count, then the same in the largest binary unit that keeps it >= 1.
inline std::string bytes(double n) {
    char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double scaled = n;
    int unit = 0;
    while (scaled >= 1024 && unit < 4) {
        scaled /= 1024;
        ++unit;
    }
    char text[64];
    std::snprintf(text, sizeof text, " (%.3g %s)", scaled, units[unit]);
    return grouped(static_cast<std::uint64_t>(std::llround(n))) + " B" + (unit > 0 ? text : "");
}

inline std::string milliseconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g ms", seconds * 1e3);
    return text;
}

inline std::string scale_out_tables_markdown() {
    std::string out;
    out += "KV cache (fp16 K and V, as published figures quote them), context " +
           std::to_string(context_tokens) + " tokens, batch " + std::to_string(batch) + ":\n\n";
    out += "| model | KV per token | per request | per batch | request over " +
           std::string(ethernet_100g.name) + " | request over " + std::string(nvlink_h100.name) +
           " |\n";
    out += "|---|---|---|---|---|---|\n";
    for (auto const& m : models) {
        double const request = kv_bytes_per_request(m.config, context_tokens);
        out += "| " + std::string(m.name) + " | " + bytes(m.config.kv_bytes_per_token(quoted_kv)) +
               " | " + bytes(request) + " | " +
               bytes(kv_bytes_per_batch(m.config, context_tokens, batch)) + " | " +
               milliseconds(transfer_seconds(request, ethernet_100g)) + " | " +
               milliseconds(transfer_seconds(request, nvlink_h100)) + " |\n";
    }
    out += "\nTensor parallelism, TP " + std::to_string(tp_degree) + ", " +
           std::string(name_of(activations)) + " activations, one decode step of batch " +
           std::to_string(batch) + ":\n\n";
    out +=
        "| model | all-reduced per token | ring: sent per rank per token | sent per rank per "
        "step | step over " +
        std::string(nvlink_h100.name) + " | step over " + std::string(ethernet_100g.name) + " |\n";
    out += "|---|---|---|---|---|---|\n";
    for (auto const& m : models) {
        double const token = tp_all_reduce_bytes_per_token(m.config, activations);
        out += "| " + std::string(m.name) + " | " + bytes(token) + " | " +
               bytes(ring_all_reduce_bytes_per_rank(token, tp_degree)) + " | " +
               bytes(tp_bytes_per_rank_per_step(m.config, activations, tp_degree, batch)) + " | " +
               milliseconds(
                   tp_seconds_per_step(m.config, activations, tp_degree, batch, nvlink_h100)) +
               " | " +
               milliseconds(
                   tp_seconds_per_step(m.config, activations, tp_degree, batch, ethernet_100g)) +
               " |\n";
    }
    return out;
}

inline constexpr int pp_stage_counts[] = {2, 4};
inline constexpr int bubble_stage_counts[] = {2, 4, 8};
inline constexpr int bubble_micro_batches[] = {1, 2, 4, 8, 16, 32};

inline std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", fraction * 100);
    return text;
}

// The pipeline section's tables (scale_out_table pipeline).
inline std::string pipeline_tables_markdown() {
    std::string out;
    out += "Pipeline parallelism, one stage per node, " + std::string(name_of(activations)) +
           " activations, one decode step of batch " + std::to_string(batch) +
           " (every boundary its own link; TP " + std::to_string(tp_degree) +
           "'s step over the same link for comparison):\n\n";
    out +=
        "| model | stages | layers per stage | layer weights per stage | KV per token per stage | "
        "sent per boundary per token | per boundary per step | step over " +
        std::string(ethernet_100g.name) + " | TP " + std::to_string(tp_degree) +
        " step over it |\n";
    out += "|---|---|---|---|---|---|---|---|---|\n";
    for (auto const& m : models) {
        for (int const stages : pp_stage_counts) {
            out += "| " + std::string(m.name) + " | " + std::to_string(stages) + " | " +
                   std::to_string(m.config.layers / stages) + " | " +
                   bytes(pp_layer_weight_bytes_per_stage(m.config, stages)) + " | " +
                   bytes(m.config.kv_bytes_per_token(quoted_kv) / stages) + " | " +
                   bytes(pp_bytes_per_boundary_per_token(m.config, activations)) + " | " +
                   bytes(pp_bytes_per_boundary_per_step(m.config, activations, batch)) + " | " +
                   milliseconds(pp_seconds_per_boundary_per_step(m.config, activations, batch,
                                                                 ethernet_100g)) +
                   " | " +
                   milliseconds(tp_seconds_per_step(m.config, activations, tp_degree, batch,
                                                    ethernet_100g)) +
                   " |\n";
        }
    }
    out +=
        "\nThe bubble: the fraction of a step each stage idles, (S - 1) / (M + S - 1), by stage "
        "count S and micro-batches per step M:\n\n";
    out += "| stages |";
    for (int const m : bubble_micro_batches) out += " M = " + std::to_string(m) + " |";
    out += "\n|---|";
    for (std::size_t i = 0; i < std::size(bubble_micro_batches); ++i) out += "---|";
    out += "\n";
    for (int const stages : bubble_stage_counts) {
        out += "| " + std::to_string(stages) + " |";
        for (int const m : bubble_micro_batches)
            out += " " + percent(pipeline_bubble_fraction(stages, m)) + " |";
        out += "\n";
    }
    return out;
}

}  // namespace tinfer::distributed::doc
