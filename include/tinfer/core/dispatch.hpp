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

// Covers [first, last) with tiles of Tile elements, then one tile of the 1 .. Tile-1 left:
// f.template operator()<T>(start) with T a compile-time size, so that the work of a tile can
// be unrolled for it (register tiles of tokens, bands of query heads).
template <int Tile, class F>
constexpr void for_each_tile(int first, int last, F&& f) {
    static_assert(Tile > 0, "for_each_tile: Tile must be positive");
    int start = first;
    for (; start + Tile <= last; start += Tile) f.template operator()<Tile>(start);
    auto const rest = [&]<int... Left>(std::integer_sequence<int, Left...>) {
        (void)((last - start == Left + 1 ? (f.template operator()<Left + 1>(start), true)
                                         : false) ||
               ...);
    };
    rest(std::make_integer_sequence<int, Tile - 1>{});
}

}  // namespace tinfer
