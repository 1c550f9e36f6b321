#pragma once
// The server's HTTP/1.1 front end: event-driven (Boost.Beast over Boost.Asio), so a connection
// that is idle or trickles its request costs a socket and a few KiB, never a thread.
//
// cpp-httplib 0.11, which this replaces, held a pool thread per connection and timed out each
// read, not the whole request: 400 clients sending a header line every 3 s took every thread
// and /health stopped answering. Here every connection's headers, then its body, must arrive
// within a total deadline (http_limits.hpp); headers and bodies have size limits (431, 413);
// connections past a cap get 503 and are closed; a kept-alive connection waits for its next
// request without a thread.
//
// The HTTP layer knows nothing of the API. A request, once read, is handed to the handler as an
// Exchange on the connection's strand; the handler answers at once (reply), or later from any
// thread through Exchange::post (a generation), or streams chunks. While a request is being
// answered the connection keeps a read open on its socket, so a client that hangs up is noticed
// at once (on_gone), whether its answer is streaming, queued or being generated.
#include <sys/resource.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "http_limits.hpp"

namespace serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

using HttpRequest = http::request<http::string_body>;

struct HttpSettings {
    std::size_t max_header_bytes = http_limits::max_header_bytes;
    std::size_t max_body_bytes = http_limits::default_max_body_bytes;
    std::chrono::seconds header_deadline{http_limits::header_deadline_seconds};
    std::chrono::seconds body_deadline{http_limits::body_deadline_seconds};
    std::chrono::seconds keep_alive_idle{http_limits::keep_alive_idle_seconds};
    std::chrono::seconds write_deadline{http_limits::write_deadline_seconds};
    int max_connections = http_limits::default_max_connections;
};

// A whole answer.
struct Reply {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    bool close = false;  // end the connection after it
};

class HttpServer;
class Connection;

// One request and its answer. post() may be called from any thread; everything else on the
// connection's strand (in the handler, or in a function given to post()). Calls after the
// answer is complete, or after the client went away, do nothing.
class Exchange {
  public:
    Exchange(std::shared_ptr<Connection> connection, std::uint64_t serial, HttpRequest request)
        : connection_(std::move(connection)), serial_(serial), request_(std::move(request)) {}

    HttpRequest const& request() const { return request_; }
    void reply(Reply reply);
    // A 200 answer of unknown length: chunked (HTTP/1.1) or ended by closing (HTTP/1.0).
    void begin_stream(std::string const& content_type,
                      std::vector<std::pair<std::string, std::string>> const& headers = {});
    void write(std::string const& data);
    void end_stream();
    // Closes the connection without completing the answer (the server is stopping).
    void abandon();
    // Called once, on the strand, if the client hangs up or stops taking the answer before it
    // is complete. Not called after the answer completed.
    void on_gone(std::function<void()> callback);
    bool active() const;
    net::any_io_executor executor() const;
    template <class Function>
    void post(Function&& function) const {
        net::post(executor(), std::forward<Function>(function));
    }

  private:
    std::shared_ptr<Connection> connection_;
    std::uint64_t serial_;
    HttpRequest request_;
};

class HttpServer {
  public:
    using Handler = std::function<void(std::shared_ptr<Exchange>)>;
    // The answer to a request the HTTP layer refuses itself (400, 404, 413, 431, 503); the
    // request is null when none could be read.
    using ErrorReply = std::function<Reply(int status, HttpRequest const* request)>;
    // Called for every answer sent, with its status (Prometheus' response counter).
    using Logger = std::function<void(int status)>;

    HttpServer(net::io_context& io, HttpSettings settings, Handler handler, ErrorReply error_reply,
               Logger logger)
        : io_(io),
          settings_(settings),
          handler_(std::move(handler)),
          error_reply_(std::move(error_reply)),
          logger_(std::move(logger)),
          acceptor_(net::make_strand(io)),
          retry_timer_(acceptor_.get_executor()) {}

    // Binds and listens; returns the port (useful with port 0).
    int listen(std::string const& host, int port) {
        tcp::endpoint const endpoint(net::ip::make_address(host),
                                     static_cast<unsigned short>(port));
        acceptor_.open(endpoint.protocol());
        acceptor_.set_option(net::socket_base::reuse_address(true));
        acceptor_.bind(endpoint);
        // Bursts of connections (64 clients at once) must not lose SYNs to a short backlog.
        acceptor_.listen(net::socket_base::max_listen_connections);
        return acceptor_.local_endpoint().port();
    }

