// serve: an OpenAI-compatible HTTP server over tinfer's engine, for the OpenAI client
// libraries, curl and Prometheus.
//
//   POST /v1/completions, POST /v1/chat/completions   (JSON answers, or SSE with "stream")
//   GET /v1/models, GET /health, GET /metrics          (Prometheus text format)
//   POST /tokenize, POST /detokenize                   (vLLM's shapes)
//
// With --api-key, every route but /health and /metrics (probes and scrapers carry no key, as
// with vLLM) needs `Authorization: Bearer <key>`; anything else is a 401.
//
// Threads: one engine thread runs Engine::serve() and every token callback. A few I/O threads
// run every connection (http_server.hpp: event-driven, so an idle or trickling connection holds
// no thread). A small worker pool parses, tokenizes and submits generation requests, off the
// I/O threads. A request's callbacks push its events into a queue of its own and wake its
// connection's strand, which drains them into JSON or SSE chunks. A client that hangs up is
// noticed (its connection's open read ends, or a write fails) and its request aborted, so its
// KV blocks are freed at the engine's next step.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/grammar/json_schema.hpp>
#include <tinfer/grammar/matcher.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kv/codec_pairs.hpp>
#include <tinfer/model/shipped_presets.hpp>
#include <tinfer/presets/presets.hpp>

#include "../common/cli_options.hpp"
#include "../common/device_option.hpp"
#include "../common/parallel_engines.hpp"
#include "../common/serving_engines.hpp"
#include "http_server.hpp"
#include "openai_protocol.hpp"
#include "prometheus.hpp"

#if TINFER_WITH_MPI
#include <tinfer/distributed/mpi_roles.hpp>
#endif

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using serve::ApiError;
using serve::json;
namespace net = serve::net;

using tinfer::examples::Serving;
// The KV codecs of K and V are compile-time types of the engine (PagedKv<BlockSize, K, V>), so
// --kv-cache-dtype chooses among the library's compiled list (kv/codec_pairs.hpp). Each pair is
// one more engine per shipped shape, instantiated once for serve and generate
// (common/serving_engines.hpp): the list is the instantiation budget (docs/server.md has the
// build times).
using tinfer::examples::ServingEngineFor;

// How often an answer in progress looks at the server's state (stopping, engine failed); its
// tokens and its client's hang-up wake it at once.
constexpr auto state_check_interval = 200ms;

// Past a few draft tokens prompt lookup rarely lands another; the cap keeps a drafted step far
// below the step's row budget.
constexpr int max_speculative_tokens = 64;

struct Options {
    std::string model;
    std::string served_model_name;
    std::string host = "127.0.0.1";
    int port = 8000;
    int threads = 0;
    std::size_t kv_budget_mb = 256;
    int max_queue = 256;
    int max_model_len = 0;  // 0: the model's context
    std::size_t max_body_bytes = serve::http_limits::default_max_body_bytes;
    int header_timeout_seconds = serve::http_limits::header_deadline_seconds;
    int body_timeout_seconds = serve::http_limits::body_deadline_seconds;
    int keep_alive_timeout_seconds = serve::http_limits::keep_alive_idle_seconds;
    int write_timeout_seconds = serve::http_limits::write_deadline_seconds;
    int max_connections = serve::http_limits::default_max_connections;
    int io_threads = 2;
    int workers = 2;
    int default_max_tokens = 512;
    std::string precision = "int8";  // f32 where --device cuda (its only one) and not given
    std::string device = "cpu";      // --device: cpu or cuda
    std::string kv_cache_dtype = "fp32";
    std::string api_key;  // empty: no authentication
    bool prefix_caching = true;
    int speculative_tokens = 0;  // γ of speculation (prompt lookup, or --draft-model); 0: off
    std::string draft_model;     // a GGUF of the target's shape that drafts; empty: prompt lookup
    std::string role;            // prefill or decode under mpirun; empty: colocated
    std::string chat_template;   // a Jinja file or a built-in's name; empty: the file's own
    // --tp / --pp: ranks of mpirun, each with its shard or its stage of the model
    tinfer::examples::ParallelSplit split;
};

// Compares a presented key with the configured one in time that depends only on the
// configured key's length, so response timing does not reveal how many leading bytes matched.
bool same_secret(std::string_view presented, std::string_view expected) {
    unsigned char difference = presented.size() != expected.size() ? 1 : 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
        difference |=
            static_cast<unsigned char>((i < presented.size() ? presented[i] : '\0') ^ expected[i]);
    return difference == 0;
}

std::filesystem::path default_model_path() {
    char const* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : ".") / ".cache/tinfer/models" /
           "SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct ServerState {
    std::atomic<bool> stopping{false};       // SIGINT/SIGTERM: answer nothing new
    std::atomic<bool> engine_failed{false};  // the engine thread died; nothing will finish
};

// At most `limit` engine sequences held by HTTP requests at once; past it, requests get a 429
// at once instead of piling up in the engine's queue.
class AdmissionLimit {
  public:
    AdmissionLimit(int limit, serve::ServerMetrics& metrics) : limit_(limit), metrics_(metrics) {}

    class Ticket {
      public:
        Ticket(AdmissionLimit* owner, int count) : owner_(owner), count_(count) {}
        Ticket(Ticket&& other) noexcept
            : owner_(std::exchange(other.owner_, nullptr)), count_(other.count_) {}
        Ticket(Ticket const&) = delete;
        Ticket& operator=(Ticket const&) = delete;
        Ticket& operator=(Ticket&&) = delete;
        ~Ticket() {
            if (owner_) owner_->release(count_);
        }

      private:
        AdmissionLimit* owner_;
        int count_;
    };

    std::optional<Ticket> try_acquire(int count) {
        int held = held_.load();
        do {
            if (held + count > limit_) return std::nullopt;
        } while (!held_.compare_exchange_weak(held, held + count));
        metrics_.on_admitted(count);
        return Ticket(this, count);
    }

    int limit() const { return limit_; }

  private:
    void release(int count) {
        held_.fetch_sub(count);
        metrics_.on_admitted(-count);
    }

    int limit_;
    std::atomic<int> held_{0};
    serve::ServerMetrics& metrics_;
};

// A token event of one of an HTTP request's choices, on its way from the engine thread.
struct ChoiceEvent {
    int choice;
    tinfer::TokenEvent event;
};

// Events from the engine thread to the connection: pushed under a mutex, then `wake` (which
// posts to the connection's strand; cheap, and never blocks the engine).
class EventChannel {
  public:
    explicit EventChannel(std::function<void()> wake) : wake_(std::move(wake)) {}

    void push(ChoiceEvent event) {
        {
            std::lock_guard lock(mutex_);
            events_.push_back(std::move(event));
        }
        if (wake_) wake_();
    }

    std::vector<ChoiceEvent> take() {
        std::lock_guard lock(mutex_);
        std::vector<ChoiceEvent> taken(std::make_move_iterator(events_.begin()),
                                       std::make_move_iterator(events_.end()));
        events_.clear();
        return taken;
    }

