#pragma once
// GGUF reader (versions 2 and 3, little-endian). File::open maps the file read-only and
// validates all of it before returning: every count against the bytes left, every tensor's
// type, shape, alignment and extent. Malformed input raises tinfer::FormatError naming the
// byte offset and what was expected there; nothing is allocated from a count the file could
// not back with bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/gguf/gguf_types.hpp>
#include <tinfer/gguf/mapped_file.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace tinfer::gguf {

struct TensorInfo {
    std::string name;
    TensorType type = TensorType::f32;
    int n_dims = 0;
    std::array<std::uint64_t, max_dims> dims{1, 1, 1, 1};  // ne0 (contiguous row) first
    std::uint64_t offset = 0;                              // from the start of the data section
    std::span<std::byte const> data;

    std::uint64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
    std::uint64_t row_length() const { return dims[0]; }
    std::uint64_t rows() const { return dims[1] * dims[2] * dims[3]; }
};

struct KeyValue {
    std::string key;
    Value value;
};

namespace detail {

// Reads little-endian fields from a byte span; every read checks the bytes left first.
class Cursor {
  public:
    explicit Cursor(std::span<std::byte const> bytes) : bytes_(bytes) {}

    std::uint64_t position() const { return position_; }
    std::uint64_t remaining() const { return bytes_.size() - position_; }

    template <class T>
    T read(std::string_view what) {
        static_assert(std::is_trivially_copyable_v<T>);
        require(sizeof(T), what);
        T value;
        std::memcpy(&value, bytes_.data() + position_, sizeof(T));
        position_ += sizeof(T);
        return value;
    }

    std::string read_string(std::string_view what) {
        std::uint64_t const at = position_;
        auto const length = read<std::uint64_t>(std::string(what) + " length (u64)");
        if (length > remaining()) {
            throw FormatError(at, std::string(what) + " of " + std::to_string(length) +
                                      " bytes, but only " + std::to_string(remaining()) +
                                      " bytes follow its length");
        }
        std::string text(reinterpret_cast<char const*>(bytes_.data() + position_),
                         static_cast<std::size_t>(length));
        position_ += length;
        return text;
    }

    // A count of items that each take at least `min_item_bytes` must fit in the bytes left;
    // checked before anything is allocated for them.
    void require_count(std::uint64_t at, std::uint64_t count, std::uint64_t min_item_bytes,
                       std::string_view what) const {
        if (count > remaining() / min_item_bytes) {
            throw FormatError(at, std::string(what) + " of " + std::to_string(count) +
                                      " needs at least " + std::to_string(min_item_bytes) +
                                      " bytes each, but only " + std::to_string(remaining()) +
                                      " bytes are left");
        }
    }

  private:
    void require(std::uint64_t size, std::string_view what) const {
        if (size > remaining()) {
            throw FormatError(position_, "expected " + std::string(what) + " (" +
                                             std::to_string(size) + " bytes), but the file ends " +
                                             std::to_string(remaining()) + " bytes later");
        }
    }

