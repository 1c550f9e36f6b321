// gguf::Writer -> gguf::File round trips, versions, alignment, the mmap path, dequantize's
// argument checks.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/gguf_writer.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace gguf = tinfer::gguf;
namespace quant = tinfer::quant;
using namespace tinfer::testing::gguf_support;

namespace {

std::vector<std::byte> float_bytes(std::vector<float> const& values) {
    std::vector<std::byte> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

// A temporary directory removed when the test ends.
struct TempDir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("tinfer_gguf_" + std::to_string(::getpid()));
    TempDir() { std::filesystem::create_directories(path); }
    ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf_writer)

BOOST_AUTO_TEST_CASE(every_value_type_round_trips) {
    gguf::Writer w;
    w.add("u8", std::uint8_t{255});
    w.add("i8", std::int8_t{-128});
    w.add("u16", std::uint16_t{65535});
    w.add("i16", std::int16_t{-32768});
    w.add("u32", std::uint32_t{4294967295u});
    w.add("i32", std::numeric_limits<std::int32_t>::min());
    w.add("f32", -1.25f);
    w.add("bool", true);
    w.add("string", std::string("with\0nul", 8));
    w.add("u64", std::numeric_limits<std::uint64_t>::max());
    w.add("i64", std::numeric_limits<std::int64_t>::min());
    w.add("f64", 1e-310);  // subnormal double
    w.add_array("array_i8", std::vector<std::int8_t>{-1, 2});
    w.add_array("array_f32", std::vector<float>{});
    w.add_strings("array_string", {"x", "", "zz"});
    std::vector<std::byte> const bytes = w.to_bytes();
    auto const f = gguf::File::from_bytes(bytes);

    BOOST_TEST(f.version() == 3u);
    BOOST_TEST(f.metadata().size() == 15u);
    BOOST_TEST(f.get<int>("u8") == 255);
    BOOST_TEST(f.get<int>("i8") == -128);
    BOOST_TEST(f.get<int>("u16") == 65535);
    BOOST_TEST(f.get<int>("i16") == -32768);
    BOOST_TEST(f.get<std::uint32_t>("u32") == 4294967295u);
    BOOST_TEST(f.get<std::int64_t>("i32") == std::numeric_limits<std::int32_t>::min());
    BOOST_TEST(f.get<float>("f32") == -1.25f);
    BOOST_TEST(f.get<double>("f32") == -1.25);
    BOOST_TEST(f.get<bool>("bool"));
    BOOST_TEST(f.get<std::string>("string") == std::string("with\0nul", 8));
    BOOST_TEST(f.get<std::uint64_t>("u64") == std::numeric_limits<std::uint64_t>::max());
    BOOST_TEST(f.get<std::int64_t>("i64") == std::numeric_limits<std::int64_t>::min());
    BOOST_TEST(f.get<double>("f64") == 1e-310);
    BOOST_TEST(f.get_array<int>("array_i8") == (std::vector<int>{-1, 2}));
    BOOST_TEST(f.get_array<float>("array_f32").empty());
    BOOST_TEST(f.find("array_f32")->array()->element_type == gguf::ValueType::f32);
    BOOST_TEST(f.get_strings("array_string") == (std::vector<std::string_view>{"x", "", "zz"}),
               boost::test_tools::per_element());
    // Metadata keeps the file's order.
    BOOST_TEST(f.metadata().front().key == "u8");
    BOOST_TEST(f.metadata().back().key == "array_string");
    BOOST_TEST(f.tensors().empty());
}

BOOST_AUTO_TEST_CASE(version_2_reads_like_version_3) {
    for (std::uint32_t version : {2u, 3u}) {
        gguf::Writer w(version);
        w.add("k", std::uint32_t{7});
        std::vector<float> const values = {1, 2, 3, 4, 5, 6, 7, 8};
        w.add_tensor("t", gguf::TensorType::f32, {4, 2}, float_bytes(values));
        std::vector<std::byte> const bytes = w.to_bytes();
        auto const f = gguf::File::from_bytes(bytes);
        BOOST_TEST(f.version() == version);
        BOOST_TEST(f.get<int>("k") == 7);
        std::vector<float> out(8);
        gguf::dequantize(f.tensor("t").type, f.tensor("t").data, out);
        BOOST_TEST(out == values, boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE(custom_alignment_places_tensor_data) {
    constexpr std::uint32_t alignment = 256;
    gguf::Writer w;
    w.add("general.alignment", alignment);
    std::vector<float> const a = {1, 2, 3};
    std::vector<float> const b = {4, 5, 6, 7, 8};
    w.add_tensor("a", gguf::TensorType::f32, {3}, float_bytes(a));
    w.add_tensor("b", gguf::TensorType::f32, {5}, float_bytes(b));
    std::vector<std::byte> const bytes = w.to_bytes();
    auto const f = gguf::File::from_bytes(bytes);
    BOOST_TEST(f.alignment() == alignment);
    BOOST_TEST(f.data_offset() % alignment == 0u);
    BOOST_TEST(f.tensor("b").offset == alignment);
    BOOST_TEST(f.tensor("b").data.data() == bytes.data() + f.data_offset() + alignment);
    std::vector<float> out(5);
    gguf::dequantize(gguf::TensorType::f32, f.tensor("b").data, out);
    BOOST_TEST(out == b, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(open_maps_a_written_file) {
    TempDir dir;
    std::mt19937_64 rng = tinfer::testing::seeded_rng(7);
    std::vector<float> const source = tinfer::testing::random_floats(rng, 64 * 3);
    std::vector<quant::BlockQ8_0> blocks(source.size() / 32);
    for (std::size_t b = 0; b < blocks.size(); ++b)
        quant::quantize_block(source.data() + 32 * b, blocks[b]);
    std::vector<float> expected(source.size());
    for (std::size_t b = 0; b < blocks.size(); ++b)
        quant::dequantize_block(blocks[b], expected.data() + 32 * b);

    gguf::Writer w;
    w.add("general.name", "mapped");
    w.add_tensor("q", gguf::TensorType::q8_0, {64, 3}, std::as_bytes(std::span(blocks)));
    w.write(dir.path / "m.gguf");

    gguf::File f = gguf::File::open(dir.path / "m.gguf");
    gguf::File moved = std::move(f);  // spans into the mapping survive a move
    auto const& t = moved.tensor("q");
    BOOST_TEST(t.data.size() == blocks.size() * sizeof(quant::BlockQ8_0));
    std::vector<float> out(source.size());
    gguf::dequantize(t.type, t.data, out);
    BOOST_TEST(out == expected, boost::test_tools::per_element());
    BOOST_TEST(moved.get<std::string>("general.name") == "mapped");

    BOOST_CHECK_THROW(gguf::File::open(dir.path / "absent.gguf"), tinfer::Error);
    std::ofstream(dir.path / "empty.gguf").close();
    BOOST_CHECK_THROW(gguf::File::open(dir.path / "empty.gguf"), tinfer::FormatError);
}

BOOST_AUTO_TEST_CASE(dequantize_checks_sizes_and_types) {
    std::vector<std::byte> const block(sizeof(quant::BlockQ4_0));
    std::vector<float> out32(32), out31(31), out64(64);
    BOOST_CHECK_NO_THROW(gguf::dequantize(gguf::TensorType::q4_0, block, out32));
    BOOST_CHECK_THROW(gguf::dequantize(gguf::TensorType::q4_0, block, out31), tinfer::Error);
    BOOST_CHECK_THROW(gguf::dequantize(gguf::TensorType::q4_0, block, out64), tinfer::Error);
    std::vector<std::byte> const k_block(176), short_k_block(175);
    std::vector<float> out256(256);
    BOOST_CHECK_NO_THROW(gguf::dequantize(gguf::TensorType::q5_k, k_block, out256));
    BOOST_CHECK_THROW(gguf::dequantize(gguf::TensorType::q5_k, short_k_block, out256),
                      tinfer::Error);
    BOOST_CHECK_THROW(gguf::dequantize(static_cast<gguf::TensorType>(99), block, out32),
                      tinfer::Error);
    BOOST_TEST((gguf::to_dtype(gguf::TensorType::q2_k).value() == tinfer::DType::q2_k));
    BOOST_TEST((gguf::to_dtype(gguf::TensorType::q3_k).value() == tinfer::DType::q3_k));
    BOOST_TEST((gguf::to_dtype(gguf::TensorType::q5_k).value() == tinfer::DType::q5_k));
    BOOST_TEST((gguf::to_dtype(gguf::TensorType::q4_1).value() == tinfer::DType::q4_1));
    BOOST_TEST((gguf::to_dtype(gguf::TensorType::bf16).value() == tinfer::DType::bf16));
}

BOOST_AUTO_TEST_CASE(dequantize_rows_checks_its_range) {
    gguf::Writer w;
    std::vector<float> const values = {1, 2, 3, 4, 5, 6};
    w.add_tensor("t", gguf::TensorType::f32, {2, 3}, float_bytes(values));
    std::vector<std::byte> const bytes = w.to_bytes();
    auto const f = gguf::File::from_bytes(bytes);
    std::vector<float> two_rows(4);
    gguf::dequantize_rows(f.tensor("t"), 1, two_rows);
    BOOST_TEST(two_rows == (std::vector<float>{3, 4, 5, 6}), boost::test_tools::per_element());
    BOOST_CHECK_THROW(gguf::dequantize_rows(f.tensor("t"), 2, two_rows), tinfer::Error);
    std::vector<float> odd(3);
    BOOST_CHECK_THROW(gguf::dequantize_rows(f.tensor("t"), 0, odd), tinfer::Error);
}

BOOST_AUTO_TEST_SUITE_END()
