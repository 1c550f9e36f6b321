#pragma once
// A dimension a kernel is written over once and compiled either way: StaticExtent<N> carries N
// in its type (the loop trip counts, tile sizes and stack buffers are constants of the generated
// code), DynamicExtent carries it at run time (one instantiation serves every size). CuTe's
// Int<N> and int play the same roles. A kernel takes `Extent auto` parameters and reads them
// as ints; with a static extent the value is a constant expression after inlining, so the
// source is the same and only the generated code differs. bench/specialization measures what
// each kernel gains from the static form (docs/specialization.md).
#include <concepts>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

template <int N>
struct StaticExtent {
    static constexpr bool is_static = true;
    static constexpr int value = N;
    TINFER_HOST_DEVICE constexpr operator int() const noexcept { return N; }
};

struct DynamicExtent {
    static constexpr bool is_static = false;
    int value = 0;
    TINFER_HOST_DEVICE constexpr operator int() const noexcept { return value; }
};

template <class E>
concept Extent = requires(E const e) {
    { E::is_static } -> std::convertible_to<bool>;
    { static_cast<int>(e) } -> std::same_as<int>;
};

// The same kind of extent (static or dynamic) for value / divisor, e.g. the pairs of a head.
template <int divisor, Extent E>
constexpr auto divide_extent(E e) {
    static_assert(divisor > 0, "divide_extent: the divisor must be positive");
    if constexpr (E::is_static)
        return StaticExtent<E::value / divisor>{};
    else
        return DynamicExtent{static_cast<int>(e) / divisor};
}

// Room for an extent's elements in a stack buffer: N when static, `dynamic_bound` otherwise (a
// kernel taking a DynamicExtent checks the value against the bound).
template <Extent E, int dynamic_bound>
constexpr int capacity_of() {
    if constexpr (E::is_static)
        return E::value;
    else
        return dynamic_bound;
}

// The extent a kernel's benchmark or test asks for: static N, or N held at run time.
template <bool is_static, int N>
constexpr auto extent_of() {
    if constexpr (is_static)
        return StaticExtent<N>{};
    else
        return DynamicExtent{N};
}

static_assert(Extent<StaticExtent<64>> && Extent<DynamicExtent>);

// `v` as a value the optimizer cannot see through (an empty asm that may change it): a
// dimension a program read at run time, though this one is a compile-time constant.
inline int opaque_int(int v) {
#if defined(__GNUC__) || defined(__clang__)
    asm volatile("" : "+r"(v));
#else
    int volatile copy = v;
    v = copy;
#endif
    return v;
}

// A DynamicExtent of `n` that the optimizer cannot fold back into the constant it came from.
inline DynamicExtent opaque_extent(int n) {
    return {opaque_int(n)};
}

// How code holding a compile-time shape hands its dimensions to kernels written over extents.
// StaticShapes: as StaticExtent<N>, the kernels generated for the shape (what models run).
// DynamicShapes: as DynamicExtent values the optimizer cannot fold back into constants, the
// code a model that read its shape at run time would run, from the same source; the
// end-to-end twin that bench/specialization times against the static model.
struct StaticShapes {
    static constexpr bool is_static = true;
    static constexpr char const* name = "static";
    template <int N>
    static constexpr StaticExtent<N> extent() {
        return {};
    }
};

struct DynamicShapes {
    static constexpr bool is_static = false;
    static constexpr char const* name = "dynamic";
    template <int N>
    static DynamicExtent extent() {
        return opaque_extent(N);
    }
};

template <class S>
concept ShapePolicy = requires {
    { S::is_static } -> std::convertible_to<bool>;
    { S::template extent<1>() } -> Extent;
};

static_assert(ShapePolicy<StaticShapes> && ShapePolicy<DynamicShapes>);

}  // namespace tinfer
