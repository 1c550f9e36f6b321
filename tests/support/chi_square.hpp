#pragma once
// Pearson's chi-square goodness of fit with its p-value, written here so the statistical tests
// (samplers, speculative decoding) depend on no statistics library.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace tinfer::testing {

inline constexpr double min_expected_per_bin = 5;  // the usual validity rule for Pearson's test

// Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a): the power series of
// P = 1 - Q for x < a + 1, Lentz's continued fraction for Q otherwise (both converge fast there).
inline double regularized_upper_gamma(double a, double x) {
    constexpr double tolerance = 1e-15;
    constexpr int max_terms = 10000;
    if (x <= 0) return 1;
    double const log_prefactor = -x + a * std::log(x) - std::lgamma(a);
    if (x < a + 1) {
        double term = 1 / a;
        double sum = term;
        for (int n = 1; n < max_terms && std::abs(term) > std::abs(sum) * tolerance; ++n) {
            term *= x / (a + n);
            sum += term;
        }
        return 1 - sum * std::exp(log_prefactor);
    }
    constexpr double tiny = 1e-300;
    double b = x + 1 - a;
    double c = 1 / tiny;
    double d = 1 / b;
    double fraction = d;
    for (int i = 1; i < max_terms; ++i) {
        double const an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::abs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::abs(c) < tiny) c = tiny;
        d = 1 / d;
        double const step = d * c;
        fraction *= step;
        if (std::abs(step - 1) < tolerance) break;
    }
    return std::exp(log_prefactor) * fraction;
}

inline double chi_square_survival(double statistic, int degrees_of_freedom) {
    return regularized_upper_gamma(degrees_of_freedom / 2.0, statistic / 2.0);
}

struct ChiSquare {
    double statistic;
    int degrees_of_freedom;
    double p_value;
};

// Pearson's test of `observed` counts against `probabilities`; bins expecting fewer than
// min_expected_per_bin draws are pooled (and the pool joins the smallest bin if still short).
// Draws in a bin of probability 0 make the statistic infinite.
inline ChiSquare chi_square(std::vector<long> const& observed,
                            std::vector<double> const& probabilities, long draws) {
    BOOST_REQUIRE_EQUAL(observed.size(), probabilities.size());
    std::vector<std::pair<double, long>> bins;  // (expected, observed)
    std::pair<double, long> pool{0, 0};
    for (std::size_t bin = 0; bin < observed.size(); ++bin) {
        double const expected = probabilities[bin] * static_cast<double>(draws);
        if (expected == 0) {
            if (observed[bin] > 0) return {HUGE_VAL, 0, 0.0};
            continue;
        }
        if (expected < min_expected_per_bin) {
            pool.first += expected;
            pool.second += observed[bin];
        } else {
            bins.emplace_back(expected, observed[bin]);
        }
    }
    if (pool.first > 0) {
        if (pool.first < min_expected_per_bin && !bins.empty()) {
            auto smallest = std::ranges::min_element(bins);
            smallest->first += pool.first;
            smallest->second += pool.second;
        } else {
            bins.push_back(pool);
        }
    }
    BOOST_REQUIRE_MESSAGE(bins.size() >= 2, "chi-square needs at least two bins");
    double statistic = 0;
    for (auto const& [expected, count] : bins)
        statistic += (count - expected) * (count - expected) / expected;
    int const degrees_of_freedom = static_cast<int>(bins.size()) - 1;
    return {statistic, degrees_of_freedom, chi_square_survival(statistic, degrees_of_freedom)};
}

}  // namespace tinfer::testing
