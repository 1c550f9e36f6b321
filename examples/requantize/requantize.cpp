// requantize: rewrites a GGUF with its layer matrices in another block type, using the
// project's GGUF writer, so a shape can be run in a weight type no package ships (SmolLM2 in
// Q8_0, say). Metadata, norms and the token embedding are copied as they are; every 2-D
// `blk.*` matrix is decoded to float and re-encoded.
//
//   requantize --model IN.gguf --type q8_0 --out OUT.gguf
//
// Q8_0 as llama.cpp makes it: per block of 32, d = max|x| / 127 (stored f16), q = round(x / d).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/core/half.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/gguf_writer.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace {

std::vector<std::byte> encode_q8_0(std::vector<float> const& x) {
    using Block = tinfer::quant::BlockQ8_0;
    std::vector<std::byte> out(x.size() / Block::elements * sizeof(Block));
    auto* blocks = reinterpret_cast<Block*>(out.data());
    for (std::size_t b = 0; b < x.size() / Block::elements; ++b) {
        float const* v = x.data() + b * Block::elements;
        float amax = 0;
        for (int i = 0; i < Block::elements; ++i) amax = std::max(amax, std::abs(v[i]));
        float const d = amax / 127.0f;
        float const inverse = d != 0 ? 1.0f / d : 0.0f;
        blocks[b].d = tinfer::float_to_f16_bits(d);
        for (int i = 0; i < Block::elements; ++i)
            blocks[b].qs[i] = static_cast<std::int8_t>(std::lround(v[i] * inverse));
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Rewrites a GGUF's layer matrices in another block type"};
    std::string in, out, type = "q8_0";
    app.add_option("-m,--model", in, "The GGUF to read")->required();
    app.add_option("--out", out, "The GGUF to write")->required();
    app.add_option("--type", type, "Block type of the layer matrices")
        ->check(CLI::IsMember({"q8_0"}))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        auto const file = tinfer::gguf::File::open(in);
        tinfer::gguf::Writer writer;
        for (auto const& kv : file.metadata()) {
            // The file type describes the old encoding; 7 is llama.cpp's MOSTLY_Q8_0.
            if (kv.key == "general.file_type") {
                writer.add(kv.key, tinfer::gguf::Value(std::uint32_t{7}));
            } else {
                writer.add(kv.key, kv.value);
            }
        }
        int converted = 0;
        for (auto const& t : file.tensors()) {
            std::vector<std::uint64_t> const dims(t.dims.begin(), t.dims.begin() + t.n_dims);
            bool const layer_matrix = t.name.starts_with("blk.") && t.n_dims == 2 &&
                                      t.dims[0] % tinfer::quant::BlockQ8_0::elements == 0;
            if (!layer_matrix) {
                writer.add_tensor(t.name, t.type, dims, t.data);
                continue;
            }
            std::vector<float> values(t.dims[0] * t.dims[1]);
            tinfer::gguf::dequantize(t.type, t.data, values);
            writer.add_tensor(t.name, tinfer::gguf::TensorType::q8_0, dims, encode_q8_0(values));
            ++converted;
        }
        writer.write(out);
        std::cout << "requantize: " << converted << " matrices to " << type << ", written to "
                  << out << "\n";
    } catch (std::exception const& e) {
        std::cerr << "requantize: " << e.what() << "\n";
        return 1;
    }
}
