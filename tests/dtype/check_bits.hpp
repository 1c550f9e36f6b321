#pragma once
// Comparing a conversion with a reference over millions of inputs: one Boost assertion per
// input would drown the log, so mismatches are counted and the first few are shown.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <ios>
#include <span>
#include <string_view>
#include <type_traits>

#include <boost/test/unit_test.hpp>

namespace tinfer::testing {

inline constexpr std::size_t shown_mismatches = 8;

// Counts the inputs where actual(x) != expected(x) (both integers: bit patterns or codes);
// the first few fail the test case on their own, with the input shown.
template <class Input, class Actual, class Expected>
std::size_t count_mismatches(std::string_view what, std::span<Input const> inputs, Actual actual,
                             Expected expected) {
    std::size_t mismatches = 0;
    for (Input const x : inputs) {
        auto const got = static_cast<std::uint64_t>(actual(x));
        auto const want = static_cast<std::uint64_t>(expected(x));
        if (got == want) continue;
        if (++mismatches <= shown_mismatches) {
            if constexpr (std::is_same_v<Input, float>) {
                BOOST_ERROR(what << ": input " << x << " (bits 0x" << std::hex
                                 << std::bit_cast<std::uint32_t>(x) << ") gave 0x" << got
                                 << ", expected 0x" << want << std::dec);
            } else {
                BOOST_ERROR(what << ": input 0x" << std::hex << static_cast<std::uint64_t>(x)
                                 << " gave 0x" << got << ", expected 0x" << want << std::dec);
            }
        }
    }
    BOOST_TEST_MESSAGE(what << ": " << inputs.size() << " inputs, " << mismatches << " mismatches");
    return mismatches;
}

}  // namespace tinfer::testing
