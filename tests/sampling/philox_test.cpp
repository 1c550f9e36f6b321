// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), and the stream
// discipline the sampler relies on.
#include <cstdint>
#include <set>
#include <tuple>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/philox.hpp>
#include "testing.hpp"

namespace {

using tinfer::PhiloxCounter;
using tinfer::PhiloxKey;

struct KnownAnswer {
    PhiloxCounter counter;
    PhiloxKey key;
    PhiloxCounter expected;
};

// Random123 1.14 examples/kat_vectors, lines "philox4x32 10 ...": counter, key, output.
constexpr KnownAnswer known_answers[] = {
    {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}},
     {{0x00000000, 0x00000000}},
     {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

// constexpr evaluation gives the same answer (the function is usable at compile time).
static_assert(tinfer::philox4x32_10(known_answers[2].counter, known_answers[2].key) ==
              known_answers[2].expected);

}  // namespace

BOOST_AUTO_TEST_SUITE(philox)

BOOST_AUTO_TEST_CASE(matches_random123_known_answers) {
    for (KnownAnswer const& answer : known_answers) {
        PhiloxCounter const got = tinfer::philox4x32_10(answer.counter, answer.key);
        for (int word = 0; word < 4; ++word)
            BOOST_TEST(got.words[word] == answer.expected.words[word],
                       std::hex << "word " << word << ": got " << got.words[word] << ", expected "
                                << answer.expected.words[word]);
    }
}

BOOST_AUTO_TEST_CASE(uniform_float_covers_zero_to_one_exclusive) {
    BOOST_TEST(tinfer::uniform_float(0u) == 0.0f);
    float const largest = tinfer::uniform_float(0xffffffffu);
    BOOST_TEST(largest < 1.0f);
    BOOST_TEST(largest == 1.0f - 1.0f / 16777216.0f);
    BOOST_TEST(tinfer::uniform_float(0x80000000u) == 0.5f);
    BOOST_TEST(tinfer::uniform_double(0u, 0u) == 0.0);
    BOOST_TEST(tinfer::uniform_double(0xffffffffu, 0xffffffffu) < 1.0);
    BOOST_TEST(tinfer::uniform_double(0x80000000u, 0u) == 0.5);
}

BOOST_AUTO_TEST_CASE(uniform_float_has_mean_one_half) {
    // 10^5 uniforms from consecutive steps: mean 1/2 with standard error 1/sqrt(12 * 10^5).
    constexpr int draws = 100000;
    double sum = 0;
    for (int step = 0; step < draws; ++step) {
        auto const bits = tinfer::philox_draw(
            {.seed = 42, .request_id = 7, .step = static_cast<std::uint32_t>(step)});
        sum += tinfer::uniform_float(bits.words[0]);
    }
    double const standard_error = 1.0 / std::sqrt(12.0 * draws);
    BOOST_TEST(std::abs(sum / draws - 0.5) < 5 * standard_error);
}

BOOST_AUTO_TEST_CASE(stream_depends_on_every_coordinate) {
    tinfer::RngPosition const base{.seed = 1234, .request_id = 99, .step = 5, .draw_index = 0};
    auto const word = [](tinfer::RngPosition p) { return tinfer::philox_draw(p).words[0]; };
    BOOST_TEST(word(base) == word(base));
    std::set<std::uint32_t> seen{word(base)};
    for (tinfer::RngPosition changed :
         {tinfer::RngPosition{.seed = 1235, .request_id = 99, .step = 5},
          tinfer::RngPosition{.seed = 1234 + (std::uint64_t{1} << 32), .request_id = 99, .step = 5},
          tinfer::RngPosition{.seed = 1234, .request_id = 100, .step = 5},
          tinfer::RngPosition{.seed = 1234, .request_id = 99 + (std::uint64_t{1} << 32), .step = 5},
          tinfer::RngPosition{.seed = 1234, .request_id = 99, .step = 6},
          tinfer::RngPosition{.seed = 1234, .request_id = 99, .step = 5, .draw_index = 1}})
        BOOST_TEST(seen.insert(word(changed)).second);
    // The counter layout is part of the contract: (request low, request high, step, draw).
    PhiloxCounter const counter = tinfer::philox_counter(
        {.seed = 0, .request_id = 0x0123456789abcdefull, .step = 17, .draw_index = 3});
    BOOST_TEST(counter.words[0] == 0x89abcdefu);
    BOOST_TEST(counter.words[1] == 0x01234567u);
    BOOST_TEST(counter.words[2] == 17u);
    BOOST_TEST(counter.words[3] == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
