// libFuzzer target: the server's JSON request parsing and validation
// (examples/serve/openai_protocol.hpp: parse_body, parse_chat_request,
// parse_completion_request), every body read as both endpoints' request. The first input
// byte picks how the rest becomes a body:
//   < 0x80: the rest is the body itself (the JSON parser and everything after it);
//   else:   the rest chooses a request object field by field, from the fields the server
//           reads and values at and around their limits (boundaries a byte-level mutation
//           seldom hits inside otherwise valid JSON), serialized as the body.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "openai_fuzz.hpp"

namespace {

using serve::json;

constexpr char const* field_names[] = {"model",
                                       "messages",
                                       "prompt",
                                       "max_tokens",
                                       "max_completion_tokens",
                                       "n",
                                       "stream",
                                       "stream_options",
                                       "stop",
                                       "seed",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "repetition_penalty",
                                       "logit_bias",
                                       "logprobs",
                                       "top_logprobs",
                                       "ignore_eos",
                                       "user",
                                       "priority",
                                       "echo",
                                       "suffix",
                                       "best_of",
                                       "include_usage"};

json number(FuzzedDataProvider& in) {
    static constexpr double doubles[] = {0.0,       -0.0,   1.0,   -1.0,   0.5,       2.0,
                                         2.0000001, -2.0,   10.0,  10.5,   100,       -100,
                                         101,       1e-320, 1e308, -1e308, 0.9999999, 1.0000001};
    static constexpr std::int64_t integers[] = {0,
                                                1,
                                                -1,
                                                2,
                                                16,
                                                20,
                                                21,
                                                63,
                                                64,
                                                65,
                                                2147483647,
                                                2147483648,
                                                -2147483648,
                                                -2147483649,
                                                std::numeric_limits<std::int64_t>::max(),
                                                std::numeric_limits<std::int64_t>::min()};
    switch (in.ConsumeIntegralInRange(0, 4)) {
        case 0:
            return doubles[in.ConsumeIntegralInRange<std::size_t>(0, std::size(doubles) - 1)];
        case 1:
            return integers[in.ConsumeIntegralInRange<std::size_t>(0, std::size(integers) - 1)];
        case 2:
            return in.ConsumeIntegral<std::int64_t>();
        case 3:
            return in.ConsumeIntegral<std::uint64_t>();
        default:
            return in.ConsumeFloatingPoint<double>();
    }
}

json value(FuzzedDataProvider& in, int depth);

json text_parts(FuzzedDataProvider& in, int depth) {
    json parts = json::array();
    for (std::size_t i = in.ConsumeIntegralInRange(0, 3); i > 0; --i) {
        json part = json::object();
        if (in.ConsumeBool()) part["type"] = in.ConsumeBool() ? "text" : "image_url";
        if (in.ConsumeBool())
            part["text"] =
                in.ConsumeBool() ? json(in.ConsumeRandomLengthString(16)) : value(in, depth + 1);
        parts.push_back(part);
    }
    return parts;
}

json messages(FuzzedDataProvider& in, int depth) {
    static constexpr char const* roles[] = {"system",    "user",     "assistant", "tool",
                                            "developer", "function", ""};
    json list = json::array();
    for (std::size_t i = in.ConsumeIntegralInRange(0, 4); i > 0; --i) {
        json m = json::object();
        switch (in.ConsumeIntegralInRange(0, 3)) {
            case 0:
                break;  // no role
            case 1:
                m["role"] = value(in, depth + 1);
                break;
            default:
                m["role"] = roles[in.ConsumeIntegralInRange<std::size_t>(0, std::size(roles) - 1)];
        }
        switch (in.ConsumeIntegralInRange(0, 4)) {
            case 0:
                break;
            case 1:
                m["content"] = nullptr;
                break;
            case 2:
                m["content"] = text_parts(in, depth);
                break;
            case 3:
                m["content"] = value(in, depth + 1);
                break;
            default:
                m["content"] = in.ConsumeRandomLengthString(64);
        }
        list.push_back(in.ConsumeIntegralInRange(0, 15) == 0 ? value(in, depth + 1) : m);
    }
    return list;
}

// Any JSON value, shallow.
json value(FuzzedDataProvider& in, int depth) {
    int const kinds = depth > 2 ? 4 : 7;
    switch (in.ConsumeIntegralInRange(0, kinds)) {
        case 0:
            return nullptr;
        case 1:
            return in.ConsumeBool();
        case 2:
            return number(in);
        case 3:
            return in.ConsumeRandomLengthString(32);
        case 4:
            return number(in);
        case 5: {
            json list = json::array();
            for (std::size_t i = in.ConsumeIntegralInRange(0, 5); i > 0; --i)
                list.push_back(value(in, depth + 1));
            return list;
        }
        case 6: {
            json list = json::array();  // token ids, or lists of them
            for (std::size_t i = in.ConsumeIntegralInRange(0, 4); i > 0; --i)
                list.push_back(number(in));
            return list;
        }
        default: {
            json object = json::object();
            for (std::size_t i = in.ConsumeIntegralInRange(0, 3); i > 0; --i)
                object[in.ConsumeBool() ? std::to_string(in.ConsumeIntegral<std::int16_t>())
                                        : in.ConsumeRandomLengthString(8)] = value(in, depth + 1);
            if (in.ConsumeBool()) object["include_usage"] = value(in, depth + 1);
            return object;
        }
    }
}

std::string structured_body(FuzzedDataProvider& in) {
    json body = json::object();
    for (std::size_t i = in.ConsumeIntegralInRange(0, 12); i > 0 && in.remaining_bytes(); --i) {
        std::string const name =
            field_names[in.ConsumeIntegralInRange<std::size_t>(0, std::size(field_names) - 1)];
        if (name == "messages" && in.ConsumeIntegralInRange(0, 7) != 0)
            body[name] = messages(in, 0);
        else if (name == "prompt" && in.ConsumeBool())
            body[name] = in.ConsumeRandomLengthString(64);
        else
            body[name] = value(in, 0);
    }
    // The fuzzer's strings may be ill-formed UTF-8: written as U+FFFD, still a valid body.
    return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size == 0) return 0;
    std::string body;
    if (data[0] < 0x80) {
        body.assign(reinterpret_cast<char const*>(data) + 1, size - 1);
    } else {
        FuzzedDataProvider in(data + 1, size - 1);
        body = structured_body(in);
    }
    fuzz::check_body(body, fuzz::Endpoint::chat);
    fuzz::check_body(body, fuzz::Endpoint::completion);
    return 0;
}
