// Malformed files: every one raises tinfer::FormatError naming the byte offset and what was
// expected, never a crash or an allocation the file cannot back.
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/gguf_writer.hpp>

#include "gguf_test_support.hpp"
#include "testing.hpp"

namespace gguf = tinfer::gguf;
using namespace tinfer::testing::gguf_support;

namespace {

constexpr std::size_t version_at = 4;
constexpr std::size_t tensor_count_at = 8;
constexpr std::size_t kv_count_at = 16;

// A small valid file: scalar, string and array metadata, a plain and a quantized tensor.
gguf::Writer valid_writer() {
    gguf::Writer w;
    w.add("general.architecture", "llama");
    w.add("meta.count", std::uint32_t{30});
    w.add_strings("meta.tokens", {"<s>", "hello", "world"});
    w.add_array("meta.types", std::vector<std::int32_t>{3, 1, 1});
    std::vector<std::byte> plain(32 * 2 * sizeof(float), std::byte{0x3f});
    w.add_tensor("weight_plain", gguf::TensorType::f32, {32, 2}, plain);
    std::vector<std::byte> blocks(2 * 18, std::byte{0x11});
    w.add_tensor("weight_q", gguf::TensorType::q4_0, {64, 1}, blocks);
    return w;
}

// Where the fields of a tensor info lie, found by its name's bytes.
struct TensorInfoLayout {
    std::size_t name_at, n_dims_at, dims_at, type_at, offset_at;
};
TensorInfoLayout layout_of(std::vector<std::byte> const& bytes, std::string const& name,
                           int n_dims) {
    std::size_t const name_bytes = find_bytes(bytes, name);
    TensorInfoLayout l{};
    l.name_at = name_bytes - 8;
    l.n_dims_at = name_bytes + name.size();
    l.dims_at = l.n_dims_at + 4;
    l.type_at = l.dims_at + 8 * static_cast<std::size_t>(n_dims);
    l.offset_at = l.type_at + 4;
    return l;
}

// Parses `bytes` expecting a FormatError at `offset` whose message contains `expectation`.
void check_rejected(std::vector<std::byte> const& bytes, std::uint64_t offset,
                    std::string const& expectation) {
    try {
        (void)gguf::File::from_bytes(bytes);
        BOOST_ERROR("expected FormatError at byte " << offset << " (" << expectation << ")");
    } catch (tinfer::FormatError const& e) {
        BOOST_TEST(e.offset == offset, e.what());
        BOOST_TEST(std::string(e.what()).find(expectation) != std::string::npos,
                   "'" << e.what() << "' should mention '" << expectation << "'");
        BOOST_TEST(
            std::string(e.what()).find("byte " + std::to_string(offset)) != std::string::npos,
            e.what());
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf_bad_input)

BOOST_AUTO_TEST_CASE(the_base_file_is_valid) {
    std::vector<std::byte> const bytes = valid_writer().to_bytes();
    auto const f = gguf::File::from_bytes(bytes);
    BOOST_TEST(f.tensors().size() == 2u);
    BOOST_TEST(f.tensor("weight_q").data.size() == 36u);
    // The writer adds no padding after the last tensor: the file ends with its data.
    BOOST_TEST(f.tensor("weight_q").data.data() + 36 == bytes.data() + bytes.size());
}

BOOST_AUTO_TEST_CASE(truncation_at_every_offset) {
    std::vector<std::byte> const bytes = valid_writer().to_bytes();
    std::size_t rejected = 0;
    for (std::size_t length = 0; length < bytes.size(); ++length) {
        // A fresh allocation of exactly `length` bytes, so any read past it is out of bounds.
        std::vector<std::byte> const prefix(bytes.begin(),
                                            bytes.begin() + static_cast<long>(length));
        try {
            (void)gguf::File::from_bytes(prefix);
            BOOST_ERROR("a file cut to " << length << " of " << bytes.size()
                                         << " bytes was accepted");
        } catch (tinfer::FormatError const& e) {
            ++rejected;
            BOOST_TEST(e.offset <= length, "cut at " << length << ": " << e.what());
        }
    }
    BOOST_TEST(rejected == bytes.size());
}

BOOST_AUTO_TEST_CASE(bad_magic) {
    std::vector<std::byte> bytes = valid_writer().to_bytes();
    bytes[3] = std::byte{'X'};
    check_rejected(bytes, 0, "magic");
}

BOOST_AUTO_TEST_CASE(unknown_versions) {
    for (std::uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
        std::vector<std::byte> bytes = valid_writer().to_bytes();
        poke(bytes, version_at, version);
        check_rejected(bytes, version_at, "unknown version " + std::to_string(version));
    }
}

BOOST_AUTO_TEST_CASE(absurd_counts) {
    for (std::uint64_t count :
         {std::uint64_t{1} << 40, std::numeric_limits<std::uint64_t>::max()}) {
        std::vector<std::byte> bytes = valid_writer().to_bytes();
        poke(bytes, kv_count_at, count);
        check_rejected(bytes, kv_count_at, "metadata count of " + std::to_string(count));
        bytes = valid_writer().to_bytes();
        poke(bytes, tensor_count_at, count);
        check_rejected(bytes, tensor_count_at, "tensor count of " + std::to_string(count));
    }
    // One more tensor than the file holds runs out of bytes in the data section.
    std::vector<std::byte> bytes = valid_writer().to_bytes();
    poke(bytes, tensor_count_at, std::uint64_t{3});
    BOOST_CHECK_THROW(gguf::File::from_bytes(bytes), tinfer::FormatError);
}

BOOST_AUTO_TEST_CASE(absurd_string_and_array_lengths) {
    std::vector<std::byte> const base = valid_writer().to_bytes();
    // Key length of "meta.count".
    std::size_t const key_at = find_bytes(base, "meta.count") - 8;
    std::vector<std::byte> bytes = base;
    poke(bytes, key_at, std::numeric_limits<std::uint64_t>::max());
    check_rejected(bytes, key_at, "a metadata key of 18446744073709551615 bytes");
    // Length of the string "hello" inside the token array.
    std::size_t const item_at = find_bytes(base, "hello") - 8;
    bytes = base;
    poke(bytes, item_at, std::uint64_t{1} << 50);
    check_rejected(bytes, item_at, "a string value of");
    // Element count of the token array: after its key, the value type and the element type.
    std::size_t const count_at = find_bytes(base, "meta.tokens") + 11 + 4 + 4;
    bytes = base;
    poke(bytes, count_at, std::uint64_t{1} << 61);
    check_rejected(bytes, count_at, "array length of");
    // Tensor name length.
    auto const l = layout_of(base, "weight_q", 2);
    bytes = base;
    poke(bytes, l.name_at, std::uint64_t{1} << 33);
    check_rejected(bytes, l.name_at, "a tensor name of");
}

BOOST_AUTO_TEST_CASE(unknown_value_types) {
    std::vector<std::byte> const base = valid_writer().to_bytes();
    std::size_t const type_at = find_bytes(base, "meta.count") + 10;
    std::vector<std::byte> bytes = base;
    poke(bytes, type_at, std::uint32_t{13});
    check_rejected(bytes, type_at, "a metadata value type (0..12), found 13");
    std::size_t const element_type_at = find_bytes(base, "meta.types") + 10 + 4;
    bytes = base;
    poke(bytes, element_type_at, std::uint32_t{0x80000000u});
    check_rejected(bytes, element_type_at, "an array element type (0..12)");
    // Nested arrays are not supported: rejected where the inner type is named.
    bytes = base;
    poke(bytes, element_type_at, static_cast<std::uint32_t>(gguf::ValueType::array));
    check_rejected(bytes, element_type_at, "nested arrays are not supported");
}

BOOST_AUTO_TEST_CASE(bool_values_are_zero_or_one) {
    gguf::Writer w;
    w.add("flag", true);
    std::vector<std::byte> bytes = w.to_bytes();
    std::size_t const value_at = find_bytes(bytes, "flag") + 4 + 4;
    poke(bytes, value_at, std::uint8_t{2});
    check_rejected(bytes, value_at, "bool value (0 or 1), found 2");
}

BOOST_AUTO_TEST_CASE(duplicate_keys) {
    gguf::Writer w = valid_writer();
    w.add("meta.count", std::uint32_t{31});
    std::vector<std::byte> const bytes = w.to_bytes();
    // The second occurrence: search past the first.
    std::size_t const first = find_bytes(bytes, "meta.count");
    std::span<std::byte const> const rest(bytes.data() + first + 1, bytes.size() - first - 1);
    std::size_t const second = first + 1 + find_bytes(rest, "meta.count");
    check_rejected(bytes, second - 8, "duplicate 'meta.count'");
}

BOOST_AUTO_TEST_CASE(duplicate_tensor_names) {
    gguf::Writer w = valid_writer();
    std::vector<std::byte> const blocks(18);
    w.add_tensor("weight_q", gguf::TensorType::q4_0, {32}, blocks);
    std::vector<std::byte> const bytes = w.to_bytes();
    std::size_t const first = find_bytes(bytes, "weight_q");
    std::span<std::byte const> const rest(bytes.data() + first + 1, bytes.size() - first - 1);
    std::size_t const second = first + 1 + find_bytes(rest, "weight_q");
    check_rejected(bytes, second - 8, "duplicate 'weight_q'");
}

BOOST_AUTO_TEST_CASE(unknown_tensor_types) {
    for (std::uint32_t id : {4u, 5u, 9u, 15u, 29u, 31u, 1000u}) {
        std::vector<std::byte> bytes = valid_writer().to_bytes();
        auto const l = layout_of(bytes, "weight_plain", 2);
        poke(bytes, l.type_at, id);
        check_rejected(bytes, l.type_at, "found type id " + std::to_string(id));
    }
}

BOOST_AUTO_TEST_CASE(dimension_counts) {
    for (std::uint32_t n_dims : {0u, 5u, 0xffffffffu}) {
        std::vector<std::byte> bytes = valid_writer().to_bytes();
        auto const l = layout_of(bytes, "weight_plain", 2);
        poke(bytes, l.n_dims_at, n_dims);
        check_rejected(bytes, l.n_dims_at, "expected 1 to 4 dimensions for tensor 'weight_plain'");
    }
}

BOOST_AUTO_TEST_CASE(zero_sized_dimension) {
    std::vector<std::byte> bytes = valid_writer().to_bytes();
    auto const l = layout_of(bytes, "weight_plain", 2);
    poke(bytes, l.dims_at + 8, std::uint64_t{0});
    check_rejected(bytes, l.dims_at + 8, "positive size for dimension 1 of tensor 'weight_plain'");
}

BOOST_AUTO_TEST_CASE(element_count_overflow) {
    gguf::Writer w;
    std::uint64_t const big = std::uint64_t{1} << 32;
    w.add_tensor("huge", gguf::TensorType::f32, {big, big}, {});
    std::vector<std::byte> const bytes = w.to_bytes();
    auto const l = layout_of(bytes, "huge", 2);
    check_rejected(bytes, l.dims_at + 8, "overflows at dimension 1");
    // Elements that fit but whose bytes could not exist still fail at the data check.
    gguf::Writer w2;
    w2.add_tensor("large", gguf::TensorType::f32, {std::uint64_t{1} << 40, 1}, {});
    std::vector<std::byte> const bytes2 = w2.to_bytes();
    check_rejected(bytes2, layout_of(bytes2, "large", 2).offset_at, "to lie within the file");
}

BOOST_AUTO_TEST_CASE(row_length_not_a_multiple_of_the_block) {
    gguf::Writer w;
    std::vector<std::byte> const blocks(3 * 18);
    w.add_tensor("ragged", gguf::TensorType::q4_0, {48, 2}, blocks);  // 96 elements, 3 blocks
    std::vector<std::byte> const bytes = w.to_bytes();
    auto const l = layout_of(bytes, "ragged", 2);
    check_rejected(bytes, l.dims_at, "multiple of 32 (the Q4_0 block size), found 48");
}

BOOST_AUTO_TEST_CASE(misaligned_tensor_offset) {
    std::vector<std::byte> bytes = valid_writer().to_bytes();
    auto const l = layout_of(bytes, "weight_q", 2);
    std::uint64_t offset;
    std::memcpy(&offset, bytes.data() + l.offset_at, sizeof offset);
    poke(bytes, l.offset_at, offset + 2);
    check_rejected(bytes, l.offset_at, "to be a multiple of 32");
}

BOOST_AUTO_TEST_CASE(tensor_data_outside_the_file) {
    for (std::uint64_t offset :
         {std::uint64_t{1} << 20, std::numeric_limits<std::uint64_t>::max() - 31}) {
        std::vector<std::byte> bytes = valid_writer().to_bytes();
        auto const l = layout_of(bytes, "weight_plain", 2);
        poke(bytes, l.offset_at, offset);
        check_rejected(bytes, l.offset_at, "to lie within the file");
    }
    // Growing a dimension pushes the end of the data past the end of the file.
    std::vector<std::byte> bytes = valid_writer().to_bytes();
    auto const l = layout_of(bytes, "weight_q", 2);
    poke(bytes, l.dims_at + 8, std::uint64_t{2});
    check_rejected(bytes, l.offset_at, "72 data bytes of tensor 'weight_q'");
}

BOOST_AUTO_TEST_CASE(bad_alignment_values) {
    {
        gguf::Writer w;
        w.add("general.alignment", std::uint32_t{48});
        std::vector<std::byte> const bytes = w.to_bytes();
        check_rejected(bytes, find_bytes(bytes, "general.alignment") + 17 + 4,
                       "power of two, found 48");
    }
    {
        gguf::Writer w;
        w.add("general.alignment", std::uint64_t{32});
        std::vector<std::byte> const bytes = w.to_bytes();
        check_rejected(bytes, find_bytes(bytes, "general.alignment") + 17 + 4,
                       "general.alignment as u32, found u64");
    }
}

BOOST_AUTO_TEST_SUITE_END()