  private:
    std::mutex mutex_;
    std::deque<ChoiceEvent> events_;
    std::function<void()> wake_;
};

std::string finish_reason_name(tinfer::FinishReason reason) {
    switch (reason) {
        case tinfer::FinishReason::stop_token:
        case tinfer::FinishReason::stop_string:
            return "stop";
        case tinfer::FinishReason::length:
            return "length";
        case tinfer::FinishReason::aborted:
            return "abort";
    }
    return "abort";
}

serve::FinishLabel finish_label(tinfer::FinishReason reason) {
    switch (reason) {
        case tinfer::FinishReason::stop_token:
        case tinfer::FinishReason::stop_string:
            return serve::FinishLabel::stop;
        case tinfer::FinishReason::length:
            return serve::FinishLabel::length;
        case tinfer::FinishReason::aborted:
            return serve::FinishLabel::abort;
    }
    return serve::FinishLabel::abort;
}

// What a batch of events added to one choice.
struct ChoiceUpdate {
    int choice = 0;
    std::string text;
    std::vector<serve::TokenLogprobs> logprobs;
    std::size_t logprob_offset = 0;  // text_offset of the first of `logprobs`
    std::optional<std::string> finish_reason;
    std::string error;
};

// Structured output's grammars bound to the served vocabulary, compiled once per schema or
// grammar text: a client that sends one schema with every request pays for it once (the
// matcher's per-state masks are built per request, as it samples). Shared by the workers.
class ConstraintCache {
  public:
    ConstraintCache(std::shared_ptr<tinfer::grammar::Vocabulary const> vocabulary,
                    serve::ServerMetrics& metrics)
        : vocabulary_(std::move(vocabulary)), metrics_(metrics) {}

    // The constraint of a request's json_schema or grammar, or null when it has neither;
    // ApiError 400 naming the field for a schema or grammar that does not compile.
    std::shared_ptr<tinfer::grammar::Constraint const> of(serve::OpenAiRequest const& r) {
        if (!r.json_schema && !r.grammar) return nullptr;
        std::string key = r.json_schema ? "schema:" + *r.json_schema : "grammar:" + *r.grammar;
        {
            std::lock_guard lock(mutex_);
            if (auto const it = compiled_.find(key); it != compiled_.end()) {
                metrics_.on_structured_output(/*compiled=*/false);
                return it->second;
            }
        }
        std::shared_ptr<tinfer::grammar::Constraint const> constraint;
        try {
            constraint = tinfer::grammar::constrain(
                r.json_schema ? tinfer::grammar::json_schema_to_grammar(*r.json_schema)
                              : tinfer::grammar::Grammar::parse(*r.grammar),
                vocabulary_);
        } catch (tinfer::grammar::GrammarError const& e) {
            throw ApiError(400, e.what(), r.constraint_field, "unsupported_schema");
        }
        metrics_.on_structured_output(/*compiled=*/true);
        std::lock_guard lock(mutex_);
        // Bounded: a client sending a new schema each time must not grow the server forever.
        if (compiled_.size() >= max_entries) compiled_.clear();
        // Two workers may compile one text at once: the first stored wins, both are valid.
        return compiled_.emplace(std::move(key), constraint).first->second;
    }

  private:
    static constexpr std::size_t max_entries = 256;
    std::shared_ptr<tinfer::grammar::Vocabulary const> vocabulary_;
    serve::ServerMetrics& metrics_;
    std::mutex mutex_;
    std::unordered_map<std::string, std::shared_ptr<tinfer::grammar::Constraint const>> compiled_;
};

struct ChoiceState {
    tinfer::sched::RequestId id{};  // the engine request it is a choice of
    bool submitted = false;
    int prompt_tokens = 0;
    std::string text;
    int tokens = 0;
    std::vector<serve::TokenLogprobs> logprobs;
    std::size_t logprob_chars = 0;
    std::optional<tinfer::FinishReason> finish;
    std::string error;
};

// What the HTTP front end uses of an engine: one front end for every engine type (21 of them,
// common/serving_engines.hpp), compiled once instead of once per engine (serve.cpp took 200 s
// in a CI=true build with the front end a template over the engine, 134 s without). The calls it
// forwards are per request, not per token. submit and abort are the engine's thread-safe entry
// points.
class EngineAccess {
  public:
    virtual ~EngineAccess() = default;
    virtual tinfer::sched::RequestId submit(tinfer::GenerationRequest request,
                                            tinfer::TokenCallback callback) = 0;
    virtual void abort(tinfer::sched::RequestId id) = 0;
    virtual tinfer::tok::Tokenizer const& tokenizer() const = 0;
    virtual tinfer::tok::ChatTemplate const& chat_template() const = 0;
    virtual std::int32_t vocab() const = 0;
    virtual int max_context() const = 0;
};

template <class ServingEngine>
class EngineAccessFor final : public EngineAccess {
  public:
    explicit EngineAccessFor(ServingEngine& engine) : engine_(engine) {}
    tinfer::sched::RequestId submit(tinfer::GenerationRequest request,
                                    tinfer::TokenCallback callback) override {
        return engine_.submit(std::move(request), std::move(callback));
    }
    void abort(tinfer::sched::RequestId id) override { engine_.abort(id); }
    tinfer::tok::Tokenizer const& tokenizer() const override { return engine_.tokenizer(); }
    tinfer::tok::ChatTemplate const& chat_template() const override {
        return engine_.chat_template();
    }
    std::int32_t vocab() const override { return ServingEngine::config.vocab; }
    int max_context() const override { return ServingEngine::config.max_context; }

  private:
    ServingEngine& engine_;
};

// The engine requests of one HTTP request (its n choices for each prompt), from submission to
// the last event. Destroying it aborts whatever has not finished: a handler that returns early,
// a client that went away.
class Generation {
  public:
    Generation(EngineAccess& engine, serve::ServerMetrics& metrics,
               AdmissionLimit::Ticket admission, std::function<void()> wake)
        : engine_(engine),
          metrics_(metrics),
          admission_(std::move(admission)),
          channel_(std::make_shared<EventChannel>(std::move(wake))) {}

    Generation(Generation const&) = delete;
    Generation& operator=(Generation const&) = delete;
    ~Generation() { abort_unfinished(); }

