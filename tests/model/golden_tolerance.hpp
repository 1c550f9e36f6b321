#pragma once
// The logit tolerance of a golden position, derived from measurement: the float64 reference,
// run again in float32 on the same tokens, records how far an ordinary float32
// implementation lands from float64 at that position (GoldenPosition::float32_error, a
// fraction of max|logit|; tests/reference/README.md has the figures). tinfer's float32 pass
// differs from that one by summation order only, so it may be off by a small multiple of it.
// The floor keeps a position where float32 happened to be almost exact from demanding more
// than a few ulps of the largest logit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "../reference/golden_logits.hpp"

namespace tinfer::testing {

inline constexpr double float32_error_multiple = 8;
inline constexpr double golden_floor_rtol = 16 * std::numeric_limits<float>::epsilon();

inline double golden_tolerance(GoldenPosition const& ref) {
    // A version 1 file has no measurement: the old fixed bound.
    double const measured = std::isnan(ref.float32_error) ? 1e-3 / float32_error_multiple
                                                          : static_cast<double>(ref.float32_error);
    return std::max(float32_error_multiple * measured, golden_floor_rtol) * ref.max_abs_logit;
}

// max |ours - reference| over the stored ids of a golden position, in units of its tolerance
// (infinite where ours is NaN).
inline double scaled_golden_error(std::span<float const> ours, GoldenPosition const& ref) {
    double worst = 0;
    double const bound = golden_tolerance(ref);
    for (auto const& [id, value] : ref.logits) {
        double const got = ours[static_cast<std::size_t>(id)];
        if (std::isnan(got)) return std::numeric_limits<double>::infinity();
        worst = std::max(worst, std::abs(got - value) / bound);
    }
    return worst;
}

}  // namespace tinfer::testing
