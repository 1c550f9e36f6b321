// The reader against a file written and decoded by llama.cpp's Python package (gguf-py):
// tests/reference/make_gguf_golden.py made tests/data/gguf/golden_*.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace gguf = tinfer::gguf;
using namespace tinfer::testing::gguf_support;

namespace {

gguf::File const& golden() {
    static gguf::File const file = gguf::File::open(gguf_data_dir() / "golden_v3.gguf");
    return file;
}

template <class T>
void check_throws_naming(auto&& call, std::string const& key) {
    try {
        call();
        BOOST_ERROR("expected tinfer::Error naming '" << key << "'");
    } catch (tinfer::Error const& e) {
        BOOST_TEST(std::string(e.what()).find(key) != std::string::npos, e.what());
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf_golden)

BOOST_AUTO_TEST_CASE(header) {
    BOOST_TEST(golden().version() == 3u);
    BOOST_TEST(golden().alignment() == 32u);
    BOOST_TEST(golden().get<std::string>("general.architecture") == "tinfertest");
}

BOOST_AUTO_TEST_CASE(every_scalar_type) {
    auto const& f = golden();
    BOOST_TEST(f.find("test.u8")->type() == gguf::ValueType::u8);
    BOOST_TEST(f.get<int>("test.u8") == 200);
    BOOST_TEST(f.find("test.i8")->type() == gguf::ValueType::i8);
    BOOST_TEST(f.get<int>("test.i8") == -100);
    BOOST_TEST(f.find("test.u16")->type() == gguf::ValueType::u16);
    BOOST_TEST(f.get<int>("test.u16") == 60000);
    BOOST_TEST(f.find("test.i16")->type() == gguf::ValueType::i16);
    BOOST_TEST(f.get<int>("test.i16") == -30000);
    BOOST_TEST(f.find("test.u32")->type() == gguf::ValueType::u32);
    BOOST_TEST(f.get<std::uint32_t>("test.u32") == 4000000000u);
    BOOST_TEST(f.find("test.i32")->type() == gguf::ValueType::i32);
    BOOST_TEST(f.get<std::int32_t>("test.i32") == -2000000000);
    BOOST_TEST(f.find("test.f32")->type() == gguf::ValueType::f32);
    BOOST_TEST(f.get<float>("test.f32") == 0.1f);
    BOOST_TEST(f.find("test.u64")->type() == gguf::ValueType::u64);
    BOOST_TEST(f.get<std::uint64_t>("test.u64") == (std::uint64_t{1} << 63) + 5);
    BOOST_TEST(f.find("test.i64")->type() == gguf::ValueType::i64);
    BOOST_TEST(f.get<std::int64_t>("test.i64") == -(std::int64_t{1} << 62) - 3);
    BOOST_TEST(f.find("test.f64")->type() == gguf::ValueType::f64);
    BOOST_TEST(f.get<double>("test.f64") == 2.718281828459045);
    BOOST_TEST(f.find("test.bool_true")->type() == gguf::ValueType::boolean);
    BOOST_TEST(f.get<bool>("test.bool_true") == true);
    BOOST_TEST(f.get<bool>("test.bool_false") == false);
    BOOST_TEST(f.get<std::string>("test.string") == "h\xc3\xa9llo w\xc3\xb6rld");
}

BOOST_AUTO_TEST_CASE(arrays) {
    auto const& f = golden();
    BOOST_TEST(f.get_array<int>("test.array_u8") == (std::vector<int>{1, 2, 255}));
    BOOST_TEST(f.find("test.array_u8")->array()->element_type == gguf::ValueType::u8);
    BOOST_TEST(f.get_array<int>("test.array_i16") == (std::vector<int>{-32768, 0, 32767}));
    BOOST_TEST(f.get_array<std::int32_t>("test.array_i32") ==
               (std::vector<std::int32_t>{-7, 0, 7, 2147483647}));
    BOOST_TEST(f.get_array<std::uint64_t>("test.array_u64") ==
               (std::vector<std::uint64_t>{0, std::numeric_limits<std::uint64_t>::max()}));
    BOOST_TEST(f.get_array<float>("test.array_f32") == (std::vector<float>{1.5f, -0.25f, 3.0e38f}));
    BOOST_TEST(f.get_array<double>("test.array_f64") == (std::vector<double>{1e-300, -2.5}));
    BOOST_TEST(f.get_array<bool>("test.array_bool") == (std::vector<bool>{true, false, true}));
    std::vector<std::string_view> const strings = f.get_strings("test.array_string");
    BOOST_TEST(
        strings == (std::vector<std::string_view>{"a", "bc", "", "\xc3\xbcn\xc3\xaf \xe2\x9c\x93"}),
        boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(access_errors_name_the_key) {
    auto const& f = golden();
    BOOST_TEST(!f.get_optional<int>("test.absent").has_value());
    BOOST_TEST(f.get_optional<int>("test.u8").value() == 200);
    BOOST_TEST(f.find("test.absent") == nullptr);
    check_throws_naming<int>([&] { (void)f.get<int>("test.absent"); }, "test.absent");
    check_throws_naming<int>([&] { (void)f.get<std::uint8_t>("test.u16"); }, "test.u16");  // range
    check_throws_naming<int>([&] { (void)f.get<std::uint32_t>("test.i8"); }, "test.i8");   // sign
    check_throws_naming<int>([&] { (void)f.get<std::string>("test.u8"); }, "test.u8");
    check_throws_naming<int>([&] { (void)f.get<int>("test.string"); }, "test.string");
    check_throws_naming<int>([&] { (void)f.get<bool>("test.u8"); }, "test.u8");
    check_throws_naming<int>([&] { (void)f.get<float>("test.u32"); }, "test.u32");
    check_throws_naming<int>([&] { (void)f.get_array<std::int64_t>("test.array_u64"); },
                             "test.array_u64");
    check_throws_naming<int>([&] { (void)f.get_strings("test.array_i32"); }, "test.array_i32");
    check_throws_naming<int>([&] { (void)f.get_array<int>("test.u8"); }, "test.u8");
    check_throws_naming<int>([&] { (void)f.tensor("no_such_tensor"); }, "no_such_tensor");
    BOOST_TEST(f.find_tensor("no_such_tensor") == nullptr);
}

BOOST_AUTO_TEST_CASE(tensor_infos) {
    struct Expected {
        char const* name;
        gguf::TensorType type;
        int n_dims;
        std::array<std::uint64_t, 4> dims;
    };
    using T = gguf::TensorType;
    Expected const expected[] = {
        {"t_f32", T::f32, 2, {64, 3, 1, 1}},    {"t_f16", T::f16, 2, {32, 4, 1, 1}},
        {"t_bf16", T::bf16, 2, {32, 2, 1, 1}},  {"t_f32_3d", T::f32, 3, {32, 2, 3, 1}},
        {"t_q4_0", T::q4_0, 2, {128, 3, 1, 1}}, {"t_q4_1", T::q4_1, 2, {128, 3, 1, 1}},
        {"t_q5_0", T::q5_0, 2, {128, 3, 1, 1}}, {"t_q5_1", T::q5_1, 2, {128, 3, 1, 1}},
        {"t_q8_0", T::q8_0, 2, {128, 3, 1, 1}}, {"t_q4_k", T::q4_k, 2, {512, 2, 1, 1}},
        {"t_q6_k", T::q6_k, 2, {512, 2, 1, 1}}, {"t_q2_k", T::q2_k, 2, {512, 4, 1, 1}},
        {"t_q3_k", T::q3_k, 2, {512, 4, 1, 1}}, {"t_q5_k", T::q5_k, 2, {512, 4, 1, 1}},
    };
    auto const& tensors = golden().tensors();
    BOOST_REQUIRE_EQUAL(tensors.size(), std::size(expected));
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        BOOST_TEST_CONTEXT(expected[i].name) {
            BOOST_TEST(tensors[i].name == expected[i].name);
            BOOST_TEST(tensors[i].type == expected[i].type);
            BOOST_TEST(tensors[i].n_dims == expected[i].n_dims);
            BOOST_TEST(tensors[i].dims == expected[i].dims, boost::test_tools::per_element());
            BOOST_TEST(tensors[i].row_length() == expected[i].dims[0]);
            BOOST_TEST(tensors[i].rows() == tensors[i].elements() / expected[i].dims[0]);
            BOOST_TEST(tensors[i].offset % golden().alignment() == 0u);
            BOOST_TEST(&golden().tensor(expected[i].name) == &tensors[i]);
        }
    }
}

BOOST_AUTO_TEST_CASE(dequantized_values_match_gguf_py) {
    for (auto const& tensor : golden().tensors()) {
        std::vector<float> const ref =
            read_floats(gguf_data_dir() / ("golden_" + tensor.name + ".f32"));
        std::vector<float> offsets;
        auto const offset_path = gguf_data_dir() / ("golden_" + tensor.name + ".offset.f32");
        if (std::filesystem::exists(offset_path)) offsets = read_floats(offset_path);
        std::vector<float> out(tensor.elements());
        tinfer::testing::poison(std::span<float>(out));
        gguf::dequantize(tensor.type, tensor.data, out);
        check_decoded(out, ref, offsets, tensor.name);
        // Rows decoded one at a time must be the same values.
        std::vector<float> row(tensor.row_length());
        for (std::uint64_t r = 0; r < tensor.rows(); ++r) {
            gguf::dequantize_rows(tensor, r, row);
            BOOST_TEST(std::equal(row.begin(), row.end(), out.begin() + r * tensor.row_length()),
                       tensor.name << " row " << r);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