    // Submits every request (one per prompt, each with its n choices, which the engine runs on
    // the prompt's shared KV); if one is refused, the others are aborted and the error
    // rethrown. Choice c of request i is the answer's choice i * n + c.
    void submit(std::vector<tinfer::GenerationRequest> requests) {
        std::size_t total = 0;
        for (auto const& request : requests) total += static_cast<std::size_t>(request.n);
        choices_.resize(total);
        std::size_t first = 0;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            int const prompt_tokens = static_cast<int>(requests[i].prompt_tokens.size());
            int const n = requests[i].n;
            for (int c = 0; c < n; ++c)
                choices_[first + static_cast<std::size_t>(c)].prompt_tokens = prompt_tokens;
            auto const arrival = Clock::now();
            // Runs on the engine thread, copied per choice by the engine (so `previous` is the
            // choice's own); times the tokens before the client can see them.
            tinfer::TokenCallback callback = [channel = channel_, metrics = &metrics_, arrival,
                                              first = static_cast<int>(first),
                                              previous = std::optional<Clock::time_point>()](
                                                 tinfer::TokenEvent const& event) mutable {
                auto const now = Clock::now();
                if (event.token >= 0) {
                    if (previous)
                        metrics->on_next_token(seconds_between(*previous, now));
                    else
                        metrics->on_first_token(seconds_between(arrival, now));
                    previous = now;
                }
                if (event.finish)
                    metrics->on_finished(finish_label(*event.finish),
                                         seconds_between(arrival, now));
                channel->push({first + event.choice, event});
            };
            tinfer::sched::RequestId id{};
            try {
                id = engine_.submit(std::move(requests[i]), std::move(callback));
            } catch (...) {
                abort_unfinished();
                throw;
            }
            for (int c = 0; c < n; ++c) {
                ChoiceState& choice = choices_[first + static_cast<std::size_t>(c)];
                choice.id = id;
                choice.submitted = true;
                metrics_.on_submitted(prompt_tokens);
            }
            first += static_cast<std::size_t>(n);
        }
    }

    // The events that arrived since the last call, folded per choice (a connection that fell
    // behind sends one chunk per choice, not one per token).
    std::vector<ChoiceUpdate> next() {
        std::vector<ChoiceUpdate> updates;
        for (ChoiceEvent& e : channel_->take()) {
            ChoiceState& c = choices_.at(static_cast<std::size_t>(e.choice));
            auto u = std::find_if(updates.begin(), updates.end(),
                                  [&](ChoiceUpdate const& x) { return x.choice == e.choice; });
            if (u == updates.end()) {
                updates.push_back({.choice = e.choice, .logprob_offset = c.logprob_chars});
                u = std::prev(updates.end());
            }
            tinfer::TokenEvent const& event = e.event;
            if (event.token >= 0) {
                ++c.tokens;
                if (event.logprob) {
                    serve::TokenLogprobs t{.token = token_text(event.token),
                                           .logprob = *event.logprob};
                    for (auto const& alternative : event.top_logprobs)
                        t.top.emplace_back(token_text(alternative.token), alternative.logprob);
                    c.logprob_chars += t.token.size();
                    c.logprobs.push_back(t);
                    u->logprobs.push_back(std::move(t));
                }
            }
            c.text += event.text;
            u->text += event.text;
            if (!event.error.empty()) c.error = u->error = event.error;
            if (event.finish) {
                c.finish = event.finish;
                u->finish_reason = finish_reason_name(*event.finish);
            }
        }
        return updates;
    }

    bool finished() const {
        return std::ranges::all_of(choices_,
                                   [](ChoiceState const& c) { return c.finish.has_value(); });
    }
    std::vector<ChoiceState> const& choices() const { return choices_; }

  private:
    static double seconds_between(Clock::time_point from, Clock::time_point to) {
        return std::chrono::duration<double>(to - from).count();
    }

    std::string token_text(std::int32_t token) const {
        return std::string(engine_.tokenizer().token_bytes(token));
    }

    void abort_unfinished() {
        for (ChoiceState const& c : choices_)
            if (c.submitted && !c.finish) engine_.abort(c.id);
    }

    EngineAccess& engine_;
    serve::ServerMetrics& metrics_;
    AdmissionLimit::Ticket admission_;
    std::shared_ptr<EventChannel> channel_;
    std::vector<ChoiceState> choices_;
};

std::uint64_t random_u64() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
}

std::string random_id(char const* prefix) {
    char digits[25];
    std::snprintf(digits, sizeof digits, "%016llx%08llx",
                  static_cast<unsigned long long>(random_u64()),
                  static_cast<unsigned long long>(random_u64() & 0xffffffffu));
    return std::string(prefix) + digits;
}

// OpenAI's `user` names an end user; FairShare shares the engine between tenants, so each user
// string becomes a tenant (FNV-1a). Requests without one share tenant 0.
std::uint32_t tenant_of(std::string const& user) {
    if (user.empty()) return 0;
    std::uint32_t hash = 2166136261u;
    for (unsigned char c : user) hash = (hash ^ c) * 16777619u;
    return hash == 0 ? 1 : hash;
}

serve::Reply json_reply(int status, json const& body, bool close = false) {
    return {.status = status, .body = serve::to_text(body), .close = close};
}

std::string sse(json const& data) {
    return "data: " + serve::to_text(data) + "\n\n";
}

// Everything one generation endpoint needs to know about its request once it is parsed.
struct Prepared {
    serve::OpenAiRequest request;
    std::vector<std::vector<std::int32_t>> prompts;
    int max_tokens = 0;
    std::string id;
    std::int64_t created = 0;
    std::int64_t prompt_tokens = 0;  // usage: each prompt once, however many choices
};

class OpenAiServer;

// One generation request from submission to its last byte, on its connection's strand: woken
// by its tokens (EventChannel), by its client going away (Exchange::on_gone) and by a slow
// timer that looks at the server's state. It keeps itself alive until it is done.
class GenerationTask : public std::enable_shared_from_this<GenerationTask> {
  public:
    GenerationTask(OpenAiServer const& api, std::shared_ptr<serve::Exchange> exchange,
                   Prepared prepared)
        : api_(api),
          exchange_(std::move(exchange)),
          prepared_(std::move(prepared)),
          timer_(exchange_->executor()) {}

    // Runs on the engine thread: at most one wake-up is posted at a time.
    std::function<void()> waker() {
        return [weak = weak_from_this(), executor = exchange_->executor(), posted = posted_] {
            if (posted->exchange(true)) return;
            net::post(executor, [weak, posted] {
                posted->store(false);
                if (auto self = weak.lock()) self->pump();
            });
        };
    }

    void set_generation(std::shared_ptr<Generation> generation) {
        generation_ = std::move(generation);
    }

    // On the strand, once the engine has the request.
    void start();

  private:
    void pump() {
        if (!started_ || !generation_) return;
        if (prepared_.request.stream)
            pump_stream();
        else
            pump_answer();
    }

    // A streamed answer: SSE chunks as tokens arrive, then the usage chunk if asked, then
    // [DONE].
    void pump_stream();

    void pump_answer();

    void check_state();

    // Ends the task: what has not finished is aborted (~Generation).
    void finish() {
        timer_.cancel();
        generation_.reset();
        auto keep = std::move(self_);  // destroyed at the end of this call
    }

