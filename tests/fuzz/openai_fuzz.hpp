#pragma once
// The checks on one request body that the JSON and the HTTP fuzz targets share: the server's
// own parse (examples/serve/openai_protocol.hpp) may refuse a body only with an ApiError whose
// status is 400 and whose error object serializes; a body it accepts must be read into values
// inside the ranges it validates. nlohmann's own exceptions or anything else escaping is a
// crash (the server would answer 500 or die), as is a sanitizer report.
#include <algorithm>
#include <cstdint>
#include <string>

#include <openai_protocol.hpp>

#include "fuzz_support.hpp"

namespace fuzz {

enum class Endpoint : std::uint8_t { chat, completion };

inline void check_refusal(serve::ApiError const& e, std::string const& body) {
    FUZZ_CHECK(e.status == 400,
               "ApiError status " + std::to_string(e.status) + " for body " + c_literal(body));
    FUZZ_CHECK(std::string_view(e.what()).size() > 0, "ApiError without a message");
    // The server dumps the error object; a message holding ill-formed UTF-8 would throw there.
    (void)serve::error_object(e).dump();
}

inline void check_accepted(serve::OpenAiRequest const& r, Endpoint endpoint,
                           std::string const& body) {
    auto const expect = [&](bool ok, char const* what) {
        FUZZ_CHECK(ok, std::string("accepted request breaks '") + what + "': " + c_literal(body));
    };
    expect(r.chat == (endpoint == Endpoint::chat), "chat flag");
    expect(r.n >= 1 && r.n <= serve::max_choices, "1 <= n <= max_choices");
    expect(r.stream || !r.include_usage, "include_usage only with stream");
    expect(r.stop.size() <= serve::max_stop_strings, "at most max_stop_strings stops");
    expect(std::none_of(r.stop.begin(), r.stop.end(), [](auto const& s) { return s.empty(); }),
           "no empty stop string");
    expect(!r.max_tokens || *r.max_tokens >= 1, "max_tokens >= 1");
    auto const& s = r.sampling;
    expect(s.temperature >= 0 && s.temperature <= 2, "temperature in [0, 2]");
    expect(s.top_p > 0 && s.top_p <= 1, "top_p in (0, 1]");
    expect(s.top_k >= 0, "top_k >= 0");
    expect(s.min_p >= 0 && s.min_p <= 1, "min_p in [0, 1]");
    expect(s.presence_penalty >= -2 && s.presence_penalty <= 2, "presence_penalty in [-2, 2]");
    expect(s.frequency_penalty >= -2 && s.frequency_penalty <= 2, "frequency_penalty in [-2, 2]");
    expect(s.repetition_penalty > 0 && s.repetition_penalty <= 10, "repetition_penalty in (0, 10]");
    for (auto const& [token, bias] : s.logit_bias) {
        expect(token >= 0, "logit_bias token >= 0");
        expect(bias >= -100 && bias <= 100, "logit_bias in [-100, 100]");
    }
    expect(s.top_logprobs >= 0 && s.top_logprobs <= tinfer::kernels::max_top_logprobs,
           "top_logprobs in [0, max_top_logprobs]");
    if (endpoint == Endpoint::chat) {
        expect(!r.messages.empty(), "messages not empty");
        for (auto const& m : r.messages)
            expect(
                m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
                "role is system, user, assistant or tool");
        expect(s.logprobs || s.top_logprobs == 0, "top_logprobs only with logprobs");
    } else {
        expect(!r.prompts.empty() && r.prompts.size() <= serve::max_choices,
               "1 to max_choices prompts");
        for (auto const& p : r.prompts)
            for (std::int32_t const t : p.tokens) expect(t >= 0, "prompt token ids >= 0");
    }
}

// One body through parse_body and the endpoint's request parser, as the server does.
inline void check_body(std::string const& body, Endpoint endpoint) {
    serve::json parsed;
    try {
        parsed = serve::parse_body(body);
    } catch (serve::ApiError const& e) {
        check_refusal(e, body);
        return;
    }
    FUZZ_CHECK(parsed.is_object(), "parse_body returned a non-object for " + c_literal(body));
    try {
        serve::OpenAiRequest const r = endpoint == Endpoint::chat
                                           ? serve::parse_chat_request(parsed)
                                           : serve::parse_completion_request(parsed);
        check_accepted(r, endpoint, body);
    } catch (serve::ApiError const& e) {
        check_refusal(e, body);
    }
}

}  // namespace fuzz
