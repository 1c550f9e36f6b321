// serve: an OpenAI-compatible HTTP server over tinfer's engine, for the OpenAI client
// libraries, curl and Prometheus.
//
//   POST /v1/completions, POST /v1/chat/completions   (JSON answers, or SSE with "stream")
//   GET /v1/models, GET /health, GET /metrics          (Prometheus text format)
//
// Threads: one engine thread runs Engine::serve() and every token callback; each HTTP
// connection runs on a pool thread. A request's callbacks push its events into a queue of its
// own that the connection's thread drains, writing JSON or SSE chunks. A client that hangs up
// is noticed (a failed write, or its socket reporting the hang-up) and its request aborted, so
// its KV blocks are freed at the engine's next step.
#include <pthread.h>
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
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/config/presets.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/model/shipped_presets.hpp>

#include "connection.hpp"
#include "openai_protocol.hpp"
#include "prometheus.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using serve::ApiError;
using serve::json;

using Serving =
    tinfer::sched::Scheduler<tinfer::sched::ContinuousBatching<64, 1024>,
                             tinfer::sched::ChunkedPrefill<256>, tinfer::sched::PreemptByRecompute,
                             tinfer::sched::FairShare>;
// The engine for one compiled-in shape (model/shipped_presets.hpp); the file chooses which.
template <tinfer::ModelConfig Cfg>
using ServingEngineFor =
    tinfer::Engine<tinfer::Llama<Cfg>, Serving, tinfer::Host, tinfer::PagedKv<>>;

// How long a waiting connection thread sleeps before it looks at its client and the server's
// state again: the delay before a hang-up or a shutdown is noticed.
constexpr auto poll_interval = 100ms;

struct Options {
    std::string model;
    std::string served_model_name;
    std::string host = "127.0.0.1";
    int port = 8000;
    int threads = 0;
    std::size_t kv_budget_mb = 256;
    int max_queue = 256;
    std::size_t max_body_bytes = std::size_t{1} << 20;
    int read_timeout_seconds = 10;
    int default_max_tokens = 512;
    std::string precision = "int8";
};

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

class EventChannel {
  public:
    void push(ChoiceEvent event) {
        {
            std::lock_guard lock(mutex_);
            events_.push_back(std::move(event));
        }
        ready_.notify_one();
    }

    // Everything queued, after waiting up to `wait` for the first event.
    std::vector<ChoiceEvent> take(Clock::duration wait) {
        std::unique_lock lock(mutex_);
        ready_.wait_for(lock, wait, [&] { return !events_.empty(); });
        std::vector<ChoiceEvent> taken(std::make_move_iterator(events_.begin()),
                                       std::make_move_iterator(events_.end()));
        events_.clear();
        return taken;
    }

  private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<ChoiceEvent> events_;
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

struct ChoiceState {
    tinfer::sched::RequestId id{};
    bool submitted = false;
    int prompt_tokens = 0;
    std::string text;
    int tokens = 0;
    std::vector<serve::TokenLogprobs> logprobs;
    std::size_t logprob_chars = 0;
    std::optional<tinfer::FinishReason> finish;
    std::string error;
};

// The engine requests of one HTTP request (its n choices for each prompt), from submission to
// the last event. Destroying it aborts whatever has not finished: a handler that returns early,
// a stream whose client went away.
template <class ServingEngine>
class Generation {
  public:
    Generation(ServingEngine& engine, serve::ServerMetrics& metrics,
               AdmissionLimit::Ticket admission, std::optional<int> client_socket)
        : engine_(engine),
          metrics_(metrics),
          admission_(std::move(admission)),
          client_socket_(client_socket) {}

    Generation(Generation const&) = delete;
    Generation& operator=(Generation const&) = delete;
    ~Generation() { abort_unfinished(); }

