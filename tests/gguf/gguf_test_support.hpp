#pragma once
// Helpers shared by the GGUF tests: golden files, byte searching, the FMA-aware comparison of
// affine block formats.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "testing.hpp"

namespace tinfer::testing::gguf_support {

inline std::filesystem::path gguf_data_dir() {
    return data_dir() / "gguf";
}

inline std::vector<std::byte> read_bytes(std::filesystem::path const& path) {
    std::ifstream in(path, std::ios::binary);
    BOOST_REQUIRE_MESSAGE(in, "cannot open " << path);
    in.seekg(0, std::ios::end);
    std::vector<std::byte> bytes(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return bytes;
}

inline std::vector<float> read_floats(std::filesystem::path const& path) {
    std::vector<std::byte> const bytes = read_bytes(path);
    BOOST_REQUIRE_EQUAL(bytes.size() % sizeof(float), 0u);
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
}

inline std::span<std::byte const> as_bytes(std::string_view text) {
    return {reinterpret_cast<std::byte const*>(text.data()), text.size()};
}

// Position of the first occurrence of `needle` in `haystack`; fails the test when absent.
inline std::size_t find_bytes(std::span<std::byte const> haystack, std::string_view needle) {
    auto const n = as_bytes(needle);
    for (std::size_t i = 0; i + n.size() <= haystack.size(); ++i) {
        if (std::memcmp(haystack.data() + i, n.data(), n.size()) == 0) return i;
    }
    BOOST_FAIL("byte pattern '" << needle << "' not found");
    return 0;
}

template <class T>
void poke(std::vector<std::byte>& bytes, std::size_t at, T value) {
    BOOST_REQUIRE_LE(at + sizeof(T), bytes.size());
    std::memcpy(bytes.data() + at, &value, sizeof(T));
}

// Decoded values must equal the reference bit for bit where decoding is a chain of products
// in ggml's order (plain types, Q4_0, Q5_0, Q8_0, Q3_K, Q6_K). Affine types (Q4_1, Q5_1, Q2_K,
// Q4_K, Q5_K) decode as d*q + offset; a compiler may fuse
// that into one FMA (ggml's C may or may not), which moves the result by at most one rounding
// of d*q plus one of the sum: |d*q| = |ref - offset|, so the bound is eps * (|ref - offset| +
// |ref|). `offsets` empty means exact comparison.
inline void check_decoded(std::span<float const> out, std::span<float const> ref,
                          std::span<float const> offsets, std::string const& what) {
    BOOST_REQUIRE_EQUAL(out.size(), ref.size());
    constexpr double eps = std::numeric_limits<float>::epsilon();
    std::size_t mismatches = 0, inexact = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(ref[i])) continue;
        ++inexact;
        bool ok = false;
        if (!offsets.empty()) {
            double const r = ref[i];
            double const bound = eps * (std::abs(r - offsets[i]) + std::abs(r));
            ok = std::abs(static_cast<double>(out[i]) - r) <= bound;
        }
        if (!ok && mismatches++ < 5) {
            BOOST_ERROR(what << "[" << i << "] = " << out[i] << ", expected " << ref[i]);
        }
    }
    BOOST_TEST_MESSAGE(what << ": " << out.size() << " values, " << inexact
                            << " not bitwise equal (within the FMA bound)");
    BOOST_CHECK_EQUAL(mismatches, 0u);
}

}  // namespace tinfer::testing::gguf_support
