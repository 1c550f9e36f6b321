// libFuzzer target: the server's JSON request parsing and validation
// (examples/serve/openai_protocol.hpp: parse_body, parse_chat_request,
// parse_completion_request) on arbitrary bodies, each read as both endpoints' request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "openai_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::string const body(reinterpret_cast<char const*>(data), size);
    fuzz::check_body(body, fuzz::Endpoint::chat);
    fuzz::check_body(body, fuzz::Endpoint::completion);
    return 0;
}