    // Submits every request; if one is refused, the others are aborted and the error rethrown.
    void submit(std::vector<tinfer::GenerationRequest> requests) {
        choices_.resize(requests.size());
        for (std::size_t i = 0; i < requests.size(); ++i) {
            int const prompt_tokens = static_cast<int>(requests[i].prompt_tokens.size());
            choices_[i].prompt_tokens = prompt_tokens;
            auto const arrival = Clock::now();
            // Runs on the engine thread; times the tokens before the client can see them.
            tinfer::TokenCallback callback = [channel = channel_, metrics = &metrics_, arrival,
                                              choice = static_cast<int>(i),
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
                channel->push({choice, event});
            };
            try {
                choices_[i].id = engine_.submit(std::move(requests[i]), std::move(callback));
            } catch (...) {
                abort_unfinished();
                throw;
            }
            choices_[i].submitted = true;
            metrics_.on_prompt(prompt_tokens);
        }
    }

    // The events that arrived within `wait`, folded per choice (a connection that fell behind
    // sends one chunk per choice, not one per token).
    std::vector<ChoiceUpdate> next(Clock::duration wait) {
        std::vector<ChoiceUpdate> updates;
        for (ChoiceEvent& e : channel_->take(wait)) {
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
    bool client_gone() const { return client_socket_ && serve::peer_hung_up(*client_socket_); }
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

    ServingEngine& engine_;
    serve::ServerMetrics& metrics_;
    AdmissionLimit::Ticket admission_;
    std::optional<int> client_socket_;
    std::shared_ptr<EventChannel> channel_ = std::make_shared<EventChannel>();
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

void write_json(httplib::Response& res, int status, json const& body) {
    res.status = status;
    res.set_content(serve::to_text(body), "application/json");
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

template <class ServingEngine>
class OpenAiServer {
    static constexpr int context_tokens = ServingEngine::config.max_context;

  public:
    OpenAiServer(ServingEngine& engine, Options const& options, serve::ServerMetrics& metrics,
                 ServerState& state)
        : engine_(engine),
          options_(options),
          metrics_(metrics),
          state_(state),
          admission_(options.max_queue, metrics),
          started_(std::time(nullptr)) {}

    void generate(httplib::Request const& req, httplib::Response& res, bool chat) {
        answering_errors(res, [&] {
            if (state_.stopping)
                throw ApiError(503, "the server is shutting down", "", "", "server_error");
            if (state_.engine_failed)
                throw ApiError(503, "the engine has failed", "", "", "server_error");
            json const body = serve::parse_body(req.body);
            Prepared p{.request = chat ? serve::parse_chat_request(body)
                                       : serve::parse_completion_request(body),
                       .id = random_id(chat ? "chatcmpl-" : "cmpl-"),
                       .created = static_cast<std::int64_t>(std::time(nullptr))};
            serve::OpenAiRequest const& r = p.request;
            if (!r.model.empty() && r.model != options_.served_model_name)
                throw ApiError(404,
                               "The model '" + r.model + "' does not exist; this server serves '" +
                                   options_.served_model_name + "'",
                               "model", "model_not_found");
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
                               "the server is at its limit of " +
                                   std::to_string(admission_.limit()) +
                                   " concurrent sequences; retry later",
                               "", "rate_limit_exceeded", "rate_limit_error");

            auto generation = std::make_shared<Generation<ServingEngine>>(
                engine_, metrics_, std::move(*ticket), serve::connection_socket(req));
            try {
                generation->submit(engine_requests(p));
            } catch (tinfer::RequestError const& e) {
                throw ApiError(400, e.what(), chat ? "messages" : "prompt");
            }
            if (r.stream)
                stream(res, std::move(p), std::move(generation));
            else
                answer(res, p, *generation);
        });
    }

    void health(httplib::Response& res) const {
        if (state_.engine_failed)
            write_json(res, 503, {{"status", "engine failed"}});
        else
            write_json(res, 200, {{"status", "ok"}});
    }

    void models(httplib::Response& res) const {
        write_json(res, 200,
                   {{"object", "list"},
                    {"data",
                     {{{"id", options_.served_model_name},
                       {"object", "model"},
                       {"created", static_cast<std::int64_t>(started_)},
                       {"owned_by", "tinfer"},
                       {"max_model_len", context_tokens}}}}});
    }

    template <class Body>
    static void answering_errors(httplib::Response& res, Body&& body) {
        try {
            body();
        } catch (ApiError const& e) {
            write_json(res, e.status, serve::error_object(e));
        } catch (tinfer::RequestError const& e) {
            write_json(res, 400, serve::error_object(e.what(), "invalid_request_error"));
        } catch (std::exception const& e) {
            write_json(res, 500, serve::error_object(e.what(), "server_error"));
        }
    }

  private:
    // Prompts to token ids exactly as the engine would (chat template with the generation
    // prompt), here on the connection's thread: the usage block needs the count, and the
    // engine thread is spared the work.
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
        int const room = context_tokens - longest;
        p.max_tokens = r.max_tokens.value_or(
            r.chat ? std::max(1, std::min(options_.default_max_tokens, room)) : 16);
        if (static_cast<std::int64_t>(longest) + p.max_tokens > context_tokens)
            throw ApiError(400,
                           "This model's maximum context length is " +
                               std::to_string(context_tokens) + " tokens; the request asks for " +
                               std::to_string(static_cast<std::int64_t>(longest) + p.max_tokens) +
                               " (" + std::to_string(longest) + " in the prompt, " +
                               std::to_string(p.max_tokens) + " to generate)",
                           r.max_tokens && longest < context_tokens ? "max_tokens" : prompt_field,
                           "context_length_exceeded");
    }

    std::vector<tinfer::GenerationRequest> engine_requests(Prepared const& p) const {
        serve::OpenAiRequest const& r = p.request;
        // Choice i of a prompt samples with seed + i: a seeded request repeats itself, and its
        // choices differ from each other.
        std::uint64_t const seed = r.seed.value_or(random_u64());
        std::vector<tinfer::GenerationRequest> requests;
        for (auto const& prompt : p.prompts) {
            for (int i = 0; i < r.n; ++i) {
                tinfer::GenerationRequest g{.prompt_tokens = prompt,
                                            .max_tokens = p.max_tokens,
                                            .stop = r.stop,
                                            .ignore_eos = r.ignore_eos,
                                            .sampling = r.sampling,
                                            .priority = r.priority,
                                            .tenant = tenant_of(r.user)};
                g.sampling.seed = seed + static_cast<std::uint64_t>(i);
                requests.push_back(std::move(g));
            }
        }
        return requests;
    }

    json logprobs_of(Prepared const& p, std::vector<serve::TokenLogprobs> const& tokens,
                     std::size_t offset) const {
        if (!p.request.sampling.logprobs) return nullptr;
        return p.request.chat ? serve::chat_logprobs(tokens)
                              : serve::completion_logprobs(tokens, offset);
    }

    // A non-streamed answer: waits for every choice, watching the client meanwhile.
    void answer(httplib::Response& res, Prepared const& p,
                Generation<ServingEngine>& generation) const {
        while (!generation.finished()) {
            // next() returns as soon as tokens arrive, so the client is looked at on every
            // pass, not only after a quiet interval: a busy engine is never quiet.
            bool const quiet = generation.next(poll_interval).empty();
            if (generation.client_gone())
                return;  // nobody to answer; ~Generation<ServingEngine> aborts
            if (!quiet) continue;
            if (state_.engine_failed)
                throw ApiError(500, "the engine has failed", "", "", "server_error");
            if (state_.stopping)
                throw ApiError(503, "the server is shutting down", "", "", "server_error");
        }
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
        write_json(res, 200,
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

    // A streamed answer: SSE chunks as tokens arrive, then the usage chunk if asked, then
    // [DONE]. httplib calls the provider until it calls sink.done() or returns false; false
    // (client gone, write failed, shutting down) drops the response and, with it, the
    // Generation<ServingEngine>, which aborts what is still running.
    void stream(httplib::Response& res, Prepared p,
                std::shared_ptr<Generation<ServingEngine>> generation) const {
        struct Stream {
            Prepared prepared;
            std::shared_ptr<Generation<ServingEngine>> generation;
            bool started = false;
        };
        auto s = std::make_shared<Stream>(
            Stream{.prepared = std::move(p), .generation = std::move(generation)});
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, s](std::size_t, httplib::DataSink& sink) {
                Prepared const& p = s->prepared;
                Generation<ServingEngine>& g = *s->generation;
                std::string out;
                if (!s->started) {
                    s->started = true;
                    // OpenAI's first chat chunk carries the role alone.
                    if (p.request.chat) {
                        json choices = json::array();
                        for (std::size_t i = 0; i < g.choices().size(); ++i)
                            choices.push_back({{"index", i},
                                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                                               {"logprobs", nullptr},
                                               {"finish_reason", nullptr}});
                        out += sse(chunk(p, std::move(choices)));
                    }
                }
                if (state_.stopping || state_.engine_failed || g.client_gone()) return false;
                for (ChoiceUpdate& u : g.next(poll_interval)) {
                    if (!u.error.empty())
                        out += sse(serve::error_object(u.error, "invalid_request_error"));
                    if (u.text.empty() && u.logprobs.empty() && !u.finish_reason) continue;
                    json choice{{"index", u.choice},
                                {"logprobs", logprobs_of(p, u.logprobs, u.logprob_offset)},
                                {"finish_reason",
                                 u.finish_reason ? json(*u.finish_reason) : json(nullptr)}};
                    if (p.request.chat)
                        choice["delta"] = {{"content", std::move(u.text)}};
                    else
                        choice["text"] = std::move(u.text);
                    out += sse(chunk(p, json::array({std::move(choice)})));
                }
                bool const done = g.finished();
                if (done) {
                    if (p.request.include_usage) {
                        std::int64_t completion_tokens = 0;
                        for (ChoiceState const& c : g.choices()) completion_tokens += c.tokens;
                        json last = chunk(p, json::array());
                        last["usage"] = serve::usage_object(p.prompt_tokens, completion_tokens);
                        out += sse(last);
                    }
                    out += "data: [DONE]\n\n";
                }
                if (!out.empty() && !sink.write(out.data(), out.size())) return false;
                if (done) sink.done();
                return true;
            });
    }

    ServingEngine& engine_;
    Options const& options_;
    serve::ServerMetrics& metrics_;
    ServerState& state_;
    AdmissionLimit admission_;
    std::time_t started_;
};

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
        metrics_.on_engine_step(
            {.running = static_cast<int>(engine_.scheduler().running().size()),
             .waiting = engine_.queued_requests(),
             .kv_usage = cache.total_blocks()
                             ? static_cast<double>(cache.used_blocks()) / cache.total_blocks()
                             : 0.0,
             .preemptions = engine_.metrics().summary().preemptions});
    }