    std::span<std::byte const> bytes_;
    std::uint64_t position_ = 0;
};

// Smallest encoding of one value of a type: lets counts be checked against the bytes left.
constexpr std::uint64_t min_value_bytes(ValueType type) {
    switch (type) {
        case ValueType::u8:
        case ValueType::i8:
        case ValueType::boolean:
            return 1;
        case ValueType::u16:
        case ValueType::i16:
            return 2;
        case ValueType::u32:
        case ValueType::i32:
        case ValueType::f32:
            return 4;
        case ValueType::string:  // its u64 length
        case ValueType::u64:
        case ValueType::i64:
        case ValueType::f64:
            return 8;
        case ValueType::array:  // u32 element type + u64 count
            return 12;
    }
    return 1;
}

inline ValueType read_value_type(Cursor& cursor, std::string_view what) {
    std::uint64_t const at = cursor.position();
    auto const id = cursor.read<std::uint32_t>(what);
    if (id >= value_type_count) {
        throw FormatError(
            at, "expected " + std::string(what) + " (0..12), found " + std::to_string(id));
    }
    return static_cast<ValueType>(id);
}

inline Value read_scalar(Cursor& cursor, ValueType type) {
    switch (type) {
        case ValueType::u8:
            return cursor.read<std::uint8_t>("a u8 value");
        case ValueType::i8:
            return cursor.read<std::int8_t>("an i8 value");
        case ValueType::u16:
            return cursor.read<std::uint16_t>("a u16 value");
        case ValueType::i16:
            return cursor.read<std::int16_t>("an i16 value");
        case ValueType::u32:
            return cursor.read<std::uint32_t>("a u32 value");
        case ValueType::i32:
            return cursor.read<std::int32_t>("an i32 value");
        case ValueType::f32:
            return cursor.read<float>("an f32 value");
        case ValueType::boolean: {
            std::uint64_t const at = cursor.position();
            auto const byte = cursor.read<std::uint8_t>("a bool value");
            if (byte > 1) {
                throw FormatError(at,
                                  "expected a bool value (0 or 1), found " + std::to_string(byte));
            }
            return byte == 1;
        }
        case ValueType::string:
            return cursor.read_string("a string value");
        case ValueType::u64:
            return cursor.read<std::uint64_t>("a u64 value");
        case ValueType::i64:
            return cursor.read<std::int64_t>("an i64 value");
        case ValueType::f64:
            return cursor.read<double>("an f64 value");
        case ValueType::array:
            break;
    }
    throw FormatError(cursor.position(), "expected a scalar value type");
}

inline Value read_value(Cursor& cursor, ValueType type) {
    if (type != ValueType::array) return read_scalar(cursor, type);
    std::uint64_t const type_at = cursor.position();
    ValueType const element_type = read_value_type(cursor, "an array element type");
    if (element_type == ValueType::array) {
        throw FormatError(type_at,
                          "expected a scalar or string array element type; nested "
                          "arrays are not supported");
    }
    std::uint64_t const count_at = cursor.position();
    auto const count = cursor.read<std::uint64_t>("an array length (u64)");
    cursor.require_count(count_at, count, min_value_bytes(element_type), "an array length");
    Array array{element_type, {}};
    array.items.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < count; ++i)
        array.items.push_back(read_scalar(cursor, element_type));
    return array;
}

// The stored integer, if the value is of an integer type.
struct IntegerValue {
    bool is_signed;
    std::uint64_t magnitude_bits;  // the value's bits: an int64 when is_signed
};
inline std::optional<IntegerValue> integer_of(Value const& value) {
    return std::visit(
        [](auto const& v) -> std::optional<IntegerValue> {
            using V = std::remove_cvref_t<decltype(v)>;
            if constexpr (std::is_same_v<V, bool> || !std::is_integral_v<V>) {
                return std::nullopt;
            } else if constexpr (std::is_signed_v<V>) {
                return IntegerValue{true, static_cast<std::uint64_t>(static_cast<std::int64_t>(v))};
            } else {
                return IntegerValue{false, static_cast<std::uint64_t>(v)};
            }
        },
        value.storage);
}

