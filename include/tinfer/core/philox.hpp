#pragma once
// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC 2011), with the constants of Random123 and cuRAND. A draw is a
// pure function of (key, counter), so the host and a CUDA kernel produce the same bits for the
// same inputs, and no generator state has to travel with a request.
//
// Stream discipline for sampling: key = the request's 64-bit seed, counter = (request id low,
// request id high, step, draw index). A request's numbers therefore depend only on its seed, its
// id and how many tokens it has generated, never on which other requests share the batch.
#include <cstdint>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

struct PhiloxCounter {
    std::uint32_t words[4];
    friend constexpr bool operator==(PhiloxCounter const&, PhiloxCounter const&) = default;
};

struct PhiloxKey {
    std::uint32_t words[2];
    friend constexpr bool operator==(PhiloxKey const&, PhiloxKey const&) = default;
};

namespace philox_constants {
// Round multipliers and Weyl key increments (golden ratio and sqrt(3) - 1, as 32-bit fractions).
inline constexpr std::uint32_t multiplier_0 = 0xD2511F53u;
inline constexpr std::uint32_t multiplier_1 = 0xCD9E8D57u;
inline constexpr std::uint32_t key_increment_0 = 0x9E3779B9u;
inline constexpr std::uint32_t key_increment_1 = 0xBB67AE85u;
inline constexpr int rounds = 10;
inline constexpr int word_bits = 32;
}  // namespace philox_constants

namespace detail {

struct MulHiLo {
    std::uint32_t hi;
    std::uint32_t lo;
};

TINFER_HOST_DEVICE constexpr MulHiLo philox_mulhilo(std::uint32_t a, std::uint32_t b) {
    std::uint64_t const product = static_cast<std::uint64_t>(a) * b;
    return {static_cast<std::uint32_t>(product >> philox_constants::word_bits),
            static_cast<std::uint32_t>(product)};
}

TINFER_HOST_DEVICE constexpr PhiloxCounter philox_round(PhiloxCounter const& counter,
                                                        PhiloxKey const& key) {
    MulHiLo const first = philox_mulhilo(philox_constants::multiplier_0, counter.words[0]);
    MulHiLo const second = philox_mulhilo(philox_constants::multiplier_1, counter.words[2]);
    return {{second.hi ^ counter.words[1] ^ key.words[0], second.lo,
             first.hi ^ counter.words[3] ^ key.words[1], first.lo}};
}

}  // namespace detail

// The 128-bit output block for one (counter, key).
TINFER_HOST_DEVICE constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
    for (int round = 0; round < philox_constants::rounds; ++round) {
        if (round > 0) {
            key.words[0] += philox_constants::key_increment_0;
            key.words[1] += philox_constants::key_increment_1;
        }
        counter = detail::philox_round(counter, key);
    }
    return counter;
}

// Uniform float in [0, 1): the top 24 bits of `bits` times 2^-24. Every value is exact in float,
// the largest is 1 - 2^-24, and host and device compute it identically (no rounding involved).
TINFER_HOST_DEVICE constexpr float uniform_float(std::uint32_t bits) {
    constexpr int mantissa_bits = 24;
    constexpr float scale = 1.0f / static_cast<float>(1u << mantissa_bits);
    return static_cast<float>(bits >> (philox_constants::word_bits - mantissa_bits)) * scale;
}

// Uniform double in [0, 1) with 53 random bits: the top 53 bits of (high:low) times 2^-53. The
// sampler uses this so tokens with probability far below 2^-24 keep their exact share.
TINFER_HOST_DEVICE constexpr double uniform_double(std::uint32_t high, std::uint32_t low) {
    constexpr int mantissa_bits = 53;
    constexpr int total_bits = 2 * philox_constants::word_bits;
    std::uint64_t const bits =
        (static_cast<std::uint64_t>(high) << philox_constants::word_bits) | low;
    constexpr double scale = 1.0 / static_cast<double>(std::uint64_t{1} << mantissa_bits);
    return static_cast<double>(bits >> (total_bits - mantissa_bits)) * scale;
}

// Where in a request's stream a draw sits; see the stream discipline above.
struct RngPosition {
    std::uint64_t seed = 0;
    std::uint64_t request_id = 0;
    std::uint32_t step = 0;        // tokens the request has generated before this draw
    std::uint32_t draw_index = 0;  // which 128-bit block within the step
};

TINFER_HOST_DEVICE constexpr PhiloxKey philox_key(std::uint64_t seed) {
    return {{static_cast<std::uint32_t>(seed),
             static_cast<std::uint32_t>(seed >> philox_constants::word_bits)}};
}

TINFER_HOST_DEVICE constexpr PhiloxCounter philox_counter(RngPosition const& position) {
    return {{static_cast<std::uint32_t>(position.request_id),
             static_cast<std::uint32_t>(position.request_id >> philox_constants::word_bits),
             position.step, position.draw_index}};
}

// The four 32-bit random words at a stream position.
TINFER_HOST_DEVICE constexpr PhiloxCounter philox_draw(RngPosition const& position) {
    return philox4x32_10(philox_counter(position), philox_key(position.seed));
}

}  // namespace tinfer
