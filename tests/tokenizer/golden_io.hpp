#pragma once
// Readers for the golden files written by tests/reference/make_tokenizer_golden.py (SmolLM2)
// and make_gemma3_tokenizer_golden.py (Gemma 3).
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include "testing.hpp"

namespace tinfer::testing {

inline std::string from_hex(std::string_view hex) {
    BOOST_REQUIRE_MESSAGE(hex.size() % 2 == 0, "odd-length hex string");
    auto const nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        BOOST_FAIL("bad hex digit '" << c << "'");
        return 0;
    };
    std::string out;
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        out += static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1]));
    }
    return out;
}

inline std::string to_hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

inline std::vector<std::string_view> split(std::string_view line, char sep) {
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
        auto const end = line.find(sep, start);
        fields.push_back(line.substr(start, end - start));
        if (end == std::string_view::npos) return fields;
        start = end + 1;
    }
}

inline std::vector<std::string> read_lines(std::string const& name) {
    auto const path = data_dir() / "tokenizer" / name;
    std::ifstream in(path);
    BOOST_REQUIRE_MESSAGE(
        in, "cannot open " << path.string() << ": run tests/reference/make_tokenizer_golden.py");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) lines.push_back(line);
    }
    return lines;
}

struct GoldenEncoding {
    tok::SpecialTokens specials;
    std::string text;
    std::vector<tok::TokenId> ids;
    std::optional<std::string> decoded;  // the reference's decode of `ids`, where the file has it
};

inline std::vector<GoldenEncoding> read_golden_encodings(std::string const& name = "golden.tsv") {
    std::vector<GoldenEncoding> cases;
    for (auto const& line : read_lines(name)) {
        auto const fields = split(line, '\t');
        BOOST_REQUIRE(fields.size() == 3u || fields.size() == 4u);
        GoldenEncoding c;
        BOOST_REQUIRE(fields[0] == "s" || fields[0] == "p");
        c.specials = fields[0] == "s" ? tok::SpecialTokens::parse : tok::SpecialTokens::as_text;
        c.text = from_hex(fields[1]);
        std::istringstream ids{std::string(fields[2])};
        for (tok::TokenId id; ids >> id;) c.ids.push_back(id);
        if (fields.size() == 4u) c.decoded = from_hex(fields[3]);
        cases.push_back(std::move(c));
    }
    return cases;
}

struct GoldenChat {
    bool add_generation_prompt;
    std::vector<tok::ChatMessage> messages;
    std::string rendered;
};

inline std::vector<GoldenChat> read_golden_chats(std::string const& name = "chat.tsv") {
    std::vector<GoldenChat> cases;
    for (auto const& line : read_lines(name)) {
        auto const fields = split(line, '\t');
        BOOST_REQUIRE_EQUAL(fields.size(), 3u);
        GoldenChat c;
        c.add_generation_prompt = fields[0] == "1";
        if (!fields[1].empty()) {
            for (auto const message : split(fields[1], ',')) {
                auto const parts = split(message, ':');
                BOOST_REQUIRE_EQUAL(parts.size(), 2u);
                c.messages.push_back({from_hex(parts[0]), from_hex(parts[1])});
            }
        }
        c.rendered = from_hex(fields[2]);
        cases.push_back(std::move(c));
    }
    return cases;
}

}  // namespace tinfer::testing
