#pragma once
// What the model tests measure on a row of logits: its argmax, and the KL divergence between
// the softmax distributions of two rows (float64, over the full vocabulary).
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

namespace tinfer::testing {

inline int argmax(std::span<float const> logits) {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// KL(p || q) of the softmax distributions of two logit rows, in float64.
inline double kl_divergence(std::span<float const> p_logits, std::span<float const> q_logits) {
    auto const log_softmax = [](std::span<float const> logits) {
        double const top = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float const v : logits) sum += std::exp(v - top);
        std::vector<double> out(logits.size());
        double const log_sum = std::log(sum) + top;
        for (std::size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
        return out;
    };
    std::vector<double> const lp = log_softmax(p_logits), lq = log_softmax(q_logits);
    double kl = 0;
    for (std::size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    return kl;
}

}  // namespace tinfer::testing
