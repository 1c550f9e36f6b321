#pragma once
// The OpenAI API's request and response bodies for /v1/completions and /v1/chat/completions:
// parsing with every field's type and range checked (a wrong one is a 400 naming the field, in
// OpenAI's error object), and the JSON of answers, stream chunks and logprobs.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <tinfer/kernels/sampling.hpp>
#include <tinfer/tokenizer/chat_template.hpp>

namespace serve {

using json = nlohmann::json;

// An error answered as {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError : std::runtime_error {
    ApiError(int status, std::string message, std::string param = {}, std::string code = {},
             std::string type = "invalid_request_error")
        : std::runtime_error(std::move(message)),
          status(status),
          type(std::move(type)),
          param(std::move(param)),
          code(std::move(code)) {}

    int status;
    std::string type;
    std::string param;  // the request field at fault; empty: none
    std::string code;   // a machine-readable reason; empty: none
};

inline json error_object(std::string const& message, std::string const& type,
                         std::string const& param = {}, std::string const& code = {}) {
    auto const or_null = [](std::string const& s) { return s.empty() ? json(nullptr) : json(s); };
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", or_null(param)},
              {"code", or_null(code)}}}};
}

inline json error_object(ApiError const& e) {
    return error_object(e.what(), e.type, e.param, e.code);
}

// Model output may split a UTF-8 character across tokens (a logprob's token text); such bytes
// become U+FFFD instead of an exception from the serializer.
inline std::string to_text(json const& value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Parses a request body; anything but a JSON object is a 400.
inline json parse_body(std::string const& body) {
    json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded())
        throw ApiError(400, "the request body is not valid JSON (RFC 8259, UTF-8)", "",
                       "invalid_json");
    if (!parsed.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return parsed;
}

// Typed, range-checked access to a request's fields; null counts as absent, as OpenAI's
// clients send it for unset options.
class Fields {
  public:
    explicit Fields(json const& body) : body_(body) {}

    json const* find(char const* name) const {
        auto const it = body_.find(name);
        return it == body_.end() || it->is_null() ? nullptr : &*it;
    }

    std::optional<bool> boolean(char const* name) const {
        json const* v = find(name);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) throw ApiError(400, field(name) + " must be a boolean", name);
        return v->get<bool>();
    }

    std::optional<std::int64_t> integer(char const* name, std::int64_t min,
                                        std::int64_t max) const {
        json const* v = find(name);
        if (!v) return std::nullopt;
        return integer_value(*v, name, min, max);
    }

    std::optional<double> number(char const* name, double min, double max) const {
        json const* v = find(name);
        if (!v) return std::nullopt;
        if (!v->is_number()) throw ApiError(400, field(name) + " must be a number", name);
        double const value = v->get<double>();
        if (!(value >= min && value <= max))
            throw ApiError(400,
                           field(name) + " must be in [" + show(min) + ", " + show(max) +
                               "]; got " + show(value),
                           name);
        return value;
    }

    std::optional<std::string> string(char const* name) const {
        json const* v = find(name);
        if (!v) return std::nullopt;
        if (!v->is_string()) throw ApiError(400, field(name) + " must be a string", name);
        return v->get<std::string>();
    }

    static std::int64_t integer_value(json const& v, std::string const& name, std::int64_t min,
                                      std::int64_t max) {
        if (!v.is_number_integer()) throw ApiError(400, field(name) + " must be an integer", name);
        // nlohmann stores every non-negative integer as unsigned, which may exceed int64:
        // compare those unsigned first.
        bool const unsigned_too_large =
            v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
        if (unsigned_too_large || v.get<std::int64_t>() > max || v.get<std::int64_t>() < min)
            throw ApiError(400,
                           field(name) + " must be in [" + std::to_string(min) + ", " +
                               std::to_string(max) + "]; got " + v.dump(),
                           name);
        return v.get<std::int64_t>();
    }

  private:
    static std::string field(std::string const& name) { return "'" + name + "'"; }
    static std::string show(double v) {
        std::ostringstream out;
        out << v;
        return out.str();
    }
    json const& body_;
};