    OpenAiServer const& api_;
    std::shared_ptr<serve::Exchange> exchange_;
    Prepared prepared_;
    std::shared_ptr<Generation> generation_;
    net::steady_timer timer_;
    std::shared_ptr<std::atomic<bool>> posted_ = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<GenerationTask> self_;
    bool started_ = false;
};

class OpenAiServer {
  public:
    OpenAiServer(EngineAccess& engine, Options const& options, serve::ServerMetrics& metrics,
                 ServerState& state, net::thread_pool& workers)
        : engine_(engine),
          options_(options),
          metrics_(metrics),
          state_(state),
          workers_(workers),
          admission_(options.max_queue, metrics),
          constraints_(tinfer::grammar::Vocabulary::of(engine.tokenizer(), engine.vocab()),
                       metrics),
          context_tokens_(options.max_model_len > 0
                              ? std::min(options.max_model_len, engine.max_context())
                              : engine.max_context()),
          started_(std::time(nullptr)) {}

    // On the connection's strand (an I/O thread): cheap routes answer here, generation goes to
    // the worker pool.
    void handle(std::shared_ptr<serve::Exchange> exchange) {
        auto const& req = exchange->request();
        std::string_view target(req.target().data(), req.target().size());
        std::string_view const path = target.substr(0, target.find('?'));
        bool const get = req.method() == serve::http::verb::get;
        bool const post = req.method() == serve::http::verb::post;
        bool const generation = path == "/v1/completions" || path == "/v1/chat/completions";
        bool const tokens = path == "/tokenize" || path == "/detokenize";
        if (!authorized(req, path)) {
            serve::Reply reply = json_reply(
                401, serve::error_object("a valid API key is required: send 'Authorization: "
                                         "Bearer <key>' (--api-key)",
                                         "invalid_request_error", "", "invalid_api_key"));
            reply.headers.emplace_back("WWW-Authenticate", "Bearer");
            exchange->reply(std::move(reply));
        } else if (tokens && post) {
            // Tokenizing a long prompt takes a while: off the I/O thread.
            net::post(workers_, [this, exchange, detokenize = path == "/detokenize"] {
                serve::Reply reply = answering_errors([&] {
                    json const body = serve::parse_body(exchange->request().body());
                    return detokenize ? detokenize_reply(body) : tokenize_reply(body);
                });
                exchange->post([exchange, reply = std::move(reply)]() mutable {
                    exchange->reply(std::move(reply));
                });
            });
        } else if (generation && post) {
            net::post(workers_, [this, exchange, chat = path == "/v1/chat/completions"] {
                generate(exchange, chat);
            });
        } else if (path == "/health" && get) {
            exchange->reply(health());
        } else if (path == "/v1/models" && get) {
            exchange->reply(models());
        } else if (path == "/metrics" && get) {
            exchange->reply({.content_type = "text/plain; version=0.0.4; charset=utf-8",
                             .body = metrics_.render()});
        } else {
            bool const known = generation || tokens || path == "/health" || path == "/v1/models" ||
                               path == "/metrics";
            exchange->reply(error_reply(known ? 405 : 404, &req));
        }
    }

    // Answers the HTTP layer gives itself, in the API's error object.
    serve::Reply error_reply(int status, serve::HttpRequest const* req) const {
        std::string const method = req ? std::string(req->method_string()) : "";
        std::string const path = req ? std::string(req->target()) : "";
        std::string message, code;
        std::string type = status == 404   ? "not_found_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        bool close = false;
        switch (status) {
            case 400:
                message = "malformed HTTP request";
                close = true;
                break;
            case 404:
                message = "no route for " + method + " " + path;
                break;
            case 405:
                message = "method " + method + " is not allowed on " + path;
                break;
            case 413:
                message = "the request body exceeds the server's limit of " +
                          std::to_string(options_.max_body_bytes) + " bytes (--max-body-bytes)";
                code = "payload_too_large";
                close = true;
                break;
            case 431:
                message = "the request's headers exceed the server's limit of " +
                          std::to_string(serve::http_limits::max_header_bytes) + " bytes";
                code = "request_header_fields_too_large";
                close = true;
                break;
            case 503:
                message = "the server is at its limit of " +
                          std::to_string(options_.max_connections) +
                          " open connections (--max-connections); retry later";
                code = "too_many_connections";
                close = true;
                break;
            default:
                message = "HTTP error " + std::to_string(status);
                close = true;
        }
        serve::Reply reply =
            json_reply(status, serve::error_object(message, type, "", code), close);
        if (status == 503) reply.headers.emplace_back("Retry-After", "1");
        return reply;
    }

    bool authorized(serve::HttpRequest const& req, std::string_view path) const {
        if (options_.api_key.empty() || path == "/health" || path == "/metrics") return true;
        auto const header = req[serve::http::field::authorization];
        std::string_view const value(header.data(), header.size());
        constexpr std::string_view scheme = "Bearer ";
        if (!value.starts_with(scheme)) return false;
        return same_secret(value.substr(scheme.size()), options_.api_key);
    }

    void check_model(std::string const& model) const {
        if (!model.empty() && model != options_.served_model_name)
            throw ApiError(404,
                           "The model '" + model + "' does not exist; this server serves '" +
                               options_.served_model_name + "'",
                           "model", "model_not_found");
    }

    serve::Reply tokenize_reply(json const& body) const {
        serve::TokenizeRequest const r = serve::parse_tokenize_request(body);
        check_model(r.model);
        auto const& tokenizer = engine_.tokenizer();
        std::string const text =
            r.prompt ? *r.prompt
                     : engine_.chat_template().render(r.messages, r.add_generation_prompt);
        std::vector<std::int32_t> const ids =
            r.add_special_tokens ? tokenizer.encode_prompt(text) : tokenizer.encode(text);
        return json_reply(200, {{"count", ids.size()},
                                {"max_model_len", context_tokens_},
                                {"tokens", ids},
                                {"token_strs", nullptr}});
    }

    serve::Reply detokenize_reply(json const& body) const {
        serve::DetokenizeRequest const r = serve::parse_detokenize_request(body);
        check_model(r.model);
        for (std::int32_t const t : r.tokens)
            if (t >= engine_.vocab())
                throw ApiError(400,
                               "token id " + std::to_string(t) + " is outside the vocabulary of " +
                                   std::to_string(engine_.vocab()),
                               "tokens");
        return json_reply(200, {{"prompt", engine_.tokenizer().decode(r.tokens)}});
    }

    serve::Reply health() const {
        if (state_.engine_failed) return json_reply(503, {{"status", "engine failed"}});
        return json_reply(200, {{"status", "ok"}});
    }

    serve::Reply models() const {
        return json_reply(200, {{"object", "list"},
                                {"data",
                                 {{{"id", options_.served_model_name},
                                   {"object", "model"},
                                   {"created", static_cast<std::int64_t>(started_)},
                                   {"owned_by", "tinfer"},
                                   {"max_model_len", context_tokens_}}}}});
    }