template <class T>
inline constexpr bool is_integer_target = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Converts a metadata value to T, or explains why not (integers: any integer type whose value
// fits; floating point: f32 or f64; bool; std::string).
template <class T>
std::optional<T> convert(Value const& value, std::string& why) {
    if constexpr (is_integer_target<T>) {
        auto const integer = integer_of(value);
        if (!integer) {
            why = "holds " + std::string(name_of(value.type())) + ", expected an integer";
            return std::nullopt;
        }
        if (integer->is_signed) {
            auto const v = static_cast<std::int64_t>(integer->magnitude_bits);
            if (std::in_range<T>(v)) return static_cast<T>(v);
            why = "holds " + std::to_string(v) + ", which does not fit the requested type";
        } else {
            std::uint64_t const v = integer->magnitude_bits;
            if (std::in_range<T>(v)) return static_cast<T>(v);
            why = "holds " + std::to_string(v) + ", which does not fit the requested type";
        }
        return std::nullopt;
    } else if constexpr (std::is_floating_point_v<T>) {
        if (auto const* f = value.get_if<float>()) return static_cast<T>(*f);
        if (auto const* d = value.get_if<double>()) return static_cast<T>(*d);
        why = "holds " + std::string(name_of(value.type())) + ", expected f32 or f64";
        return std::nullopt;
    } else if constexpr (std::is_same_v<T, bool>) {
        if (auto const* b = value.get_if<bool>()) return *b;
        why = "holds " + std::string(name_of(value.type())) + ", expected bool";
        return std::nullopt;
    } else {
        static_assert(std::is_same_v<T, std::string>,
                      "gguf::File::get supports integers, float, double, bool and std::string");
        if (auto const* s = value.string()) return *s;
        why = "holds " + std::string(name_of(value.type())) + ", expected string";
        return std::nullopt;
    }
}

constexpr bool is_power_of_two(std::uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

}  // namespace detail

class File {
  public:
    static File open(std::filesystem::path const& path) {
        File file;
        file.mapping_ = MappedFile::open(path);
        file.parse(file.mapping_.bytes());
        return file;
    }

    // The caller keeps `bytes` alive as long as the File and its tensors' spans are used.
    static File from_bytes(std::span<std::byte const> bytes) {
        File file;
        file.parse(bytes);
        return file;
    }

    std::uint32_t version() const { return version_; }
    std::uint64_t alignment() const { return alignment_; }
    std::uint64_t data_offset() const { return data_offset_; }  // start of the data section
    std::span<std::byte const> bytes() const { return bytes_; }
    // The file's read-only private mapping (File::open), empty for from_bytes: memory whose
    // pages may be dropped and read again from the file.
    std::span<std::byte const> mapped_bytes() const { return mapping_.bytes(); }

    std::vector<KeyValue> const& metadata() const { return metadata_; }

    Value const* find(std::string_view key) const {
        auto const it = key_index_.find(key);
        return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
    }

    template <class T>
    T get(std::string_view key) const {
        Value const* value = find(key);
        if (value == nullptr) throw Error("GGUF key '" + std::string(key) + "' is missing");
        return converted<T>(key, *value);
    }

    template <class T>
    std::optional<T> get_optional(std::string_view key) const {
        Value const* value = find(key);
        if (value == nullptr) return std::nullopt;
        return converted<T>(key, *value);
    }

    // The strings of a string array; the views live as long as the File.
    std::vector<std::string_view> get_strings(std::string_view key) const {
        Array const& array = array_at(key);
        if (array.element_type != ValueType::string) {
            throw Error("GGUF key '" + std::string(key) + "' holds an array of " +
                        std::string(name_of(array.element_type)) + ", expected strings");
        }
        std::vector<std::string_view> strings;
        strings.reserve(array.items.size());
        for (Value const& item : array.items) strings.emplace_back(*item.string());
        return strings;
    }

    // A numeric array, each element converted to T with its range checked.
    template <class T>
    std::vector<T> get_array(std::string_view key) const {
        Array const& array = array_at(key);
        std::vector<T> values;
        values.reserve(array.items.size());
        for (std::size_t i = 0; i < array.items.size(); ++i) {
            std::string why;
            auto converted_item = detail::convert<T>(array.items[i], why);
            if (!converted_item) {
                throw Error("GGUF key '" + std::string(key) + "' element " + std::to_string(i) +
                            " " + why);
            }
            values.push_back(*converted_item);
        }
        return values;
    }

    std::vector<TensorInfo> const& tensors() const { return tensors_; }

    TensorInfo const* find_tensor(std::string_view name) const {
        auto const it = tensor_index_.find(name);
        return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
    }

    TensorInfo const& tensor(std::string_view name) const {
        TensorInfo const* info = find_tensor(name);
        if (info == nullptr) throw Error("GGUF tensor '" + std::string(name) + "' is missing");
        return *info;
    }

  private:
    File() = default;

    template <class T>
    T converted(std::string_view key, Value const& value) const {
        std::string why;
        auto result = detail::convert<T>(value, why);
        if (!result) throw Error("GGUF key '" + std::string(key) + "' " + why);
        return *std::move(result);
    }

    Array const& array_at(std::string_view key) const {
        Value const* value = find(key);
        if (value == nullptr) throw Error("GGUF key '" + std::string(key) + "' is missing");
        Array const* array = value->array();
        if (array == nullptr) {
            throw Error("GGUF key '" + std::string(key) + "' holds " +
                        std::string(name_of(value->type())) + ", expected an array");
        }
        return *array;
    }

    void parse(std::span<std::byte const> bytes) {
        bytes_ = bytes;
        detail::Cursor cursor(bytes);

        if (cursor.read<std::uint32_t>("the magic \"GGUF\"") != magic) {
            throw FormatError(0, "expected the magic \"GGUF\"");
        }
        version_ = cursor.read<std::uint32_t>("the version (u32)");
        if (version_ != 2 && version_ != 3) {
            throw FormatError(4,
                              "unknown version " + std::to_string(version_) + ", expected 2 or 3");
        }
        std::uint64_t const tensor_count_at = cursor.position();
        auto const tensor_count = cursor.read<std::uint64_t>("the tensor count (u64)");
        std::uint64_t const kv_count_at = cursor.position();
        auto const kv_count = cursor.read<std::uint64_t>("the metadata count (u64)");

        // A key-value pair takes at least a key length, a type and one byte of value.
        constexpr std::uint64_t min_kv_bytes = 8 + 4 + 1;
        cursor.require_count(kv_count_at, kv_count, min_kv_bytes, "a metadata count");
        metadata_.reserve(static_cast<std::size_t>(kv_count));
        for (std::uint64_t i = 0; i < kv_count; ++i) read_key_value(cursor);

        // A tensor info takes at least a name length, n_dims, one dim, a type and an offset.
        constexpr std::uint64_t min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;
        cursor.require_count(tensor_count_at, tensor_count, min_tensor_info_bytes,
                             "a tensor count");
        tensors_.reserve(static_cast<std::size_t>(tensor_count));
        std::vector<std::uint64_t> offset_positions;
        offset_positions.reserve(static_cast<std::size_t>(tensor_count));
        for (std::uint64_t i = 0; i < tensor_count; ++i) {
            offset_positions.push_back(read_tensor_info(cursor));
        }

        std::uint64_t const infos_end = cursor.position();
        data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_;
        if (tensor_count > 0 && data_offset_ > bytes.size()) {
            throw FormatError(infos_end, "expected padding to byte " +
                                             std::to_string(data_offset_) +
                                             " where the tensor data begins, but the file ends");
        }
        std::uint64_t const data_size = tensor_count > 0 ? bytes.size() - data_offset_ : 0;
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            place_tensor_data(tensors_[i], offset_positions[i], data_size);
        }
    }

    void read_key_value(detail::Cursor& cursor) {
        std::uint64_t const key_at = cursor.position();
        std::string key = cursor.read_string("a metadata key");
        ValueType const type = detail::read_value_type(cursor, "a metadata value type");
        std::uint64_t const value_at = cursor.position();
        Value value = detail::read_value(cursor, type);
        if (key_index_.contains(key)) {
            throw FormatError(key_at, "expected a new metadata key, found duplicate '" + key + "'");
        }
        if (key == "general.alignment") {
            auto const* alignment = value.get_if<std::uint32_t>();
            if (alignment == nullptr) {
                throw FormatError(value_at, "expected general.alignment as u32, found " +
                                                std::string(name_of(type)));
            }
            if (!detail::is_power_of_two(*alignment)) {
                throw FormatError(value_at,
                                  "expected general.alignment to be a power of two, "
                                  "found " +
                                      std::to_string(*alignment));
            }
            alignment_ = *alignment;
        }
        key_index_.emplace(key, metadata_.size());
        metadata_.push_back({std::move(key), std::move(value)});
    }

    // Reads one tensor info and checks its shape and type; returns where its offset field is.
    std::uint64_t read_tensor_info(detail::Cursor& cursor) {
        TensorInfo info;
        std::uint64_t const name_at = cursor.position();
        info.name = cursor.read_string("a tensor name");
        if (tensor_index_.contains(info.name)) {
            throw FormatError(name_at,
                              "expected a new tensor name, found duplicate '" + info.name + "'");
        }
        std::uint64_t const n_dims_at = cursor.position();
        auto const n_dims = cursor.read<std::uint32_t>("a tensor's dimension count (u32)");
        if (n_dims < 1 || n_dims > static_cast<std::uint32_t>(max_dims)) {
            throw FormatError(n_dims_at, "expected 1 to 4 dimensions for tensor '" + info.name +
                                             "', found " + std::to_string(n_dims));
        }
        info.n_dims = static_cast<int>(n_dims);
        std::uint64_t elements = 1;
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            std::uint64_t const dim_at = cursor.position();
            auto const dim = cursor.read<std::uint64_t>("a tensor dimension (u64)");
            if (dim == 0) {
                throw FormatError(dim_at, "expected a positive size for dimension " +
                                              std::to_string(d) + " of tensor '" + info.name +
                                              "', found 0");
            }
            constexpr auto max_elements =
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
            if (dim > max_elements / elements) {
                throw FormatError(dim_at, "expected the element count of tensor '" + info.name +
                                              "' to fit in int64, but it overflows at dimension " +
                                              std::to_string(d));
            }
            elements *= dim;
            info.dims[d] = dim;
        }
        std::uint64_t const type_at = cursor.position();
        auto const type_id = cursor.read<std::uint32_t>("a tensor type (u32)");
        info.type = static_cast<TensorType>(type_id);
        auto const geometry = block_geometry(info.type);
        if (!geometry) {
            throw FormatError(type_at, "expected a known tensor type for '" + info.name +
                                           "', found type id " + std::to_string(type_id));
        }
        if (info.dims[0] % geometry->elements != 0) {
            throw FormatError(n_dims_at + 4,
                              "expected the row length of tensor '" + info.name +
                                  "' to be a multiple of " + std::to_string(geometry->elements) +
                                  " (the " + std::string(name_of(info.type)) +
                                  " block size), found " + std::to_string(info.dims[0]));
        }
        std::uint64_t const offset_at = cursor.position();
        info.offset = cursor.read<std::uint64_t>("a tensor data offset (u64)");
        tensor_index_.emplace(info.name, tensors_.size());
        tensors_.push_back(std::move(info));
        return offset_at;
    }

    void place_tensor_data(TensorInfo& info, std::uint64_t offset_at, std::uint64_t data_size) {
        if (info.offset % alignment_ != 0) {
            throw FormatError(offset_at, "expected the data offset of tensor '" + info.name +
                                             "' to be a multiple of " + std::to_string(alignment_) +
                                             ", found " + std::to_string(info.offset));
        }
        auto const geometry = *block_geometry(info.type);
        // Bytes per block can exceed elements per block (F32), so the product is checked.
        std::uint64_t const blocks = info.elements() / geometry.elements;
        if (blocks > std::numeric_limits<std::uint64_t>::max() / geometry.bytes) {
            throw FormatError(offset_at,
                              "expected the byte size of tensor '" + info.name + "' to fit in u64");
        }
        std::uint64_t const size = blocks * geometry.bytes;
        if (info.offset > data_size || size > data_size - info.offset) {
            throw FormatError(offset_at, "expected the " + std::to_string(size) +
                                             " data bytes of tensor '" + info.name +
                                             "' at data offset " + std::to_string(info.offset) +
                                             " to lie within the file's " +
                                             std::to_string(data_size) + " data bytes");
        }
        info.data = bytes_.subspan(static_cast<std::size_t>(data_offset_ + info.offset),
                                   static_cast<std::size_t>(size));
    }

    MappedFile mapping_;
    std::span<std::byte const> bytes_;
    std::uint32_t version_ = 0;
    std::uint64_t alignment_ = default_alignment;
    std::uint64_t data_offset_ = 0;
    std::vector<KeyValue> metadata_;
    std::map<std::string, std::size_t, std::less<>> key_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

