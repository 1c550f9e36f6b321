#pragma once
// Checks of the programs' options whose messages say what is wanted. CLI11's PositiveNumber and
// NonNegativeNumber answer `-n 0` with "Value 0 not in range 0.000000 to 1797693134862315...",
// and IsMember lists names joined by commas, which a name with a comma ("int8,int4") blurs.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tinfer::examples {

// A number of at least `floor`: "-n 0" gets "--max-tokens: must be at least 1, got 0".
inline CLI::Validator at_least(long long floor) {
    std::string const wanted = floor == 0 ? "0 or more" : "at least " + std::to_string(floor);
    return CLI::Validator(
        [floor, wanted](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return "not a number: " + text;
            if (value < static_cast<double>(floor)) return "must be " + wanted + ", got " + text;
            return {};
        },
        floor == 0   ? "NONNEGATIVE"
        : floor == 1 ? "POSITIVE"
                     : ">=" + std::to_string(floor));
}

// One of `names`, listed with " | " between them: {fp32 | ... | int8 | int4 | int8,int4}.
inline CLI::Validator one_of(std::vector<std::string> const& names) {
    std::string listed;
    for (std::string const& name : names) listed += (listed.empty() ? "" : " | ") + name;
    return CLI::Validator(
        [names, listed](std::string& text) -> std::string {
            for (std::string const& name : names)
                if (text == name) return {};
            return text + " is not one of " + listed;
        },
        "{" + listed + "}");
}

}  // namespace tinfer::examples