    template <class Body>
    static serve::Reply answering_errors(Body&& body) {
        try {
            return body();
        } catch (ApiError const& e) {
            return json_reply(e.status, serve::error_object(e));
        } catch (tinfer::RequestError const& e) {
            return json_reply(400, serve::error_object(e.what(), "invalid_request_error"));
        } catch (std::exception const& e) {
            return json_reply(500, serve::error_object(e.what(), "server_error"));
        }
    }

    // A non-streamed answer, once every choice has finished.
    serve::Reply answer(Prepared const& p, Generation const& generation) const {
        json choices = json::array();
        std::int64_t completion_tokens = 0;
        for (std::size_t i = 0; i < generation.choices().size(); ++i) {
            ChoiceState const& c = generation.choices()[i];
            if (!c.error.empty()) throw ApiError(400, c.error);
            completion_tokens += c.tokens;
            json choice{{"index", i},
                        {"logprobs", logprobs_of(p, c.logprobs, 0)},
                        {"finish_reason", finish_reason_name(*c.finish)}};
            if (p.request.chat)
                choice["message"] = {{"role", "assistant"}, {"content", c.text}};
            else
                choice["text"] = c.text;
            choices.push_back(std::move(choice));
        }
        return json_reply(200,
                          {{"id", p.id},
                           {"object", p.request.chat ? "chat.completion" : "text_completion"},
                           {"created", p.created},
                           {"model", options_.served_model_name},
                           {"choices", std::move(choices)},
                           {"usage", serve::usage_object(p.prompt_tokens, completion_tokens)}});
    }

    json chunk(Prepared const& p, json choices) const {
        json c{{"id", p.id},
               {"object", p.request.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", p.created},
               {"model", options_.served_model_name},
               {"choices", std::move(choices)}};
        if (p.request.include_usage) c["usage"] = nullptr;
        return c;
    }

    json logprobs_of(Prepared const& p, std::vector<serve::TokenLogprobs> const& tokens,
                     std::size_t offset) const {
        if (!p.request.sampling.logprobs) return nullptr;
        return p.request.chat ? serve::chat_logprobs(tokens)
                              : serve::completion_logprobs(tokens, offset);
    }

    ServerState const& state() const { return state_; }

  private:
    // On a worker thread: parse, tokenize, admit, submit; then the connection's strand takes
    // over (GenerationTask). A refusal is answered from the strand.
    void generate(std::shared_ptr<serve::Exchange> const& exchange, bool chat) {
        std::shared_ptr<GenerationTask> task;
        serve::Reply refusal = answering_errors([&] {
            task = prepare(exchange, chat);
            return serve::Reply{};
        });
        if (task)
            exchange->post([task] { task->start(); });
        else
            exchange->post([exchange, refusal = std::move(refusal)]() mutable {
                exchange->reply(std::move(refusal));
            });
    }

    std::shared_ptr<GenerationTask> prepare(std::shared_ptr<serve::Exchange> const& exchange,
                                            bool chat) {
        if (state_.stopping)
            throw ApiError(503, "the server is shutting down", "", "", "server_error");
        if (state_.engine_failed)
            throw ApiError(503, "the engine has failed", "", "", "server_error");
        json const body = serve::parse_body(exchange->request().body());
        Prepared p{.request = chat ? serve::parse_chat_request(body)
                                   : serve::parse_completion_request(body),
                   .id = random_id(chat ? "chatcmpl-" : "cmpl-"),
                   .created = static_cast<std::int64_t>(std::time(nullptr))};
        serve::OpenAiRequest const& r = p.request;
        check_model(r.model);
        // The sampler adds any finite bias to any token (OpenAI's [-100, 100] is checked when
        // parsing); only ids past the vocabulary are refused, naming the field.
        for (auto const& [token, bias] : r.sampling.logit_bias)
            if (token >= engine_.vocab())
                throw ApiError(400,
                               "'logit_bias' names token " + std::to_string(token) +
                                   ", outside the vocabulary of " + std::to_string(engine_.vocab()),
                               "logit_bias");
        tokenize(p);

        int const sequences = static_cast<int>(p.prompts.size()) * r.n;
        if (sequences > admission_.limit())
            throw ApiError(400,
                           "the request asks for " + std::to_string(sequences) +
                               " sequences; this server runs at most " +
                               std::to_string(admission_.limit()) + " at once",
                           "n");
        auto ticket = admission_.try_acquire(sequences);
        if (!ticket)
            throw ApiError(429,
                           "the server is at its limit of " + std::to_string(admission_.limit()) +
                               " concurrent sequences; retry later",
                           "", "rate_limit_exceeded", "rate_limit_error");

        auto requests = engine_requests(p);
        auto task = std::make_shared<GenerationTask>(*this, exchange, std::move(p));
        auto generation =
            std::make_shared<Generation>(engine_, metrics_, std::move(*ticket), task->waker());
        try {
            generation->submit(std::move(requests));
        } catch (tinfer::RequestError const& e) {
            throw ApiError(400, e.what(), chat ? "messages" : "prompt");
        }
        task->set_generation(std::move(generation));
        return task;
    }

    // Prompts to token ids exactly as the engine would (chat template with the generation
    // prompt), here on a worker thread: the usage block needs the count, and the engine
    // thread is spared the work.
    void tokenize(Prepared& p) const {
        serve::OpenAiRequest const& r = p.request;
        char const* const prompt_field = r.chat ? "messages" : "prompt";
        if (r.chat) {
            p.prompts.push_back(engine_.tokenizer().encode_prompt(
                engine_.chat_template().render(r.messages, /*add_generation_prompt=*/true)));
        } else {
            for (serve::PromptInput const& input : r.prompts)
                p.prompts.push_back(
                    input.is_tokens ? input.tokens : engine_.tokenizer().encode_prompt(input.text));
        }
        int longest = 0;
        for (auto const& prompt : p.prompts) {
            if (prompt.empty()) throw ApiError(400, "the prompt is empty", prompt_field);
            longest = std::max(longest, static_cast<int>(prompt.size()));
            p.prompt_tokens += static_cast<std::int64_t>(prompt.size());
        }
        // Completions default to 16 tokens as OpenAI's do; chat to the rest of the context,
        // capped so an unbounded request cannot hold a sequence for minutes.
        int const room = context_tokens_ - longest;
        p.max_tokens = r.max_tokens.value_or(
            r.chat ? std::max(1, std::min(options_.default_max_tokens, room)) : 16);
        if (static_cast<std::int64_t>(longest) + p.max_tokens > context_tokens_)
            throw ApiError(400,
                           "This model's maximum context length is " +
                               std::to_string(context_tokens_) + " tokens; the request asks for " +
                               std::to_string(static_cast<std::int64_t>(longest) + p.max_tokens) +
                               " (" + std::to_string(longest) + " in the prompt, " +
                               std::to_string(p.max_tokens) + " to generate)",
                           r.max_tokens && longest < context_tokens_ ? "max_tokens" : prompt_field,
                           "context_length_exceeded");
    }

    // One engine request per prompt with the n choices: the engine prefills the prompt once
    // and forks its KV for the others. Choice i samples with seed + i (the engine's rule), so
    // a seeded request repeats itself and its choices differ; without a seed the engine draws
    // a fresh one.
    std::vector<tinfer::GenerationRequest> engine_requests(Prepared const& p) {
        serve::OpenAiRequest const& r = p.request;
        auto const constraint = constraints_.of(r);
        std::vector<tinfer::GenerationRequest> requests;
        for (auto const& prompt : p.prompts) {
            tinfer::GenerationRequest g{.prompt_tokens = prompt,
                                        .max_tokens = p.max_tokens,
                                        .stop = r.stop,
                                        .ignore_eos = r.ignore_eos,
                                        .sampling = r.sampling,
                                        .seed = r.seed,
                                        .n = r.n,
                                        .priority = r.priority,
                                        .tenant = tenant_of(r.user),
                                        .grammar = constraint};
            // Verification computes no log-probabilities, so a request that asks for them
            // decodes without drafts (same tokens, one per step).
            if (!r.sampling.logprobs && r.sampling.top_logprobs == 0)
                g.draft_tokens = options_.speculative_tokens;
            requests.push_back(std::move(g));
        }
        return requests;
    }

    EngineAccess& engine_;
    Options const& options_;
    serve::ServerMetrics& metrics_;
    ServerState& state_;
    net::thread_pool& workers_;
    AdmissionLimit admission_;
    ConstraintCache constraints_;
    int context_tokens_;
    std::time_t started_;
};

// GenerationTask's members that call into the front end, now that it is complete.
inline void GenerationTask::start() {
    if (!exchange_->active()) return finish();  // the client left before this ran
    self_ = shared_from_this();
    exchange_->on_gone([self = shared_from_this()] { self->finish(); });
    if (prepared_.request.stream) {
        exchange_->begin_stream("text/event-stream", {{"Cache-Control", "no-cache"}});
        // OpenAI's first chat chunk carries the role alone.
        if (prepared_.request.chat) {
            json choices = json::array();
            for (std::size_t i = 0; i < generation_->choices().size(); ++i)
                choices.push_back({{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}});
            exchange_->write(sse(api_.chunk(prepared_, std::move(choices))));
        }
    }
    started_ = true;
    check_state();
    pump();
}

inline void GenerationTask::pump_stream() {
    Prepared const& p = prepared_;
    Generation& g = *generation_;
    std::string out;
    for (ChoiceUpdate& u : g.next()) {
        if (!u.error.empty()) out += sse(serve::error_object(u.error, "invalid_request_error"));
        if (u.text.empty() && u.logprobs.empty() && !u.finish_reason) continue;
        json choice{{"index", u.choice},
                    {"logprobs", api_.logprobs_of(p, u.logprobs, u.logprob_offset)},
                    {"finish_reason", u.finish_reason ? json(*u.finish_reason) : json(nullptr)}};
        if (p.request.chat)
            choice["delta"] = {{"content", std::move(u.text)}};
        else
            choice["text"] = std::move(u.text);
        out += sse(api_.chunk(p, json::array({std::move(choice)})));
    }
    bool const done = g.finished();
    if (done) {
        if (p.request.include_usage) {
            std::int64_t completion_tokens = 0;
            for (ChoiceState const& c : g.choices()) completion_tokens += c.tokens;
            json last = api_.chunk(p, json::array());
            last["usage"] = serve::usage_object(p.prompt_tokens, completion_tokens);
            out += sse(last);
        }
        out += "data: [DONE]\n\n";
    }
    exchange_->write(out);
    if (done) {
        exchange_->end_stream();
        finish();
    }
}

inline void GenerationTask::pump_answer() {
    generation_->next();
    if (!generation_->finished()) return;
    exchange_->reply(api_.answering_errors([&] { return api_.answer(prepared_, *generation_); }));
    finish();
}

inline void GenerationTask::check_state() {
    timer_.expires_after(state_check_interval);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (ec || !self->generation_) return;
        ServerState const& state = self->api_.state();
        if (state.engine_failed || state.stopping) {
            if (self->prepared_.request.stream)
                self->exchange_->abandon();
            else if (state.engine_failed)
                self->exchange_->reply(
                    json_reply(500, serve::error_object("the engine has failed", "server_error")));
            else
                self->exchange_->reply(json_reply(
                    503, serve::error_object("the server is shutting down", "server_error")));
            return self->finish();
        }
        self->pump();  // a lost wake-up costs one interval, not the request
        if (self->generation_) self->check_state();
    });
}