// A completion prompt: text, or token ids.
struct PromptInput {
    std::string text;
    std::vector<std::int32_t> tokens;
    bool is_tokens = false;
};

// Both endpoints' requests, read into the engine's terms.
struct OpenAiRequest {
    bool chat = false;
    std::string model;                               // empty: the served model
    std::vector<PromptInput> prompts;                // completions
    std::vector<tinfer::tok::ChatMessage> messages;  // chat
    std::optional<int> max_tokens;                   // absent: the endpoint's default
    int n = 1;
    bool stream = false;
    bool include_usage = false;
    std::vector<std::string> stop;
    std::optional<std::uint64_t> seed;
    tinfer::kernels::SamplingParams sampling;  // seed set per choice later
    bool ignore_eos = false;
    std::string user;
    int priority = 0;
    // Structured output: a JSON Schema's text (response_format json_schema, or {"type":
    // "object"} for json_object), or a grammar's (the "grammar" field, llama-server's); at most
    // one of them. `constraint_field` names the field they came from, for errors.
    std::optional<std::string> json_schema;
    std::optional<std::string> grammar;
    std::string constraint_field;
};

inline constexpr int max_choices = 64;
inline constexpr int max_stop_strings = 16;

// Nothing is silently ignored: a top-level field this server does not act on is a 400 naming
// it. Fields OpenAI documents but the server does not implement say why; any other field is
// refused as unknown, as a strict server does (a typo such as "max_token" would otherwise run
// with the default). Null counts as absent, as everywhere else.
struct Unsupported {
    char const* name;
    char const* why;
};

inline constexpr Unsupported unsupported_fields[] = {
    {"tools", "tool calling is not implemented"},
    {"tool_choice", "tool calling is not implemented (only \"none\" is accepted)"},
    {"parallel_tool_calls", "tool calling is not implemented"},
    {"functions", "function calling is not implemented"},
    {"function_call", "function calling is not implemented"},
    {"audio", "audio output is not implemented"},
    {"modalities", "only text output is implemented"},
    {"prediction", "predicted outputs are not implemented"},
    {"web_search_options", "web search is not implemented"},
    {"reasoning_effort", "the served model has no reasoning modes"},
    {"verbosity", "the served model has no verbosity setting"},
    {"service_tier", "this server has one service tier"},
    {"store", "this server stores no completions (only false is accepted)"},
    {"metadata", "this server stores no completions, so has nothing to tag"},
    {"moderation", "moderation is not implemented"},
    {"prompt_cache_key", "prefix caching is automatic here; it takes no key"},
    {"prompt_cache_options", "prefix caching is automatic here; it takes no options"},
    {"prompt_cache_retention", "prefix caching is automatic here; it takes no retention"},
    {"safety_identifier", "not implemented; 'user' names a tenant for fair sharing"},
    {"echo", "echoing the prompt is not implemented (only false is accepted)"},
    {"suffix", "insertion (suffix) is not implemented"},
    {"best_of", "best_of other than n is not implemented"},
    {"logprobs", "not available on this endpoint"},
    {"top_logprobs", "not available on this endpoint"},
    {"max_completion_tokens", "not available on this endpoint; use max_tokens"},
    {"messages", "not available on this endpoint"},
    {"prompt", "not available on this endpoint"},
};

// Fields both generation endpoints act on (OpenAI's, and vLLM's sampling extensions).
inline constexpr char const* common_fields[] = {"model",
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
                                                "ignore_eos",
                                                "user",
                                                "priority",
                                                "response_format",
                                                "grammar"};
inline constexpr char const* completion_fields[] = {"prompt", "max_tokens", "logprobs", "echo",
                                                    "best_of"};
inline constexpr char const* chat_fields[] = {"messages",   "max_completion_tokens", "max_tokens",
                                              "logprobs",   "top_logprobs",          "store",
                                              "tool_choice"};