namespace detail {

template <class Block>
void dequantize_blocks(std::span<std::byte const> src, std::span<float> dst) {
    std::size_t const blocks = dst.size() / Block::elements;
    for (std::size_t b = 0; b < blocks; ++b) {
        Block block;  // copied out: tensor data need not be aligned for Block
        std::memcpy(&block, src.data() + b * sizeof(Block), sizeof(Block));
        quant::dequantize_block(block, dst.data() + b * Block::elements);
    }
}

template <class Convert>
void dequantize_halves(std::span<std::byte const> src, std::span<float> dst, Convert convert) {
    for (std::size_t i = 0; i < dst.size(); ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, src.data() + 2 * i, sizeof(bits));
        dst[i] = convert(bits);
    }
}

}  // namespace detail

// Decodes whole blocks of `type` from src into dst (dst.size() elements). Throws tinfer::Error
// for a type without a decoder here or sizes that are not the same whole number of blocks.
inline void dequantize(TensorType type, std::span<std::byte const> src, std::span<float> dst) {
    auto const geometry = block_geometry(type);
    if (!geometry) {
        throw Error("cannot dequantize unknown tensor type id " +
                    std::to_string(static_cast<std::uint32_t>(type)));
    }
    if (dst.size() % geometry->elements != 0 ||
        src.size() != dst.size() / geometry->elements * geometry->bytes) {
        throw Error("dequantize " + std::string(name_of(type)) + ": " + std::to_string(src.size()) +
                    " source bytes do not hold exactly " + std::to_string(dst.size()) +
                    " elements in whole blocks of " + std::to_string(geometry->elements));
    }
    switch (type) {
        case TensorType::f32:
            if (!dst.empty()) std::memcpy(dst.data(), src.data(), src.size());
            return;
        case TensorType::f16:
            return detail::dequantize_halves(src, dst, f16_bits_to_float);
        case TensorType::bf16:
            return detail::dequantize_halves(src, dst, bf16_bits_to_float);
        case TensorType::q4_0:
            return detail::dequantize_blocks<quant::BlockQ4_0>(src, dst);
        case TensorType::q4_1:
            return detail::dequantize_blocks<quant::BlockQ4_1>(src, dst);
        case TensorType::q5_0:
            return detail::dequantize_blocks<quant::BlockQ5_0>(src, dst);
        case TensorType::q5_1:
            return detail::dequantize_blocks<quant::BlockQ5_1>(src, dst);
        case TensorType::q8_0:
            return detail::dequantize_blocks<quant::BlockQ8_0>(src, dst);
        case TensorType::q2_k:
            return detail::dequantize_blocks<quant::BlockQ2_K>(src, dst);
        case TensorType::q3_k:
            return detail::dequantize_blocks<quant::BlockQ3_K>(src, dst);
        case TensorType::q4_k:
            return detail::dequantize_blocks<quant::BlockQ4_K>(src, dst);
        case TensorType::q5_k:
            return detail::dequantize_blocks<quant::BlockQ5_K>(src, dst);
        case TensorType::q6_k:
            return detail::dequantize_blocks<quant::BlockQ6_K>(src, dst);
    }
    throw Error("cannot dequantize tensor type id " +
                std::to_string(static_cast<std::uint32_t>(type)));
}

// Dequantizes rows [first_row, first_row + dst.size() / row_length) of a tensor.
inline void dequantize_rows(TensorInfo const& tensor, std::uint64_t first_row,
                            std::span<float> dst) {
    auto const geometry = *block_geometry(tensor.type);
    std::uint64_t const row_length = tensor.row_length();
    std::uint64_t const row_bytes = row_length / geometry.elements * geometry.bytes;
    if (dst.size() % row_length != 0 || first_row > tensor.rows() ||
        dst.size() / row_length > tensor.rows() - first_row) {
        throw Error("dequantize_rows: tensor '" + tensor.name + "' has " +
                    std::to_string(tensor.rows()) + " rows of " + std::to_string(row_length) +
                    "; cannot read " + std::to_string(dst.size()) + " elements from row " +
                    std::to_string(first_row));
    }
    dequantize(tensor.type,
               tensor.data.subspan(static_cast<std::size_t>(first_row * row_bytes),
                                   static_cast<std::size_t>(dst.size() / row_length * row_bytes)),
               dst);
}

}  // namespace tinfer::gguf
