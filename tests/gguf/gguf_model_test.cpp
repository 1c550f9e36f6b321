// The real default model (SmolLM2-135M-Instruct Q4_1) against what llama.cpp's Python package
// read from it (tests/reference/make_gguf_golden.py -> tests/data/gguf/smollm2_*).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace gguf = tinfer::gguf;
using namespace tinfer::testing::gguf_support;

namespace {

gguf::File const& model() {
    static gguf::File const file = gguf::File::open(tinfer::testing::model_path());
    return file;
}

std::vector<std::vector<std::string>> read_tsv(std::string const& name) {
    std::ifstream in(gguf_data_dir() / name);
    BOOST_REQUIRE_MESSAGE(in, "cannot open " << name);
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> fields;
        std::stringstream fields_in(line);
        for (std::string field; std::getline(fields_in, field, '\t');) fields.push_back(field);
        rows.push_back(fields);
    }
    return rows;
}

std::string unhex(std::string_view hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    }
    return out;
}

// The gguf-py type name of a value type, as the metadata TSV spells it.
std::string gguf_py_name(gguf::ValueType t) {
    static std::map<gguf::ValueType, std::string> const names = {
        {gguf::ValueType::u8, "UINT8"},      {gguf::ValueType::i8, "INT8"},
        {gguf::ValueType::u16, "UINT16"},    {gguf::ValueType::i16, "INT16"},
        {gguf::ValueType::u32, "UINT32"},    {gguf::ValueType::i32, "INT32"},
        {gguf::ValueType::f32, "FLOAT32"},   {gguf::ValueType::boolean, "BOOL"},
        {gguf::ValueType::string, "STRING"}, {gguf::ValueType::array, "ARRAY"},
        {gguf::ValueType::u64, "UINT64"},    {gguf::ValueType::i64, "INT64"},
        {gguf::ValueType::f64, "FLOAT64"}};
    return names.at(t);
}