// Refuses every non-null field of `body` outside `common` and `own`.
inline void refuse_unhandled_fields(json const& body, std::span<char const* const> own) {
    auto const listed = [](std::span<char const* const> names, std::string const& key) {
        for (char const* n : names)
            if (key == n) return true;
        return false;
    };
    for (auto const& [key, value] : body.items()) {
        if (value.is_null() || listed(common_fields, key) || listed(own, key)) continue;
        for (Unsupported const& u : unsupported_fields)
            if (key == u.name)
                throw ApiError(400, "'" + key + "' is not supported: " + u.why, key,
                               "unsupported_parameter");
        throw ApiError(400, "unknown field '" + key + "'", key, "unknown_parameter");
    }
}

// Fields honoured only at their "off" value: anything else is refused naming the field.
inline void refuse_unless(bool is_off, char const* name) {
    if (is_off) return;
    for (Unsupported const& u : unsupported_fields)
        if (std::string_view(name) == u.name)
            throw ApiError(400, "'" + std::string(name) + "' is not supported: " + u.why, name,
                           "unsupported_parameter");
    throw ApiError(400, "'" + std::string(name) + "' is not supported", name,
                   "unsupported_parameter");
}

namespace detail {

// response_format: {"type": "text"} (nothing to do), {"type": "json_object"} (any JSON
// object), {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}; and the "grammar" field. A schema keyword outside the compiler's subset is
// refused later, when it is compiled, naming the keyword.
inline void read_structured_output(Fields const& f, OpenAiRequest& r) {
    if (json const* format = f.find("response_format")) {
        auto const bad = [](std::string const& why) {
            return ApiError(400, "'response_format' " + why, "response_format");
        };
        if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string())
            throw bad("must be an object with a string 'type'");
        std::string const type = (*format)["type"].get<std::string>();
        for (auto const& [key, value] : format->items())
            if (key != "type" && !(key == "json_schema" && type == "json_schema") &&
                !value.is_null())
                throw bad("of type '" + type + "' takes no '" + key + "'");
        if (type == "json_object") {
            r.json_schema = R"({"type":"object"})";
        } else if (type == "json_schema") {
            json const* spec = Fields(*format).find("json_schema");
            if (!spec || !spec->is_object())
                throw bad("of type 'json_schema' needs a 'json_schema' object");
            Fields const fields(*spec);
            // The name and description label the schema for the model in OpenAI's service; here
            // the grammar enforces it, so they change nothing. strict: the grammar always is.
            fields.string("name");
            fields.string("description");
            fields.boolean("strict");
            for (auto const& [key, value] : spec->items())
                if (key != "name" && key != "description" && key != "strict" && key != "schema" &&
                    !value.is_null())
                    throw bad("'json_schema' takes no '" + key + "'");
            json const* schema = fields.find("schema");
            // OpenAI's default for an absent schema is any JSON value.
            r.json_schema = schema ? schema->dump() : std::string("{}");
            if (schema && !schema->is_object()) throw bad("'json_schema.schema' must be an object");
        } else if (type != "text") {
            throw bad("has the unknown type '" + type +
                      "' (text, json_object and json_schema are supported)");
        }
        if (r.json_schema) r.constraint_field = "response_format";
    }
    if (auto grammar = f.string("grammar")) {
        if (r.json_schema)
            throw ApiError(400, "'grammar' and a JSON 'response_format' cannot be combined",
                           "grammar");
        if (grammar->empty()) throw ApiError(400, "'grammar' must not be empty", "grammar");
        r.grammar = std::move(*grammar);
        r.constraint_field = "grammar";
    }
}

