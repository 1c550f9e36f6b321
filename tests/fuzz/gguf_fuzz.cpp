// libFuzzer target for the GGUF reader: parse, walk every metadata value and tensor, decode
// tensors up to a size cap. Only tinfer::Error may escape the reader; anything else (a crash,
// a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <tinfer/gguf/gguf.hpp>

namespace {

// Decoding cost grows with elements; larger tensors are described but not decoded.
constexpr std::uint64_t max_decoded_elements = std::uint64_t{1} << 18;

double volatile sink;  // keeps the walks from being optimised away

void touch(tinfer::gguf::Value const& value) {
    std::visit(
        [](auto const& v) {
            using V = std::remove_cvref_t<decltype(v)>;
            if constexpr (std::is_same_v<V, std::string>) {
                sink = sink + static_cast<double>(v.size());
            } else if constexpr (std::is_same_v<V, tinfer::gguf::Array>) {
                for (auto const& item : v.items) touch(item);
            } else {
                sink = sink + static_cast<double>(v);
            }
        },
        value.storage);
}

template <class T>
void try_get(tinfer::gguf::File const& file, std::string const& key) {
    try {
        (void)file.get<T>(key);
    } catch (tinfer::Error const&) {
    }
}

void walk(tinfer::gguf::File const& file) {
    for (auto const& kv : file.metadata()) {
        touch(kv.value);
        try_get<std::int64_t>(file, kv.key);
        try_get<std::uint8_t>(file, kv.key);
        try_get<double>(file, kv.key);
        try_get<bool>(file, kv.key);
        try_get<std::string>(file, kv.key);
        try {
            (void)file.get_strings(kv.key);
        } catch (tinfer::Error const&) {
        }
        try {
            (void)file.get_array<std::int32_t>(kv.key);
        } catch (tinfer::Error const&) {
        }
    }
    for (auto const& tensor : file.tensors()) {
        if (file.find_tensor(tensor.name) != &tensor) __builtin_trap();
        if (tensor.elements() > max_decoded_elements) continue;
        std::vector<float> out(tensor.elements());
        try {
            tinfer::gguf::dequantize(tensor.type, tensor.data, out);
            std::vector<float> row(tensor.row_length());
            tinfer::gguf::dequantize_rows(tensor, tensor.rows() - 1, row);
        } catch (tinfer::Error const&) {
        }
        for (float v : out) sink = sink + v;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    try {
        auto const file = tinfer::gguf::File::from_bytes(
            std::span(reinterpret_cast<std::byte const*>(data), size));
        walk(file);
    } catch (tinfer::Error const&) {
    }
    return 0;
}
