#pragma once
// Limits on one HTTP request, shared by the front end and the request-parsing fuzz target, so
// the fuzzer parses with the server's own settings.
#include <cstddef>

namespace serve::http_limits {

inline constexpr std::size_t max_header_bytes = std::size_t{16} << 10;  // past it: 431

// Whether a complete header of `header_bytes` (start line, fields, blank line) is over `limit`.
// Beast's header_limit refuses a header only while it is incomplete in the read buffer, so one
// that arrives whole in one read passed at any size (the request fuzzer found a 16,421-byte
// header accepted whole and refused in pieces): the front end checks the complete one too.
inline constexpr bool header_over_limit(std::size_t header_bytes, std::size_t limit) {
    return header_bytes > limit;
}
inline constexpr std::size_t default_max_body_bytes = std::size_t{1} << 20;  // --max-body-bytes
// A request's headers, then its body, must arrive within these totals (not per read), so a
// client that trickles bytes cannot hold a connection open.
inline constexpr int header_deadline_seconds = 10;
inline constexpr int body_deadline_seconds = 30;
// A kept-alive connection may wait this long for its next request's first byte; from that
// byte on, the header deadline runs.
inline constexpr int keep_alive_idle_seconds = 30;
// A response (or one chunk of a stream) must be taken by the client within this, or the
// connection is closed and its request aborted: a client that stops reading holds nothing.
inline constexpr int write_deadline_seconds = 30;
// Connections open at once (--max-connections); past it a new one gets 503 and is closed. An
// idle connection costs a socket and a few KiB, no thread, so the cap is about file
// descriptors, not threads.
inline constexpr int default_max_connections = 10000;

}  // namespace serve::http_limits
