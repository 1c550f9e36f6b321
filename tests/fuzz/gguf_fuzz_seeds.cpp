// Writes small valid GGUF files into a directory: the fuzzer's seed corpus.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <tinfer/gguf/gguf_writer.hpp>

namespace gguf = tinfer::gguf;

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    std::filesystem::path const dir = argv[1];

    gguf::Writer meta;
    meta.add("general.architecture", "llama");
    meta.add("u8", std::uint8_t{1});
    meta.add("i8", std::int8_t{-1});
    meta.add("u16", std::uint16_t{2});
    meta.add("i16", std::int16_t{-2});
    meta.add("u32", std::uint32_t{3});
    meta.add("i32", std::int32_t{-3});
    meta.add("f32", 0.5f);
    meta.add("bool", true);
    meta.add("u64", std::uint64_t{4});
    meta.add("i64", std::int64_t{-4});
    meta.add("f64", 0.25);
    meta.add_strings("tokens", {"a", "b", "<s>"});
    meta.add_array("types", std::vector<std::int32_t>{1, 1, 3});
    meta.write(dir / "metadata.gguf");

    // One small tensor of each type the reader knows, with bytes that decode to finite values.
    struct Kind {
        gguf::TensorType type;
        std::uint64_t row;
        std::size_t bytes;
    };
    Kind const kinds[] = {{gguf::TensorType::f32, 4, 16},     {gguf::TensorType::f16, 4, 8},
                          {gguf::TensorType::bf16, 4, 8},     {gguf::TensorType::q4_0, 32, 18},
                          {gguf::TensorType::q4_1, 32, 20},   {gguf::TensorType::q5_0, 32, 22},
                          {gguf::TensorType::q5_1, 32, 24},   {gguf::TensorType::q8_0, 32, 34},
                          {gguf::TensorType::q4_k, 256, 144}, {gguf::TensorType::q6_k, 256, 210},
                          {gguf::TensorType::q2_k, 256, 84},  {gguf::TensorType::q3_k, 256, 110},
                          {gguf::TensorType::q5_k, 256, 176}};
    gguf::Writer tensors;
    tensors.add("general.alignment", std::uint32_t{64});
    int index = 0;
    for (Kind const& k : kinds) {
        std::vector<std::byte> bytes(k.bytes * 2, std::byte{0x21});
        tensors.add_tensor("t" + std::to_string(index++), k.type, {k.row, 2}, bytes);
    }
    tensors.write(dir / "tensors.gguf");

    gguf::Writer v2(2);
    v2.add("k", "v");
    std::vector<std::byte> const one(4);
    v2.add_tensor("x", gguf::TensorType::f32, {1}, one);
    v2.write(dir / "version2.gguf");
    return 0;
}