// A value in the TSV's encoding (see describe() in make_gguf_golden.py).
std::string describe(gguf::Value const& v) {
    switch (v.type()) {
        case gguf::ValueType::string: {
            std::string hex;
            char buf[3];
            for (unsigned char c : *v.string()) {
                std::snprintf(buf, sizeof buf, "%02x", c);
                hex += buf;
            }
            return "s:" + hex;
        }
        case gguf::ValueType::f32: {
            char buf[9];
            std::snprintf(buf, sizeof buf, "%08x",
                          std::bit_cast<std::uint32_t>(*v.get_if<float>()));
            return std::string("f:") + buf;
        }
        case gguf::ValueType::f64: {
            char buf[17];
            std::snprintf(
                buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(*v.get_if<double>())));
            return std::string("d:") + buf;
        }
        case gguf::ValueType::boolean:
            return std::string("b:") + (*v.get_if<bool>() ? "1" : "0");
        default: {
            std::string why;
            if (auto const u = tinfer::gguf::detail::convert<std::uint64_t>(v, why))
                return "i:" + std::to_string(*u);
            return "i:" + std::to_string(*tinfer::gguf::detail::convert<std::int64_t>(v, why));
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf_model)

BOOST_AUTO_TEST_CASE(hyperparameters) {
    auto const& f = model();
    BOOST_TEST(f.version() == 3u);
    BOOST_TEST(f.metadata().size() == 33u);
    BOOST_TEST(f.get<std::string>("general.architecture") == "llama");
    BOOST_TEST(f.get<int>("llama.block_count") == 30);
    BOOST_TEST(f.get<int>("llama.embedding_length") == 576);
    BOOST_TEST(f.get<int>("llama.feed_forward_length") == 1536);
    BOOST_TEST(f.get<int>("llama.attention.head_count") == 9);
    BOOST_TEST(f.get<int>("llama.attention.head_count_kv") == 3);
    BOOST_TEST(f.get<int>("llama.context_length") == 8192);
    BOOST_TEST(f.get<int>("llama.vocab_size") == 49152);
    BOOST_TEST(f.get<int>("llama.rope.dimension_count") == 64);
    BOOST_TEST(f.get<float>("llama.rope.freq_base") == 100000.f);
    BOOST_TEST(f.get<float>("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
    BOOST_TEST(f.get<int>("tokenizer.ggml.bos_token_id") == 1);
    BOOST_TEST(f.get<int>("tokenizer.ggml.eos_token_id") == 2);
    BOOST_TEST(f.get<std::string>("tokenizer.ggml.model") == "gpt2");
    BOOST_TEST(f.get<std::string>("tokenizer.ggml.pre") == "smollm");
    auto const tokens = f.get_strings("tokenizer.ggml.tokens");
    BOOST_TEST(tokens.size() == 49152u);
    BOOST_TEST(tokens[0] == "<|endoftext|>");
    BOOST_TEST(tokens[1] == "<|im_start|>");
    BOOST_TEST(tokens[2] == "<|im_end|>");
    BOOST_TEST(f.get_array<int>("tokenizer.ggml.token_type").size() == 49152u);
    BOOST_TEST(f.get_strings("tokenizer.ggml.merges").size() == 48900u);
}

BOOST_AUTO_TEST_CASE(metadata_matches_gguf_py) {
    auto const& f = model();
    auto const rows = read_tsv("smollm2_metadata.tsv");
    BOOST_TEST(rows.size() == f.metadata().size());
    for (auto const& row : rows) {
        BOOST_TEST_CONTEXT(row[0]) {
            gguf::Value const* v = f.find(row[0]);
            BOOST_REQUIRE(v != nullptr);
            if (row[1] == "array") {
                gguf::Array const* a = v->array();
                BOOST_REQUIRE(a != nullptr);
                BOOST_TEST(gguf_py_name(a->element_type) == row[2]);
                BOOST_TEST(a->items.size() == std::stoull(row[3]));
                BOOST_TEST(describe(a->items.front()) == row[4]);
                BOOST_TEST(describe(a->items.back()) == row[5]);
            } else {
                BOOST_TEST(gguf_py_name(v->type()) == row[1]);
                BOOST_TEST(describe(*v) == row[2]);
            }
        }
    }
    // The chat template decodes to the ChatML it describes.
    BOOST_TEST(f.get<std::string>("tokenizer.chat_template").find("<|im_start|>") !=
               std::string::npos);
    BOOST_TEST(unhex("3c7c656e646f66746578747c3e") == "<|endoftext|>");
}

BOOST_AUTO_TEST_CASE(tensor_table_matches_gguf_py) {
    auto const& f = model();
    std::vector<std::vector<std::string>> expected;
    for (auto& row : read_tsv("smollm2_rows.tsv")) {
        if (row[0] == "tensor") expected.push_back(row);
    }
    BOOST_REQUIRE_EQUAL(f.tensors().size(), 272u);
    BOOST_REQUIRE_EQUAL(expected.size(), 272u);
    std::map<gguf::TensorType, int> by_type;
    for (std::size_t i = 0; i < f.tensors().size(); ++i) {
        auto const& t = f.tensors()[i];
        BOOST_TEST_CONTEXT(t.name) {
            BOOST_TEST(t.name == expected[i][1]);
            BOOST_TEST(gguf::name_of(t.type) == expected[i][2]);
            std::string dims;
            for (int d = 0; d < t.n_dims; ++d) dims += (d ? "," : "") + std::to_string(t.dims[d]);
            BOOST_TEST(dims == expected[i][3]);
            BOOST_TEST(gguf::to_dtype(t.type).has_value());
        }
        ++by_type[t.type];
    }
    BOOST_TEST(by_type[gguf::TensorType::q4_1] == 210);
    BOOST_TEST(by_type[gguf::TensorType::f32] == 61);
    BOOST_TEST(by_type[gguf::TensorType::q8_0] == 1);
    auto const& embd = f.tensor("token_embd.weight");
    BOOST_TEST(embd.row_length() == 576u);
    BOOST_TEST(embd.rows() == 49152u);
    BOOST_TEST(f.find_tensor("output.weight") == nullptr);  // tied embeddings
}

BOOST_AUTO_TEST_CASE(tensor_data_is_aligned_disjoint_and_inside_the_file) {
    auto const& f = model();
    std::vector<gguf::TensorInfo const*> sorted;
    for (auto const& t : f.tensors()) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    std::byte const* const begin = f.bytes().data();
    std::byte const* const end = begin + f.bytes().size();
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        auto const& t = *sorted[i];
        BOOST_TEST((t.data.data() - begin) % static_cast<long>(f.alignment()) == 0);
        BOOST_TEST((t.data.data() >= begin && t.data.data() + t.data.size() <= end));
        if (i + 1 < sorted.size())
            BOOST_TEST(t.data.data() + t.data.size() <= sorted[i + 1]->data.data());
    }
}

BOOST_AUTO_TEST_CASE(dequantized_rows_match_gguf_py) {
    auto const& f = model();
    std::vector<float> const values = read_floats(gguf_data_dir() / "smollm2_rows.f32");
    std::vector<float> const offsets = read_floats(gguf_data_dir() / "smollm2_rows.offset.f32");
    std::size_t at = 0;
    for (auto const& row : read_tsv("smollm2_rows.tsv")) {
        if (row[0] != "row") continue;
        auto const& t = f.tensor(row[1]);
        std::uint64_t const r = std::stoull(row[2]);
        std::size_t const n = std::stoull(row[3]);
        BOOST_REQUIRE_EQUAL(n, t.row_length());
        std::vector<float> out(n);
        tinfer::testing::poison(std::span<float>(out));
        gguf::dequantize_rows(t, r, out);
        bool const affine = t.type == gguf::TensorType::q4_1;
        check_decoded(
            out, std::span<float const>(values).subspan(at, n),
            affine ? std::span<float const>(offsets).subspan(at, n) : std::span<float const>{},
            row[1] + " row " + row[2]);
        at += n;
    }
    BOOST_TEST(at == values.size());
}

BOOST_AUTO_TEST_SUITE_END()