inline void read_common(Fields const& f, OpenAiRequest& r) {
    r.model = f.string("model").value_or("");
    r.n = static_cast<int>(f.integer("n", 1, max_choices).value_or(1));
    r.stream = f.boolean("stream").value_or(false);
    if (json const* options = f.find("stream_options")) {
        if (!options->is_object())
            throw ApiError(400, "'stream_options' must be an object", "stream_options");
        if (!r.stream)
            throw ApiError(400, "'stream_options' is only allowed with 'stream': true",
                           "stream_options");
        r.include_usage = Fields(*options).boolean("include_usage").value_or(false);
        for (auto const& [key, value] : options->items())
            if (key != "include_usage" && !value.is_null())
                throw ApiError(400, "'stream_options." + key + "' is not supported",
                               "stream_options", "unsupported_parameter");
    }
    if (json const* stop = f.find("stop")) {
        if (stop->is_string()) {
            r.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            if (stop->size() > max_stop_strings)
                throw ApiError(
                    400, "'stop' holds at most " + std::to_string(max_stop_strings) + " strings",
                    "stop");
            for (json const& s : *stop) {
                if (!s.is_string())
                    throw ApiError(400, "'stop' must be a string or a list of strings", "stop");
                r.stop.push_back(s.get<std::string>());
            }
        } else {
            throw ApiError(400, "'stop' must be a string or a list of strings", "stop");
        }
        for (std::string const& s : r.stop)
            if (s.empty()) throw ApiError(400, "'stop' strings must not be empty", "stop");
    }
    if (auto const seed = f.integer("seed", std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max()))
        r.seed = static_cast<std::uint64_t>(*seed);

    auto& s = r.sampling;
    s.temperature = static_cast<float>(f.number("temperature", 0, 2).value_or(1));
    s.top_p = static_cast<float>(f.number("top_p", 0, 1).value_or(1));
    if (s.top_p <= 0) throw ApiError(400, "'top_p' must be greater than 0", "top_p");
    // top_k: vLLM's extension; -1 and 0 both turn it off.
    auto const top_k = f.integer("top_k", -1, std::numeric_limits<std::int32_t>::max());
    s.top_k = top_k && *top_k > 0 ? static_cast<int>(*top_k) : 0;
    s.min_p = static_cast<float>(f.number("min_p", 0, 1).value_or(0));
    s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2, 2).value_or(0));
    s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2, 2).value_or(0));
    s.repetition_penalty = static_cast<float>(
        f.number("repetition_penalty", std::numeric_limits<double>::min(), 10).value_or(1));
    if (json const* bias = f.find("logit_bias")) {
        if (!bias->is_object())
            throw ApiError(400, "'logit_bias' must map token ids to numbers", "logit_bias");
        for (auto const& [key, value] : bias->items()) {
            std::int32_t token = -1;
            auto const [end, error] = std::from_chars(key.data(), key.data() + key.size(), token);
            if (error != std::errc{} || end != key.data() + key.size() || token < 0)
                throw ApiError(400, "'logit_bias' keys must be token ids; got '" + key + "'",
                               "logit_bias");
            if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
                throw ApiError(400, "'logit_bias' values must be numbers in [-100, 100]",
                               "logit_bias");
            s.logit_bias.emplace_back(token, value.get<float>());
        }
    }
    r.ignore_eos = f.boolean("ignore_eos").value_or(false);
    read_structured_output(f, r);
    if (r.ignore_eos && (r.json_schema || r.grammar))
        throw ApiError(400,
                       "'ignore_eos' cannot be combined with structured output: a complete "
                       "output ends with an end token",
                       "ignore_eos");
    r.user = f.string("user").value_or("");
    // The serving scheduler orders its queue by FairShare, not by priority: only the default
    // is honoured.
    r.priority = static_cast<int>(f.integer("priority", std::numeric_limits<std::int32_t>::min(),
                                            std::numeric_limits<std::int32_t>::max())
                                      .value_or(0));
    if (r.priority != 0)
        throw ApiError(400,
                       "'priority' is not supported: this server's queue order is fair share "
                       "between users, not priority (only 0 is accepted)",
                       "priority", "unsupported_parameter");
}

inline std::vector<std::int32_t> token_list(json const& list, char const* name) {
    std::vector<std::int32_t> tokens;
    tokens.reserve(list.size());
    for (json const& t : list)
        tokens.push_back(static_cast<std::int32_t>(
            Fields::integer_value(t, name, 0, std::numeric_limits<std::int32_t>::max())));
    return tokens;
}