  private:
    ServingEngine const& engine_;
    serve::ServerMetrics& metrics_;
    std::size_t drained_ = 0;
};

std::string error_message_for(int status, httplib::Request const& req, Options const& options) {
    switch (status) {
        case 400:
            return "malformed HTTP request";
        case 404:
            return "no route for " + req.method + " " + req.path;
        case 405:
            return "method " + req.method + " is not allowed on " + req.path;
        case 413:
            return "the request body exceeds the server's limit of " +
                   std::to_string(options.max_body_bytes) + " bytes (--max-body-bytes)";
        default:
            return "HTTP error " + std::to_string(status);
    }
}

template <class ServingEngine>
int run(Options const& options, sigset_t const& stop_signals, tinfer::gguf::File file) {
    ServingEngine engine(std::move(file), {.kv_budget_bytes = options.kv_budget_mb << 20,
                                           .threads = options.threads,
                                           .int8_activations = options.precision == "int8"});
    serve::ServerMetrics metrics(options.served_model_name);
    ServerState state;
    OpenAiServer<ServingEngine> api(engine, options, metrics, state);

    serve::HttpServer server;
    // One pool thread per connection for as long as it lives (a stream holds its thread), so
    // the pool has room for every admitted sequence plus the cheap requests beside them:
    // a request past the limit must reach its handler to get its 429 at once.
    int const http_threads = options.max_queue + 16;
    server.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
    server.set_payload_max_length(options.max_body_bytes);
    server.set_read_timeout(options.read_timeout_seconds, 0);
    server.set_tcp_nodelay(true);  // an SSE chunk per token must not wait for Nagle
    server.Post("/v1/completions", [&](httplib::Request const& req, httplib::Response& res) {
        api.generate(req, res, /*chat=*/false);
    });
    server.Post("/v1/chat/completions", [&](httplib::Request const& req, httplib::Response& res) {
        api.generate(req, res, /*chat=*/true);
    });
    server.Get("/v1/models",
               [&](httplib::Request const&, httplib::Response& res) { api.models(res); });
    server.Get("/health",
               [&](httplib::Request const&, httplib::Response& res) { api.health(res); });
    server.Get("/metrics", [&](httplib::Request const&, httplib::Response& res) {
        res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // Errors httplib raises itself (no route, body too large, bad request line) get the same
    // error object as the API's own.
    server.set_error_handler(httplib::Server::HandlerWithResponse(
        [&](httplib::Request const& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string const type = res.status == 404   ? "not_found_error"
                                     : res.status >= 500 ? "server_error"
                                                         : "invalid_request_error";
            std::string const code = res.status == 413 ? "payload_too_large" : "";
            // After a malformed or oversized request the rest of the stream cannot be trusted
            // (an unread body, a half-sent header): end the connection instead of keeping it.
            if (res.status == 400 || res.status == 413) res.set_header("Connection", "close");
            write_json(
                res, res.status,
                serve::error_object(error_message_for(res.status, req, options), type, "", code));
            return httplib::Server::HandlerResponse::Handled;
        }));
    server.set_exception_handler([](httplib::Request const&, httplib::Response& res,
                                    std::exception_ptr error) {
        OpenAiServer<ServingEngine>::answering_errors(res, [&] { std::rethrow_exception(error); });
    });
    server.set_logger([&](httplib::Request const&, httplib::Response const& res) {
        metrics.on_response(res.status);
    });

    int port = options.port;
    if (port == 0)
        port = server.bind_to_any_port(options.host);
    else if (!server.bind_to_port(options.host, port))
        port = -1;
    if (port < 0)
        throw std::runtime_error("cannot listen on " + options.host + ":" +
                                 std::to_string(options.port));
    server.widen_listen_backlog();

    std::atomic<bool> engine_stop{false};
    EngineObserver<ServingEngine> observer(engine, metrics);
    std::thread engine_thread([&] {
        try {
            engine.serve([&] {
                observer.publish();
                return engine_stop.load();
            });
        } catch (std::exception const& e) {
            std::cerr << "serve: the engine failed: " << e.what() << std::endl;
            state.engine_failed = true;
        }
    });
    // SIGINT/SIGTERM end the server from a thread of their own: httplib's stop() is not
    // async-signal-safe.
    std::thread([&state, &server, stop_signals] {
        int signal_number = 0;
        sigwait(&stop_signals, &signal_number);
        state.stopping = true;
        server.stop();
    }).detach();

    std::cout << "serve: listening on http://" << options.host << ":" << port << " (model "
              << options.served_model_name << ", " << options.max_queue << " concurrent sequences)"
              << std::endl;
    server.listen_after_bind();

    state.stopping = true;
    engine_stop = true;
    engine_thread.join();
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
        ->check(CLI::NonNegativeNumber);
    app.add_option("--precision", options.precision,
                   "Activations of the matrix products: int8 (quantized per block of 32, as "
                   "llama.cpp; faster) or f32 (exact)")
        ->check(CLI::IsMember({"int8", "f32"}))
        ->capture_default_str();
    app.add_option("--kv-budget-mb", options.kv_budget_mb, "KV cache size in MiB")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--max-queue", options.max_queue,
                   "Most sequences (running + waiting) at once; more get HTTP 429")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--max-body-bytes", options.max_body_bytes,
                   "Largest request body; larger ones get HTTP 413")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--read-timeout", options.read_timeout_seconds,
                   "Seconds a connection may stay silent while sending its request")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--default-max-tokens", options.default_max_tokens,
                   "Chat answers' length when the request sets no max_tokens")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    CLI11_PARSE(app, argc, argv);
    if (options.served_model_name.empty())
        options.served_model_name = std::filesystem::path(options.model).stem().string();

    // A write to a client that hung up must fail with EPIPE, not kill the process.
    std::signal(SIGPIPE, SIG_IGN);
    // Block the stop signals in every thread (they inherit the mask); one thread waits for
    // them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    try {
        auto file = tinfer::gguf::File::open(options.model);
        return tinfer::with_shipped_preset(file, [&]<tinfer::ModelConfig Cfg>() {
            return run<ServingEngineFor<Cfg>>(options, stop_signals, std::move(file));
        });
    } catch (std::exception const& e) {
        std::cerr << "serve: " << e.what() << std::endl;
        return 1;
    }
}
