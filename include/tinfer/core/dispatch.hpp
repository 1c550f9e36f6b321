#pragma once
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <tinfer/core/error.hpp>

namespace tinfer {

namespace detail {
template <auto V>
void append_value(std::ostringstream& out) {
    if constexpr (requires { out << V; }) {
        out << V;
    } else if constexpr (requires { name_of(V); }) {
        out << name_of(V);
    } else {
        out << "<value>";
    }
}
template <auto First, auto...>
inline constexpr auto first_of = First;
}  // namespace detail

// Turns a runtime value into a compile-time one: calls `body.template operator()<V>()` for the
// first V in Values that equals `value` (compared with `matches(value, V)` when given, else
// ==). Every V is instantiated, so the list is the instantiation budget. An unlisted value
// raises tinfer::Error naming the allowed ones.
template <auto... Values, class Runtime, class Body, class Matches>
decltype(auto) dispatch(Runtime const& value, Body&& body, Matches&& matches,
                        std::string_view what = "value") {
    using Result = decltype(body.template operator()<detail::first_of<Values...>>());
    if constexpr (std::is_void_v<Result>) {
        bool found =
            ((matches(value, Values) ? (body.template operator()<Values>(), true) : false) || ...);
        if (found) return;
    } else {
        std::optional<Result> result;
        (void)((matches(value, Values) ? (result.emplace(body.template operator()<Values>()), true)
                                       : false) ||
               ...);
        if (result) return Result(std::move(*result));
    }
    std::ostringstream message;
    message << "no compiled-in instantiation for this " << what << "; compiled in: ";
    bool first = true;
    ((message << (first ? "" : ", "), first = false, detail::append_value<Values>(message)), ...);
    throw Error(message.str());
}

template <auto... Values, class Runtime, class Body>
decltype(auto) dispatch(Runtime const& value, Body&& body) {
    return dispatch<Values...>(value, std::forward<Body>(body),
                               [](auto const& a, auto const& b) { return a == b; });
}

}  // namespace tinfer