    void start() {
        net::post(acceptor_.get_executor(), [this] { accept(); });
    }

    // Stops accepting; open connections are left to the io_context's owner.
    void stop() {
        net::post(acceptor_.get_executor(), [this] {
            stopping_ = true;
            beast::error_code ignored;
            acceptor_.close(ignored);
            retry_timer_.cancel();
        });
    }

    HttpSettings const& settings() const { return settings_; }
    int connections() const { return connections_.load(); }

  private:
    friend class Connection;

    void accept();

    net::io_context& io_;
    HttpSettings settings_;
    Handler handler_;
    ErrorReply error_reply_;
    Logger logger_;
    tcp::acceptor acceptor_;
    net::steady_timer retry_timer_;
    std::atomic<int> connections_{0};
    bool stopping_ = false;  // on the acceptor's strand
};

// One TCP connection: reads requests one after another, hands each to the handler, writes its
// answer. Everything runs on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
  public:
    Connection(tcp::socket socket, HttpServer& server, bool counted)
        : stream_(std::move(socket)), server_(server), counted_(counted) {
        if (counted_) ++server_.connections_;
    }
    Connection(Connection const&) = delete;
    Connection& operator=(Connection const&) = delete;
    ~Connection() {
        if (counted_) --server_.connections_;
    }

    void start() { read_next(); }

    // Past the connection cap: a 503 and the connection closed.
    void refuse() {
        ++serial_;
        in_exchange_ = true;
        keep_alive_ = false;
        send_reply(serial_, server_.error_reply_(503, nullptr));
    }

  private:
    friend class Exchange;

    HttpSettings const& settings() const { return server_.settings_; }

    void read_next() {
        if (closed_) return;
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(settings().max_header_bytes));
        parser_->body_limit(settings().max_body_bytes);
        if (buffer_.size() > 0 || served_ == 0) {
            read_header();
            return;
        }
        // Kept alive: wait for the next request's first byte without a deadline on headers.
        stream_.expires_after(settings().keep_alive_idle);
        stream_.async_read_some(buffer_.prepare(1024),
                                [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                                    self->buffer_.commit(n);
                                    if (ec)
                                        self->close();
                                    else
                                        self->read_header();
                                });
    }

    void read_header() {
        // A total for the whole header, not per read: trickled bytes do not extend it.
        stream_.expires_after(settings().header_deadline);
        http::async_read_header(
            stream_, buffer_, *parser_,
            [self = shared_from_this()](beast::error_code ec, std::size_t header_bytes) {
                self->on_header(ec, header_bytes);
            });
    }

    // `header_bytes`: what the parser consumed, the whole header (it stops there).
    void on_header(beast::error_code ec, std::size_t header_bytes) {
        if (!ec && http_limits::header_over_limit(header_bytes, settings().max_header_bytes))
            ec = http::error::header_limit;
        if (ec) return read_failed(ec);
        if (parser_->is_done()) return dispatch();
        auto const& header = parser_->get();
        if (beast::iequals(header[http::field::expect], "100-continue")) {
            // curl waits for this before sending a large body.
            interim_ = "HTTP/1.1 100 Continue\r\n\r\n";
            stream_.expires_after(settings().write_deadline);
            net::async_write(stream_, net::buffer(interim_),
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 if (ec) return self->close();
                                 self->read_body();
                             });
            return;
        }
        read_body();
    }

    void read_body() {
        stream_.expires_after(settings().body_deadline);
        http::async_read(stream_, buffer_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, std::size_t) {
                             if (ec) return self->read_failed(ec);
                             self->dispatch();
                         });
    }

    void read_failed(beast::error_code ec) {
        // A deadline that passed has closed the socket already; a client that left needs no
        // answer. What remains is a request the server refuses: answer and close, since the
        // rest of the stream cannot be trusted (an unread body, a half-sent header).
        if (ec == beast::error::timeout || ec == http::error::end_of_stream ||
            ec == net::error::eof || ec == net::error::operation_aborted ||
            ec == net::error::connection_reset || closed_ || !parser_)
            return close();
        int const status = ec == http::error::header_limit ? 431
                           : ec == http::error::body_limit ? 413
                                                           : 400;
        ++serial_;
        in_exchange_ = true;
        keep_alive_ = false;
        // The header is complete when only the body failed: the error names the route.
        HttpRequest const* request = parser_->is_header_done() ? &parser_->get() : nullptr;
        send_reply(serial_, server_.error_reply_(status, request));
    }

    void dispatch() {
        HttpRequest request = parser_->release();
        parser_.reset();
        stream_.expires_never();
        ++served_;
        ++serial_;
        in_exchange_ = true;
        keep_alive_ = request.keep_alive();
        http11_ = request.version() >= 11;
        watch();
        server_.handler_(
            std::make_shared<Exchange>(shared_from_this(), serial_, std::move(request)));
    }

    // A read kept open while a request is answered: its end (EOF, reset) is the client going
    // away. On the socket itself, so the stream's deadline (meant for writes now) does not
    // apply to it. A pipelined next request is kept in the buffer.
    void watch() {
        if (watching_ || closed_) return;
        if (buffer_.size() >= settings().max_header_bytes + settings().max_body_bytes) return;
        watching_ = true;
        stream_.socket().async_read_some(
            buffer_.prepare(4096),
            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                self->watching_ = false;
                self->buffer_.commit(n);
                switch (std::exchange(self->after_watch_, AfterWatch::keep_watching)) {
                    case AfterWatch::read_next:
                        if (ec && ec != net::error::operation_aborted) return self->close();
                        return self->read_next();
                    case AfterWatch::linger:
                        return self->linger_close();
                    case AfterWatch::keep_watching:
                        if (ec) return self->client_gone();
                        if (self->in_exchange_) self->watch();
                }
            });
    }

    void client_gone() {
        bool const was_answering = in_exchange_;
        in_exchange_ = false;
        auto callback = std::exchange(on_gone_, nullptr);
        close();
        if (was_answering && callback) callback();
    }

    bool current(std::uint64_t serial) const {
        return serial == serial_ && in_exchange_ && !closed_ && !finishing_;
    }

    static std::string status_line(int status) {
        auto const reason =
            http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
        return "HTTP/1.1 " + std::to_string(status) + " " +
               std::string(reason.data(), reason.size()) + "\r\n";
    }

    void send_reply(std::uint64_t serial, Reply reply) {
        if (!current(serial)) return;
        bool const close_after = reply.close || !keep_alive_;
        std::string out = status_line(reply.status);
        out += "Content-Type: " + reply.content_type + "\r\n";
        out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
        for (auto const& [name, value] : reply.headers) out += name + ": " + value + "\r\n";
        out += close_after ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
        out += reply.body;
        server_.logger_(reply.status);
        finishing_ = true;
        close_after_ = close_after;
        queue(std::move(out));
    }

    void begin_stream(std::uint64_t serial, std::string const& content_type,
                      std::vector<std::pair<std::string, std::string>> const& headers) {
        if (!current(serial) || streaming_) return;
        streaming_ = true;
        std::string out = status_line(200) + "Content-Type: " + content_type + "\r\n";
        for (auto const& [name, value] : headers) out += name + ": " + value + "\r\n";
        // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
        out += http11_ ? "Transfer-Encoding: chunked\r\n" : "";
        out +=
            http11_ && keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
        server_.logger_(200);
        queue(std::move(out));
    }

    void write_chunk(std::uint64_t serial, std::string const& data) {
        if (!current(serial) || !streaming_ || data.empty()) return;
        if (!http11_) return queue(data);
        char size[20];
        std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        queue(size + data + "\r\n");
    }

    void end_stream(std::uint64_t serial) {
        if (!current(serial) || !streaming_) return;
        finishing_ = true;
        close_after_ = !http11_ || !keep_alive_;
        queue(http11_ ? "0\r\n\r\n" : "");
    }

    // One write at a time; what arrives meanwhile goes out with the next.
    void queue(std::string data) {
        queued_ += data;
        if (!writing_) write_queued();
    }

    void write_queued() {
        if (closed_) return;
        if (queued_.empty()) {
            if (finishing_) finish_exchange();
            return;
        }
        writing_ = true;
        in_flight_ = std::move(queued_);
        queued_.clear();
        // A client that stops reading cannot hold the connection (or its generation).
        stream_.expires_after(settings().write_deadline);
        net::async_write(stream_, net::buffer(in_flight_),
                         [self = shared_from_this()](beast::error_code ec, std::size_t) {
                             self->writing_ = false;
                             if (ec) return self->client_gone();
                             self->write_queued();
                         });
    }

    void finish_exchange() {
        in_exchange_ = false;
        finishing_ = false;
        streaming_ = false;
        on_gone_ = nullptr;
        stream_.expires_never();
        bool const linger = close_after_ || server_.stopping_;
        if (watching_) {
            // The watch read must end before the next reads start on the socket.
            after_watch_ = linger ? AfterWatch::linger : AfterWatch::read_next;
            beast::error_code ignored;
            stream_.socket().cancel(ignored);
            return;
        }
        if (linger) return linger_close();
        read_next();
    }

    // Closing a socket with unread input sends a reset, which can destroy the answer before
    // the client reads it: send FIN, then discard input for a moment before closing.
    void linger_close() {
        if (closed_) return;
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream_.expires_after(std::chrono::seconds(2));
        drain();
    }

    void drain() {
        stream_.async_read_some(net::buffer(discard_),
                                [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                    if (ec) return self->close();
                                    self->drain();
                                });
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream_.close();
    }

    beast::tcp_stream stream_;
    HttpServer& server_;
    bool counted_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::uint64_t serial_ = 0;
    std::uint64_t served_ = 0;
    bool in_exchange_ = false;
    bool finishing_ = false;  // the answer's last bytes are queued
    bool streaming_ = false;
    bool keep_alive_ = true;
    bool http11_ = true;
    bool close_after_ = false;
    bool writing_ = false;
    bool watching_ = false;
    // What the end of the watch read leads to once the answer is complete.
    enum class AfterWatch { keep_watching, read_next, linger };
    AfterWatch after_watch_ = AfterWatch::keep_watching;
    bool closed_ = false;
    std::string interim_;
    std::string queued_;
    std::string in_flight_;
    std::function<void()> on_gone_;
    std::array<char, 4096> discard_{};
};