inline std::string message_content(json const& content) {
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        throw ApiError(400, "a message's 'content' must be a string or a list of text parts",
                       "messages");
    std::string text;
    for (json const& part : content) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string())
            throw ApiError(400,
                           "only text content parts ({\"type\": \"text\", \"text\": ...}) "
                           "are supported",
                           "messages");
        text += part["text"].get<std::string>();
    }
    return text;
}

}  // namespace detail

inline OpenAiRequest parse_completion_request(json const& body) {
    Fields const f(body);
    refuse_unhandled_fields(body, completion_fields);
    OpenAiRequest r;
    detail::read_common(f, r);
    json const* prompt = f.find("prompt");
    if (!prompt) throw ApiError(400, "'prompt' is required", "prompt");
    auto const bad_prompt = [] {
        return ApiError(400,
                        "'prompt' must be a string, a list of strings, a list of token ids or a "
                        "list of lists of token ids",
                        "prompt");
    };
    if (prompt->is_string()) {
        r.prompts.push_back({.text = prompt->get<std::string>()});
    } else if (prompt->is_array() && !prompt->empty()) {
        if ((*prompt)[0].is_number()) {
            r.prompts.push_back(
                {.tokens = detail::token_list(*prompt, "prompt"), .is_tokens = true});
        } else {
            for (json const& p : *prompt) {
                if (p.is_string())
                    r.prompts.push_back({.text = p.get<std::string>()});
                else if (p.is_array())
                    r.prompts.push_back(
                        {.tokens = detail::token_list(p, "prompt"), .is_tokens = true});
                else
                    throw bad_prompt();
            }
        }
    } else {
        throw bad_prompt();
    }
    if (r.prompts.size() > max_choices)
        throw ApiError(400, "at most " + std::to_string(max_choices) + " prompts per request",
                       "prompt");
    if (auto const m = f.integer("max_tokens", 1, std::numeric_limits<std::int32_t>::max()))
        r.max_tokens = static_cast<int>(*m);
    // Legacy completions: `logprobs` is the number of alternatives to report.
    if (auto const k = f.integer("logprobs", 0, tinfer::kernels::max_top_logprobs)) {
        r.sampling.logprobs = true;
        r.sampling.top_logprobs = static_cast<int>(*k);
    }
    refuse_unless(!f.boolean("echo").value_or(false), "echo");
    auto const best_of = f.integer("best_of", 1, max_choices);
    refuse_unless(!best_of || *best_of == r.n, "best_of");
    return r;
}

inline OpenAiRequest parse_chat_request(json const& body) {
    Fields const f(body);
    refuse_unhandled_fields(body, chat_fields);
    OpenAiRequest r;
    r.chat = true;
    detail::read_common(f, r);
    refuse_unless(!f.boolean("store").value_or(false), "store");
    if (json const* choice = f.find("tool_choice")) refuse_unless(*choice == "none", "tool_choice");
    json const* messages = f.find("messages");
    if (!messages) throw ApiError(400, "'messages' is required", "messages");
    if (!messages->is_array() || messages->empty())
        throw ApiError(400, "'messages' must be a non-empty list of messages", "messages");
    for (json const& m : *messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw ApiError(400, "every message must be an object with a string 'role'", "messages");
        std::string role = m["role"].get<std::string>();
        if (role == "developer") role = "system";  // OpenAI's newer name for the same role
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
            throw ApiError(400, "unknown message role '" + role + "'", "messages");
        // The chat template sees role and content only: a name, tool calls or a refusal
        // would be dropped, so they are refused.
        for (auto const& [key, value] : m.items())
            if (key != "role" && key != "content" && !value.is_null())
                throw ApiError(400, "a message's '" + key + "' is not supported", "messages",
                               "unsupported_parameter");
        r.messages.push_back(
            {std::move(role), detail::message_content(m.value("content", json()))});
    }
    // max_completion_tokens is the newer name; both are accepted, but not two different
    // values (which one would win is a guess).
    for (char const* name : {"max_completion_tokens", "max_tokens"})
        if (auto const m = f.integer(name, 1, std::numeric_limits<std::int32_t>::max())) {
            if (r.max_tokens && *r.max_tokens != *m)
                throw ApiError(400,
                               "'max_tokens' and 'max_completion_tokens' differ; send one of "
                               "them",
                               "max_tokens");
            r.max_tokens = static_cast<int>(*m);
        }
    bool const logprobs = f.boolean("logprobs").value_or(false);
    auto const top = f.integer("top_logprobs", 0, tinfer::kernels::max_top_logprobs);
    if (top && !logprobs)
        throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.sampling.logprobs = logprobs;
    r.sampling.top_logprobs = static_cast<int>(top.value_or(0));
    return r;
}

