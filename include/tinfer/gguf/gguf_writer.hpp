#pragma once
// A small GGUF writer, mainly so tests can build files of their own. It writes exactly what it
// is given and checks nothing (duplicate keys, odd dimension counts and unknown type ids are
// written as asked), so tests can also make malformed files on purpose.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf_types.hpp>

namespace tinfer::gguf {

class Writer {
  public:
    explicit Writer(std::uint32_t version = 3) : version_(version) {}

    // Adding "general.alignment" as a u32 also sets the alignment the writer pads to.
    void add(std::string key, Value value) {
        if (auto const* alignment = value.get_if<std::uint32_t>();
            key == "general.alignment" && alignment != nullptr && *alignment != 0) {
            alignment_ = *alignment;
        }
        metadata_.push_back({std::move(key), std::move(value)});
    }

    template <class T>
    void add_array(std::string key, std::vector<T> const& values) {
        Array array{value_type_of<T>(), {}};
        array.items.reserve(values.size());
        for (T const& v : values) array.items.emplace_back(v);
        add(std::move(key), Value(std::move(array)));
    }

    void add_strings(std::string key, std::vector<std::string> const& strings) {
        add_array(std::move(key), strings);
    }

    // dims: ne0 (the contiguous row) first. The bytes are copied.
    void add_tensor(std::string name, TensorType type, std::vector<std::uint64_t> dims,
                    std::span<std::byte const> bytes) {
        tensors_.push_back({std::move(name), type, std::move(dims),
                            std::vector<std::byte>(bytes.begin(), bytes.end())});
    }

    std::vector<std::byte> to_bytes() const {
        std::vector<std::byte> out;
        // One allocation for a multi-GiB model, not a doubling copy per growth.
        std::size_t tensor_bytes = 0;
        for (TensorEntry const& t : tensors_) tensor_bytes += align(t.bytes.size());
        out.reserve(tensor_bytes + (std::size_t{1} << 20));
        put<std::uint32_t>(out, magic);
        put<std::uint32_t>(out, version_);
        put<std::uint64_t>(out, tensors_.size());
        put<std::uint64_t>(out, metadata_.size());
        for (KeyValueEntry const& kv : metadata_) {
            put_string(out, kv.key);
            put<std::uint32_t>(out, static_cast<std::uint32_t>(kv.value.type()));
            put_value(out, kv.value);
        }
        std::uint64_t offset = 0;
        for (TensorEntry const& t : tensors_) {
            put_string(out, t.name);
            put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
            for (std::uint64_t const d : t.dims) put<std::uint64_t>(out, d);
            put<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
            put<std::uint64_t>(out, offset);
            offset = align(offset + t.bytes.size());
        }
        // Padding goes between pieces, never after the last tensor, so a file cut anywhere is
        // detectably short.
        if (!tensors_.empty()) out.resize(align(out.size()));
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
            if (i + 1 < tensors_.size()) out.resize(align(out.size()));
        }
        return out;
    }

    void write(std::filesystem::path const& path) const {
        std::vector<std::byte> const bytes = to_bytes();
        std::ofstream file(path, std::ios::binary | std::ios::trunc);
        file.write(reinterpret_cast<char const*>(bytes.data()),
                   static_cast<std::streamsize>(bytes.size()));
        if (!file) throw Error("cannot write GGUF file '" + path.string() + "'");
    }

  private:
    struct KeyValueEntry {
        std::string key;
        Value value;
    };
    struct TensorEntry {
        std::string name;
        TensorType type;
        std::vector<std::uint64_t> dims;
        std::vector<std::byte> bytes;
    };

    template <class T>
    static ValueType value_type_of() {
        return static_cast<ValueType>(Value::Storage(T{}).index());
    }

    std::uint64_t align(std::uint64_t n) const {
        return (n + alignment_ - 1) / alignment_ * alignment_;
    }

    template <class T>
    static void put(std::vector<std::byte>& out, T value) {
        std::byte raw[sizeof(T)];
        std::memcpy(raw, &value, sizeof(T));
        out.insert(out.end(), raw, raw + sizeof(T));
    }

    static void put_string(std::vector<std::byte>& out, std::string const& text) {
        put<std::uint64_t>(out, text.size());
        auto const* first = reinterpret_cast<std::byte const*>(text.data());
        out.insert(out.end(), first, first + text.size());
    }

    static void put_value(std::vector<std::byte>& out, Value const& value) {
        std::visit(
            [&out](auto const& v) {
                using V = std::remove_cvref_t<decltype(v)>;
                if constexpr (std::is_same_v<V, std::string>) {
                    put_string(out, v);
                } else if constexpr (std::is_same_v<V, Array>) {
                    put<std::uint32_t>(out, static_cast<std::uint32_t>(v.element_type));
                    put<std::uint64_t>(out, v.items.size());
                    for (Value const& item : v.items) put_value(out, item);
                } else if constexpr (std::is_same_v<V, bool>) {
                    put<std::uint8_t>(out, v ? 1 : 0);
                } else {
                    put<V>(out, v);
                }
            },
            value.storage);
    }

    std::uint32_t version_;
    std::uint64_t alignment_ = default_alignment;
    std::vector<KeyValueEntry> metadata_;
    std::vector<TensorEntry> tensors_;
};

}  // namespace tinfer::gguf