inline void Exchange::reply(Reply reply) {
    connection_->send_reply(serial_, std::move(reply));
}
inline void Exchange::begin_stream(
    std::string const& content_type,
    std::vector<std::pair<std::string, std::string>> const& headers) {
    connection_->begin_stream(serial_, content_type, headers);
}
inline void Exchange::write(std::string const& data) {
    connection_->write_chunk(serial_, data);
}
inline void Exchange::end_stream() {
    connection_->end_stream(serial_);
}
inline void Exchange::abandon() {
    if (!connection_->current(serial_)) return;
    connection_->on_gone_ = nullptr;
    connection_->client_gone();
}
inline void Exchange::on_gone(std::function<void()> callback) {
    if (connection_->current(serial_)) connection_->on_gone_ = std::move(callback);
}
inline bool Exchange::active() const {
    return connection_->current(serial_);
}
inline net::any_io_executor Exchange::executor() const {
    return connection_->stream_.get_executor();
}

inline void HttpServer::accept() {
    acceptor_.async_accept(net::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
        if (stopping_) return;
        if (ec) {
            // Out of file descriptors (EMFILE) and the like: try again shortly rather than
            // spinning on the error.
            retry_timer_.expires_after(std::chrono::milliseconds(50));
            retry_timer_.async_wait([this](beast::error_code wait_error) {
                if (!wait_error && !stopping_) accept();
            });
            return;
        }
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);  // a token's chunk must not wait
        bool const full = connections_.load() >= settings_.max_connections;
        auto connection = std::make_shared<Connection>(std::move(socket), *this, !full);
        if (full)
            connection->refuse();
        else
            connection->start();
        accept();
    });
}

// The soft limit on open files raised to the hard one (a server's connections are files);
// returns the soft limit in force.
inline std::uint64_t raise_open_file_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
    if (limit.rlim_cur < limit.rlim_max) {
        rlimit raised = limit;
        raised.rlim_cur = limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
    }
    return static_cast<std::uint64_t>(limit.rlim_cur);
}

}  // namespace serve
