#pragma once
// Limits on one HTTP request, shared by the front end and the request-parsing fuzz target, so
// the fuzzer parses with the server's own settings.
#include <cstddef>

namespace serve::http_limits {

inline constexpr std::size_t max_header_bytes = std::size_t{16} << 10;
inline constexpr std::size_t default_max_body_bytes = std::size_t{1} << 20;  // --max-body-bytes
// A request's headers, then its body, must arrive within these totals (not per read), so a
// client that trickles bytes cannot hold a connection open.
inline constexpr int header_deadline_seconds = 10;
inline constexpr int body_deadline_seconds = 30;

}  // namespace serve::http_limits