// vLLM's /tokenize: {"prompt": text} or {"messages": [...]} (rendered with the chat
// template), with add_special_tokens (BOS/EOS as the file says; default true for both, since
// the generation endpoints tokenize both that way and the count should equal their usage) and
// add_generation_prompt (messages only).
struct TokenizeRequest {
    std::string model;
    std::optional<std::string> prompt;
    std::vector<tinfer::tok::ChatMessage> messages;
    bool add_special_tokens = true;
    bool add_generation_prompt = true;
};

inline TokenizeRequest parse_tokenize_request(json const& body) {
    Fields const f(body);
    static constexpr char const* fields[] = {"model", "prompt", "messages", "add_special_tokens",
                                             "add_generation_prompt"};
    for (auto const& [key, value] : body.items()) {
        if (value.is_null() || std::ranges::find(fields, key) != std::end(fields)) continue;
        throw ApiError(400, "unknown field '" + key + "'", key, "unknown_parameter");
    }
    TokenizeRequest r;
    r.model = f.string("model").value_or("");
    r.prompt = f.string("prompt");
    bool const has_messages = f.find("messages") != nullptr;
    if (r.prompt.has_value() == has_messages)
        throw ApiError(400, "exactly one of 'prompt' (a string) and 'messages' is required",
                       "prompt");
    if (has_messages) r.messages = parse_chat_request({{"messages", body["messages"]}}).messages;
    r.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
    r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
    return r;
}

// vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}.
struct DetokenizeRequest {
    std::string model;
    std::vector<std::int32_t> tokens;
};

inline DetokenizeRequest parse_detokenize_request(json const& body) {
    Fields const f(body);
    for (auto const& [key, value] : body.items())
        if (!value.is_null() && key != "model" && key != "tokens")
            throw ApiError(400, "unknown field '" + key + "'", key, "unknown_parameter");
    DetokenizeRequest r;
    r.model = f.string("model").value_or("");
    json const* tokens = f.find("tokens");
    if (!tokens || !tokens->is_array())
        throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens");
    r.tokens = detail::token_list(*tokens, "tokens");
    return r;
}

// One generated token's log-probabilities, with the token spelled out.
struct TokenLogprobs {
    std::string token;
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;
};

inline json bytes_of(std::string const& s) {
    json bytes = json::array();
    for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
    return bytes;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}.
inline json chat_logprobs(std::vector<TokenLogprobs> const& tokens) {
    json content = json::array();
    for (TokenLogprobs const& t : tokens) {
        json top = json::array();
        for (auto const& [token, logprob] : t.top)
            top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", bytes_of(token)}});
        content.push_back({{"token", t.token},
                           {"logprob", t.logprob},
                           {"bytes", bytes_of(t.token)},
                           {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
}

// Legacy completions: parallel lists; `text_offset` counts from the start of the choice's text.
inline json completion_logprobs(std::vector<TokenLogprobs> const& tokens, std::size_t offset) {
    json names = json::array(), logprobs = json::array(), tops = json::array(),
         offsets = json::array();
    for (TokenLogprobs const& t : tokens) {
        names.push_back(t.token);
        logprobs.push_back(t.logprob);
        json top = json::object();
        for (auto const& [token, logprob] : t.top) top[token] = logprob;
        tops.push_back(std::move(top));
        offsets.push_back(offset);
        offset += t.token.size();
    }
    return {{"tokens", std::move(names)},
            {"token_logprobs", std::move(logprobs)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

inline json usage_object(std::int64_t prompt_tokens, std::int64_t completion_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace serve
