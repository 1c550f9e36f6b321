#pragma once
// GGUF's vocabulary: tensor (ggml) type ids with their block geometry, metadata value types,
// and the Value that holds one metadata value.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <tinfer/core/dtype.hpp>

namespace tinfer::gguf {

inline constexpr std::uint32_t magic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr std::uint64_t default_alignment = 32;
inline constexpr int max_dims = 4;

enum class TensorType : std::uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    bf16 = 30,
};

// Elements per block and bytes per block of a tensor type (plain types: a block of one).
struct BlockGeometry {
    std::uint32_t elements;
    std::uint32_t bytes;
};

// nullopt for ids this reader does not know, so a file using them is rejected at open.
constexpr std::optional<BlockGeometry> block_geometry(TensorType type) {
    switch (type) {
        case TensorType::f32:
            return BlockGeometry{1, 4};
        case TensorType::f16:
        case TensorType::bf16:
            return BlockGeometry{1, 2};
        case TensorType::q4_0:
            return BlockGeometry{32, 18};
        case TensorType::q4_1:
            return BlockGeometry{32, 20};
        case TensorType::q5_0:
            return BlockGeometry{32, 22};
        case TensorType::q5_1:
            return BlockGeometry{32, 24};
        case TensorType::q8_0:
            return BlockGeometry{32, 34};
        case TensorType::q2_k:
            return BlockGeometry{256, 84};
        case TensorType::q3_k:
            return BlockGeometry{256, 110};
        case TensorType::q4_k:
            return BlockGeometry{256, 144};
        case TensorType::q5_k:
            return BlockGeometry{256, 176};
        case TensorType::q6_k:
            return BlockGeometry{256, 210};
    }
    return std::nullopt;
}

constexpr std::string_view name_of(TensorType type) {
    switch (type) {
        case TensorType::f32:
            return "F32";
        case TensorType::f16:
            return "F16";
        case TensorType::q4_0:
            return "Q4_0";
        case TensorType::q4_1:
            return "Q4_1";
        case TensorType::q5_0:
            return "Q5_0";
        case TensorType::q5_1:
            return "Q5_1";
        case TensorType::q8_0:
            return "Q8_0";
        case TensorType::q2_k:
            return "Q2_K";
        case TensorType::q3_k:
            return "Q3_K";
        case TensorType::q4_k:
            return "Q4_K";
        case TensorType::q5_k:
            return "Q5_K";
        case TensorType::q6_k:
            return "Q6_K";
        case TensorType::bf16:
            return "BF16";
    }
    return "unknown";
}

inline std::ostream& operator<<(std::ostream& out, TensorType type) {
    return out << name_of(type);
}

// The DType tinfer computes on for a tensor type (every type block_geometry knows has one).
constexpr std::optional<DType> to_dtype(TensorType type) {
    switch (type) {
        case TensorType::f32:
            return DType::f32;
        case TensorType::f16:
            return DType::f16;
        case TensorType::bf16:
            return DType::bf16;
        case TensorType::q4_0:
            return DType::q4_0;
        case TensorType::q4_1:
            return DType::q4_1;
        case TensorType::q5_0:
            return DType::q5_0;
        case TensorType::q5_1:
            return DType::q5_1;
        case TensorType::q8_0:
            return DType::q8_0;
        case TensorType::q2_k:
            return DType::q2_k;
        case TensorType::q3_k:
            return DType::q3_k;
        case TensorType::q4_k:
            return DType::q4_k;
        case TensorType::q5_k:
            return DType::q5_k;
        case TensorType::q6_k:
            return DType::q6_k;
    }
    return std::nullopt;
}

enum class ValueType : std::uint32_t {
    u8 = 0,
    i8,
    u16,
    i16,
    u32,
    i32,
    f32,
    boolean,
    string,
    array,
    u64,
    i64,
    f64,
};
inline constexpr std::uint32_t value_type_count = 13;

constexpr std::string_view name_of(ValueType type) {
    constexpr std::string_view names[value_type_count] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                          "i32", "f32", "bool", "string", "array",
                                                          "u64", "i64", "f64"};
    auto const index = static_cast<std::uint32_t>(type);
    return index < value_type_count ? names[index] : "unknown";
}

inline std::ostream& operator<<(std::ostream& out, ValueType type) {
    return out << name_of(type);
}

struct Value;

// A homogeneous array; its items hold scalars or strings (nested arrays are rejected when read).
struct Array {
    ValueType element_type = ValueType::u8;
    std::vector<Value> items;
};

// One metadata value. The alternatives are listed in ValueType order, so index() is the type id.
struct Value {
    using Storage = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t,
                                 std::uint32_t, std::int32_t, float, bool, std::string, Array,
                                 std::uint64_t, std::int64_t, double>;
    Storage storage;

    Value() = default;
    template <class T>
    requires std::is_constructible_v<Storage, T&&> &&
        (!std::is_same_v<std::remove_cvref_t<T>, Value>)Value(T&& value)
        : storage(std::forward<T>(value)) {}
    Value(char const* text) : storage(std::string(text)) {}

    ValueType type() const { return static_cast<ValueType>(storage.index()); }

    template <class T>
    T const* get_if() const {
        return std::get_if<T>(&storage);
    }
    Array const* array() const { return get_if<Array>(); }
    std::string const* string() const { return get_if<std::string>(); }
};

static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(ValueType::array),
                                                        Value::Storage>,
                             Array>,
              "Value::Storage alternatives must follow ValueType order");
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(ValueType::f64),
                                                        Value::Storage>,
                             double>,
              "Value::Storage alternatives must follow ValueType order");

}  // namespace tinfer::gguf