// The engine's view, published once per step from the engine thread (the only one that may
// read the scheduler, the cache and the engine's MetricsRecorder).
template <class ServingEngine>
class EngineObserver {
  public:
    EngineObserver(ServingEngine const& engine, serve::ServerMetrics& metrics)
        : engine_(engine), metrics_(metrics) {}

    void publish() {
        auto const& finished = engine_.metrics().finished();
        for (; drained_ < finished.size(); ++drained_) {
            tinfer::sched::RequestMetrics const& m = finished[drained_];
            if (auto const queued = m.queue_time())
                metrics_.on_queue_time(*queued, m.prompt_tokens, m.cached_prompt_tokens);
        }
        auto const& cache = engine_.cache();
        // Usage is what live sequences hold, as vLLM reports it: blocks only the prefix cache
        // holds are evictable, so free for the next request; they get gauges of their own.
        metrics_.on_engine_step({.running = static_cast<int>(engine_.scheduler().running().size()),
                                 .waiting = engine_.queued_requests(),
                                 .live = static_cast<std::int64_t>(engine_.live_requests()),
                                 .total_blocks = cache.total_blocks(),
                                 .sequence_blocks = cache.sequence_blocks(),
                                 .prefix_only_blocks = cache.prefix_only_blocks(),
                                 .free_blocks = cache.free_blocks(),
                                 .preemptions = engine_.metrics().summary().preemptions,
                                 .draft_tokens = engine_.speculation_stats().drafted,
                                 .accepted_draft_tokens = engine_.speculation_stats().accepted,
                                 .computed_tokens = engine_.metrics().summary().computed_tokens});
    }

  private:
    ServingEngine const& engine_;
    serve::ServerMetrics& metrics_;
    std::size_t drained_ = 0;
};

// --role: the engine's loop in a prefill or decode role (distributed/mpi_roles.hpp); without
// MPI there is no role to take.
#if TINFER_WITH_MPI
using RoleSession = tinfer::distributed::MpiRoleSession;
#else
struct RoleSession {
    bool serves_http() const { return true; }
    template <class Engine, class StopRequested>
    void serve(Engine& engine, StopRequested stop) {
        engine.serve(stop);
    }
};
#endif

