// libFuzzer target: the server's HTTP request parsing, Boost.Beast's
// request_parser<string_body> with the server's limits (examples/serve/http_limits.hpp), fed
// the input in fuzz-chosen pieces as reads from a socket would deliver it, then the body
// through the server's JSON request parsing (openai_fuzz.hpp) for the endpoint the target
// names. Input: a cut count c (first byte, mod 8), c little-endian uint16 piece lengths, then
// the byte stream. Checked:
//   - whether a request is refused, and what an accepted one holds (start line, fields, body,
//     bytes taken), is the same as when the whole stream arrives in one read: parsing must not
//     depend on how TCP splits it;
//   - a parsed body is within body_limit;
//   - the body, through parse_body and parse_*_request, is refused only with a 400 ApiError.
// A beast error code is an expected refusal; a crash, sanitizer report, exception or hang is not.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>

#include <http_limits.hpp>

#include "openai_fuzz.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using Parser = http::request_parser<http::string_body>;

struct Outcome {
    std::string error;     // category:value, empty when none
    bool done = false;     // a whole request was parsed
    std::size_t used = 0;  // bytes of the stream the request took
    std::string message;   // start line, fields and body as parsed
};

void limit(Parser& parser) {
    parser.header_limit(static_cast<std::uint32_t>(serve::http_limits::max_header_bytes));
    parser.body_limit(serve::http_limits::default_max_body_bytes);
}

std::string describe(http::request<http::string_body> const& r) {
    auto const method = r.method_string();
    auto const target = r.target();
    std::string out = std::string(method.data(), method.size()) + ' ' +
                      std::string(target.data(), target.size()) + ' ' +
                      std::to_string(r.version()) + '\n';
    for (auto const& field : r) {
        // beast::string_view is boost's own, not std::string_view.
        auto const name = field.name_string();
        auto const value = field.value();
        out.append(name.data(), name.size()).append(": ").append(value.data(), value.size());
        out += '\n';
    }
    out += r.keep_alive() ? "keep-alive\n" : "close\n";
    out += r.chunked() ? "chunked\n" : "not chunked\n";
    return out + "\n" + r.body();
}

// Parses `stream` delivered as `pieces` (lengths that add up to at most its size; the rest is
// one last piece), the way http::read drives the parser: what the parser did not consume stays
// in the buffer and is offered again with the next read; end of stream after the last piece.
Outcome parse(std::string_view stream, std::vector<std::size_t> pieces, Parser& parser) {
    limit(parser);
    // As the server reads: the header alone first (http::async_read_header, not eager), so
    // what a put consumed up to there is the header; then the body, eagerly.
    parser.eager(false);
    std::size_t const cut = std::min(stream.size(), [&] {
        std::size_t total = 0;
        for (std::size_t p : pieces) total += p;
        return total;
    }());
    pieces.push_back(stream.size() - cut);
    std::string buffer;
    std::size_t delivered = 0;
    beast::error_code ec;
    Outcome out;
    for (std::size_t const length : pieces) {
        std::size_t const n = std::min(length, stream.size() - delivered);
        buffer.append(stream.substr(delivered, n));
        delivered += n;
        while (!buffer.empty() && !parser.is_done()) {
            bool const header_was_done = parser.is_header_done();
            std::size_t const used = parser.put(boost::asio::buffer(buffer), ec);
            buffer.erase(0, used);
            if (!ec && !header_was_done && parser.is_header_done()) {
                // The front end's own check of a complete header (http_server.hpp's on_header).
                if (serve::http_limits::header_over_limit(delivered - buffer.size(),
                                                          serve::http_limits::max_header_bytes))
                    ec = http::error::header_limit;
                parser.eager(true);
            }
            if (ec == http::error::need_more) {
                ec = {};
                break;
            }
            if (ec) break;
            if (used == 0) break;
        }
        if (ec || parser.is_done()) break;
    }
    if (!ec && !parser.is_done() && parser.got_some()) parser.put_eof(ec);
    if (ec) out.error = std::string(ec.category().name()) + ":" + std::to_string(ec.value());
    out.done = !ec && parser.is_done();
    out.used = delivered - buffer.size();
    if (out.done) out.message = describe(parser.get());
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size == 0) return 0;
    std::size_t const cuts = data[0] % 8;
    if (size < 1 + 2 * cuts) return 0;
    std::vector<std::size_t> pieces;
    for (std::size_t i = 0; i < cuts; ++i) {
        std::uint16_t length;
        std::memcpy(&length, data + 1 + 2 * i, 2);
        pieces.push_back(length);
    }
    std::string_view const stream(reinterpret_cast<char const*>(data) + 1 + 2 * cuts,
                                  size - 1 - 2 * cuts);

    Parser in_pieces;
    Outcome const a = parse(stream, pieces, in_pieces);
    Parser whole;
    Outcome const b = parse(stream, {}, whole);
    // Which error a bad request gets may depend on the cuts (beast looks for the end of the
    // header before it parses again after a short read, so a bad field in a header that never
    // ends is found at once in one read, as an unfinished message in several); whether it is
    // refused, and what an accepted one says, may not.
    FUZZ_CHECK(a.done == b.done && (!a.done || (a.used == b.used && a.message == b.message)),
               "parsing depends on how the stream is cut: in pieces '" + a.error + "' done " +
                   std::to_string(a.done) + " used " + std::to_string(a.used) + ", whole '" +
                   b.error + "' done " + std::to_string(b.done) + " used " +
                   std::to_string(b.used) + " for " + fuzz::c_literal(stream, 400));
    if (!a.done) return 0;

    auto const& request = in_pieces.get();
    FUZZ_CHECK(request.body().size() <= serve::http_limits::default_max_body_bytes,
               "a body over body_limit was accepted");
    std::string_view const target(request.target().data(), request.target().size());
    bool const chat = target.starts_with("/v1/chat/completions");
    bool const completion = target.starts_with("/v1/completions");
    if (chat || !completion) fuzz::check_body(request.body(), fuzz::Endpoint::chat);
    if (completion || !chat) fuzz::check_body(request.body(), fuzz::Endpoint::completion);
    return 0;
}
