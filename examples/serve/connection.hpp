#pragma once
// What cpp-httplib 0.11 (Debian 12's) does not give a handler: its connection's socket, to
// notice a client that hung up while its request waits in the queue or generates a
// non-streamed answer; and a listen backlog larger than the 5 it compiles in.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include <httplib.h>

namespace serve {

// httplib::Server with a listen backlog fit for bursts: with the library's backlog of 5, 64
// clients connecting at once lose SYNs and retry a second later, which shows up as TTFT.
class HttpServer : public httplib::Server {
  public:
    // Call between bind_to_port and listen_after_bind. Linux applies a second listen() on a
    // listening socket as a new backlog.
    bool widen_listen_backlog() { return ::listen(svr_sock_.load(), SOMAXCONN) == 0; }
};

namespace detail {
inline std::optional<std::pair<std::string, int>> numeric_address(sockaddr_storage const& a) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
        auto const& v4 = reinterpret_cast<sockaddr_in const&>(a);
        if (!inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text)) return std::nullopt;
        return std::pair{std::string(text), static_cast<int>(ntohs(v4.sin_port))};
    }
    if (a.ss_family == AF_INET6) {
        auto const& v6 = reinterpret_cast<sockaddr_in6 const&>(a);
        if (!inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text)) return std::nullopt;
        return std::pair{std::string(text), static_cast<int>(ntohs(v6.sin6_port))};
    }
    return std::nullopt;
}
}  // namespace detail

// The socket of the connection `request` arrived on: the one whose two ends are the request's
// local and remote address (a TCP connection is unique by that pair). httplib keeps it open
// until the handler and its content provider are done, so the descriptor stays valid for them.
inline std::optional<int> connection_socket(httplib::Request const& request) {
    DIR* fds = opendir("/proc/self/fd");
    if (!fds) return std::nullopt;
    std::optional<int> found;
    while (dirent const* entry = readdir(fds)) {
        char* end = nullptr;
        long const fd = std::strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0') continue;
        sockaddr_storage peer{}, local{};
        socklen_t peer_length = sizeof peer, local_length = sizeof local;
        if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_length) !=
            0)
            continue;  // not a connected socket
        auto const remote = detail::numeric_address(peer);
        if (!remote || remote->second != request.remote_port ||
            remote->first != request.remote_addr)
            continue;
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_length) !=
            0)
            continue;
        auto const here = detail::numeric_address(local);
        if (!here || here->second != request.local_port || here->first != request.local_addr)
            continue;
        found = static_cast<int>(fd);
        break;
    }
    closedir(fds);
    return found;
}

// Whether the client closed its end or the connection broke. POLLRDHUP tells a hang-up from a
// client that merely sent its next (pipelined) request.
inline bool peer_hung_up(int socket) {
    pollfd watch{.fd = socket, .events = POLLRDHUP, .revents = 0};
    if (poll(&watch, 1, 0) < 0) return false;
    return (watch.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace serve