// Under --tp or --pp (`ranks`), every rank runs this; ranks > 0 follow rank 0's engine steps and
// serve no HTTP (examples/common/parallel_engines.hpp).
template <class ServingEngine>
int run(Options const& options, sigset_t const& stop_signals, tinfer::gguf::File file,
        RoleSession* role, tinfer::examples::LockstepRanks* ranks = nullptr) {
    // Read before the engine takes the file: --chat-template replaces the file's template.
    auto chat_template = tinfer::examples::chat_template_option(options.chat_template, file);
    ServingEngine engine = tinfer::examples::make_engine<ServingEngine>(
        std::move(file),
        {.kv_budget_bytes = options.kv_budget_mb << 20,
         .threads = options.threads,
         .prefix_caching = options.prefix_caching,
         .int8_activations = options.precision == "int8",
         .chat_template = std::move(chat_template)},
        ranks, options.draft_model);
    if (std::optional<int> const follower_exit =
            tinfer::examples::join_lockstep(engine, ranks, "serve"))
        return *follower_exit;
    if (ranks != nullptr) {
        // The pid: SIGTERM to rank 0 stops the job cleanly (mpirun's own forwarding may kill).
        std::cout << "serve: " << tinfer::examples::describe(options.split) << "; rank 0 (pid "
                  << getpid() << ") serves HTTP" << std::endl;
    }
    if (role && !role->serves_http()) {  // the decode rank: no HTTP, until rank 0 shuts it down
        std::cout << "serve: decode role, serving the prefill rank's hand-offs" << std::endl;
        role->serve(engine, [] { return false; });
        std::cout << "serve: stopped" << std::endl;
        return 0;
    }
    serve::ServerMetrics metrics(options.served_model_name);
    ServerState state;
    net::thread_pool workers(static_cast<std::size_t>(options.workers));
    EngineAccessFor<ServingEngine> access(engine);
    OpenAiServer api(access, options, metrics, state, workers);

    // Connections are files: the soft limit goes up to the hard one, and the connection cap
    // stays below it with room for the model file, the listener and the refusals.
    std::uint64_t const open_files = serve::raise_open_file_limit();
    serve::HttpSettings settings{
        .max_body_bytes = options.max_body_bytes,
        .header_deadline = std::chrono::seconds(options.header_timeout_seconds),
        .body_deadline = std::chrono::seconds(options.body_timeout_seconds),
        .keep_alive_idle = std::chrono::seconds(options.keep_alive_timeout_seconds),
        .write_deadline = std::chrono::seconds(options.write_timeout_seconds),
        .max_connections = options.max_connections};
    if (open_files > 0 && static_cast<std::uint64_t>(settings.max_connections) + 128 > open_files)
        std::cerr << "serve: warning: --max-connections " << settings.max_connections
                  << " is above what " << open_files
                  << " open files allow; past that, connections wait in the backlog" << std::endl;

    net::io_context io(options.io_threads);
    serve::HttpServer server(
        io, settings, [&](std::shared_ptr<serve::Exchange> x) { api.handle(std::move(x)); },
        [&](int status, serve::HttpRequest const* req) { return api.error_reply(status, req); },
        [&](int status) { metrics.on_response(status); });
    int port = -1;
    try {
        port = server.listen(options.host, options.port);
    } catch (std::exception const& e) {
        throw std::runtime_error("cannot listen on " + options.host + ":" +
                                 std::to_string(options.port) + ": " + e.what());
    }
    server.start();

    std::atomic<bool> engine_stop{false};
    EngineObserver<ServingEngine> observer(engine, metrics);
    std::thread engine_thread([&] {
        try {
            auto const keep_serving = [&] {
                observer.publish();
                return engine_stop.load();
            };
            if (role) {
                role->serve(engine, keep_serving);  // prefill: hands off, hears the tokens back
            } else {
                engine.serve(keep_serving);
            }
        } catch (std::exception const& e) {
            std::cerr << "serve: the engine failed: " << e.what() << std::endl;
            tinfer::examples::abandon_lockstep(ranks);
            state.engine_failed = true;
        }
    });
    // SIGINT/SIGTERM end the server from a thread of their own. Answers in progress get a
    // moment to say so (503, or a cut stream), then the I/O threads stop.
    std::thread([&state, &server, &io, stop_signals] {
        int signal_number = 0;
        sigwait(&stop_signals, &signal_number);
        state.stopping = true;
        server.stop();
        std::this_thread::sleep_for(2 * state_check_interval + 100ms);
        io.stop();
    }).detach();

    std::cout << "serve: listening on http://" << options.host << ":" << port << " (model "
              << options.served_model_name << ", KV " << options.kv_cache_dtype << ", "
              << options.max_queue << " concurrent sequences, " << options.max_connections
              << " connections, CPU kernels " << tinfer::kernels::describe_isa() << ")"
              << std::endl;
    std::vector<std::thread> io_threads;
    for (int i = 0; i < options.io_threads; ++i) io_threads.emplace_back([&io] { io.run(); });
    for (std::thread& t : io_threads) t.join();

    // Nothing runs on the strands now; the workers finish what they hold, the engine stops,
    // and only then do the connections (destroyed with `io`) abort what they still hold.
    state.stopping = true;
    workers.join();
    engine_stop = true;
    engine_thread.join();
    tinfer::examples::finish_lockstep(ranks);
    std::cout << "serve: stopped" << std::endl;
    return state.engine_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    // OpenMP workers that spin between parallel regions take the cores the engine thread's
    // serial work (sampling, callbacks) and the HTTP threads need: with 2 threads on 2 busy
    // cores a 16-token answer took 8.5 s spinning and 0.5 s passive. libgomp reads the policy
    // before main runs, so an unset policy is set here and the program started again.
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);  // returns only on failure: run with the default policy
    }
    Options options;
    options.model = default_model_path().string();
    CLI::App app{"OpenAI-compatible HTTP server over tinfer's engine"};
    app.add_option("--model", options.model, "GGUF file")->capture_default_str();
    app.add_option("--served-model-name", options.served_model_name,
                   "Model id of the API (default: the file's name without .gguf)");
    app.add_option("--host", options.host, "Address to listen on")->capture_default_str();
    app.add_option("--port", options.port, "Port (0: any free port, printed at start)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    app.add_option("--threads", options.threads, "Engine CPU threads (0: all)")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(0));
    app.add_option("--precision", options.precision,
                   "Activations of the matrix products: int8 (quantized per block of 32, as "
                   "llama.cpp; faster) or f32 (exact)")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    app.add_option("--kv-budget-mb", options.kv_budget_mb, "KV cache size in MiB")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--max-queue", options.max_queue,
                   "Most sequences (running + waiting) at once; more get HTTP 429")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--max-model-len", options.max_model_len,
                   "Context length the API offers, prompt and answer together (0: the "
                   "model's); longer requests get HTTP 400")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(0));
    app.add_option("--max-body-bytes", options.max_body_bytes,
                   "Largest request body; larger ones get HTTP 413")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--header-timeout", options.header_timeout_seconds,
                   "Seconds a request's headers may take to arrive in all (not per read)")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--body-timeout", options.body_timeout_seconds,
                   "Seconds a request's body may take to arrive in all")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option_function<int>(
           "--read-timeout",
           [&](int seconds) {
               options.header_timeout_seconds = options.body_timeout_seconds = seconds;
           },
           "Sets --header-timeout and --body-timeout both")
        ->check(tinfer::examples::at_least(1));
    app.add_option("--keep-alive-timeout", options.keep_alive_timeout_seconds,
                   "Seconds a kept-alive connection may wait for its next request")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--write-timeout", options.write_timeout_seconds,
                   "Seconds a client may take to accept an answer, or each part of a stream")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--max-connections", options.max_connections,
                   "Open connections at once; more get HTTP 503 and are closed")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
    app.add_option("--io-threads", options.io_threads, "Threads running the connections")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("--workers", options.workers,
                   "Threads that parse and tokenize generation requests")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    app.add_option("--default-max-tokens", options.default_max_tokens,
                   "Chat answers' length when the request sets no max_tokens")
        ->capture_default_str()
        ->check(tinfer::examples::at_least(1));
    app.add_option("--api-key", options.api_key,
                   "Key clients must send as 'Authorization: Bearer <key>' (default: the "
                   "TINFER_API_KEY environment variable; empty: no key). /health and /metrics "
                   "stay open")
        ->envname("TINFER_API_KEY");
    app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", options.prefix_caching,
                 "Reuse the KV of prompt prefixes other requests computed (default: on)");
    app.add_option("--speculative-tokens", options.speculative_tokens,
                   "Speculative decoding, by prompt lookup (n-grams of 3 down to 1 tokens) or "
                   "--draft-model: "
                   "draft tokens verified per decode step (0: off). Requests with logprobs "
                   "decode without drafts")
        ->capture_default_str()
        ->check(CLI::Range(0, max_speculative_tokens));
    app.add_option("--draft-model", options.draft_model,
                   "A draft model for --speculative-tokens instead of prompt lookup: a GGUF of "
                   "the served model's shape and vocabulary (e.g. another quantization of it); "
                   "float32 KV cache, one process")
        ->check(CLI::ExistingFile);
    app.add_option("--chat-template", options.chat_template,
                   "Chat template: a Jinja file, or chatml / smollm2 / gemma (built in); "
                   "default: the file's own");
    app.add_option("--kv-cache-dtype", options.kv_cache_dtype,
                   "Codecs of the KV cache, 'K' for both or 'K,V' (the compiled-in pairs)")
        ->capture_default_str()
        ->check(tinfer::examples::one_of(tinfer::kv::kv_codec_pair_names()));
    app.add_option("--role", options.role,
                   "Prefill/decode disaggregation, as one of two ranks of an mpirun: prefill "
                   "(serves HTTP, hands each request off after its first token) or decode "
                   "(decodes them, no HTTP): mpirun -n 1 serve --role prefill ... : -n 1 serve "
                   "--role decode ...")
        ->check(CLI::IsMember({"prefill", "decode"}));
    tinfer::examples::add_split_options(app, options.split, "serve", "serves HTTP");
    tinfer::examples::add_device_option(app, options.device);
    CLI11_PARSE(app, argc, argv);
    // The CUDA backend multiplies float32 activations only: its default precision.
    if (options.device == "cuda" && app.count("--precision") == 0) options.precision = "f32";
    if (options.served_model_name.empty())
        options.served_model_name = std::filesystem::path(options.model).stem().string();

    // A write to a client that hung up must fail with EPIPE, not kill the process (Asio sends
    // with MSG_NOSIGNAL; this covers everything else).
    std::signal(SIGPIPE, SIG_IGN);
    // Block the stop signals in every thread (they inherit the mask); one thread waits for
    // them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::optional<RoleSession> role;  // outlives the try: MPI must be up to abort the job
    try {
        tinfer::examples::check_draft_model_options(options.draft_model, options.speculative_tokens,
                                                    options.kv_cache_dtype, options.split);
        if (!options.draft_model.empty() && !options.role.empty())
            throw std::runtime_error("--draft-model cannot be combined with --role");
        tinfer::examples::check_device_options(options.device,
                                               {.kv_cache_dtype = options.kv_cache_dtype,
                                                .precision = options.precision,
                                                .draft_model = !options.draft_model.empty(),
                                                .split = options.split.split()});
        if (options.device == "cuda" && !options.role.empty())
            throw std::runtime_error(
                "--device cuda: --role (prefill/decode disaggregation over MPI) is not "
                "implemented on the CUDA backend yet; use --device cpu");
        if (options.split.split()) {
            // One split per run, and each refuses what it cannot carry, before MPI starts.
            char const* const flag = options.split.pipeline > 1 ? "--pp" : "--tp";
            if (options.split.tensor > 1 && options.split.pipeline > 1)
                throw std::runtime_error("--tp and --pp cannot be combined (one split per run)");
            if (!options.role.empty())
                throw std::runtime_error(std::string(flag) + " and --role cannot be combined");
            if (options.kv_cache_dtype != "fp32")
                throw std::runtime_error("--kv-cache-dtype " + options.kv_cache_dtype +
                                         " is not supported under " + flag + ": fp32 only");
        }
        if (!options.role.empty()) {
#if TINFER_WITH_MPI
            role.emplace(&argc, &argv, tinfer::distributed::serving_role_named(options.role));
#else
            throw std::runtime_error("--role needs serve built with MPI (libopenmpi-dev)");
#endif
        }
        auto file = tinfer::gguf::File::open(options.model);
        if (options.device == "cuda") {
            return tinfer::examples::with_cuda_engine(file, [&]<class Engine>() {
                return run<Engine>(options, stop_signals, std::move(file), nullptr);
            });
        }
        if (options.split.split()) {
            return tinfer::examples::with_parallel_engine<Serving>(
                file, options.split, "serve",
                [&]<class Engine>(tinfer::examples::LockstepRanks& ranks) {
                    return run<Engine>(options, stop_signals, std::move(file), nullptr, &ranks);
                });
        }
        return tinfer::model::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            if (!options.draft_model.empty())
                return run<tinfer::examples::DraftedServingEngineFor<Cfg>>(
                    options, stop_signals, std::move(file), role ? &*role : nullptr);
            return tinfer::kv::with_kv_codecs(options.kv_cache_dtype, [&]<class Codecs>() {
                return run<ServingEngineFor<Cfg, Codecs>>(options, stop_signals, std::move(file),
                                                          role ? &*role : nullptr);
            });
        });
    } catch (std::exception const& e) {
        std::cerr << "serve: " << e.what() << std::endl;
#if TINFER_WITH_MPI
        if (role) MPI_Abort(MPI_COMM_WORLD, 1);  // the other rank may be waiting on this one
#endif
        return 1;
    }
}
