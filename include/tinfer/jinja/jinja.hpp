#pragma once
// The subset of Jinja that model chat templates are written in (tokenizer.chat_template),
// interpreted as Hugging Face transformers runs it: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loop-control extension (break/continue), the globals
// raise_exception and strftime_now, and transformers' own tojson (no HTML escaping, keys in
// insertion order). The tests render SmolLM2's, Gemma 3's, Llama 3.2's and Qwen2.5's templates
// here and with the jinja2 package and compare the bytes.
//
// Supported: text, {{ }}, {% %}, {# #}, whitespace control (-, +); if/elif/else, for (with
// `if` filter, `else`, tuple unpacking, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem), set (name, namespace attribute, block set), break, continue; literals
// (strings with Python escapes, integers, floats, true/false/none in both spellings, lists,
// dicts), names, .attr, [item], slices, and/or/not, comparisons, in / not in, + - * / // % **,
// ~, conditional expressions; filters, tests, methods and functions listed in the tables
// below. Anything else (macro, call, include, extends, block, filter blocks, raw, unknown
// filters, tests, methods or functions) is refused when the template is parsed, with the
// construct and its line in the message, so a template is never rendered half-understood.
//
// Strings are UTF-8 and measured in code points, as Python does (length, slices, indexing,
// trim's Unicode whitespace); upper/lower/capitalize/title change ASCII letters only.
// Rendering is bounded: a step budget, an output limit and a range() limit make a hostile
// template fail with tinfer::RequestError instead of hanging or exhausting memory.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/unicode.hpp>

namespace tinfer::jinja {

struct TemplateValue;
using List = std::vector<TemplateValue>;
using Dict = std::vector<std::pair<std::string, TemplateValue>>;  // insertion order, as Python's dict

struct TemplateValue {
    enum class Kind : std::uint8_t {
        undefined,
        none,
        boolean,
        integer,
        real,
        string,
        list,
        dict,
        ns,
        function
    };
    Kind kind = Kind::undefined;
    bool boolean = false;
    std::int64_t integer = 0;
    double real = 0;
    std::string string;  // a string's text; an undefined value's name (for error messages)
    std::shared_ptr<List> list;
    std::shared_ptr<Dict> dict;  // a dict's or a namespace's entries

    static TemplateValue undefined(std::string name = {}) {
        TemplateValue v;
        v.string = std::move(name);
        return v;
    }
    static TemplateValue none() { return with_kind(Kind::none); }
    static TemplateValue from(bool b) {
        TemplateValue v = with_kind(Kind::boolean);
        v.boolean = b;
        return v;
    }
    static TemplateValue from(std::int64_t i) {
        TemplateValue v = with_kind(Kind::integer);
        v.integer = i;
        return v;
    }
    static TemplateValue from(int i) { return from(static_cast<std::int64_t>(i)); }
    static TemplateValue from(double d) {
        TemplateValue v = with_kind(Kind::real);
        v.real = d;
        return v;
    }
    static TemplateValue from(std::string s) {
        TemplateValue v = with_kind(Kind::string);
        v.string = std::move(s);
        return v;
    }
    static TemplateValue from(std::string_view s) { return from(std::string(s)); }
    static TemplateValue from(char const* s) { return from(std::string(s)); }
    static TemplateValue from(List l) {
        TemplateValue v = with_kind(Kind::list);
        v.list = std::make_shared<List>(std::move(l));
        return v;
    }
    static TemplateValue from(Dict d) {
        TemplateValue v = with_kind(Kind::dict);
        v.dict = std::make_shared<Dict>(std::move(d));
        return v;
    }
    static TemplateValue make_namespace(Dict d) {
        TemplateValue v = from(std::move(d));
        v.kind = Kind::ns;
        return v;
    }

    bool is(Kind k) const { return kind == k; }
    bool is_number() const {
        return kind == Kind::integer || kind == Kind::real || kind == Kind::boolean;
    }

    TemplateValue const* find(std::string_view key) const {
        if (!dict) return nullptr;
        for (auto const& [k, v] : *dict)
            if (k == key) return &v;
        return nullptr;
    }

  private:
    static TemplateValue with_kind(Kind k) {
        TemplateValue v;
        v.kind = k;
        return v;
    }
};

// Where a template refers to strftime_now: the time it formats (transformers: the local time).
struct RenderLimits {
    std::uint64_t max_steps = 10'000'000;      // expression and statement evaluations
    std::size_t max_output_bytes = 16u << 20;  // also the cap on any one string built
    std::int64_t max_range = 100'000;          // jinja2's sandbox cap on range()
};

namespace detail {

// ---------------------------------------------------------------- UTF-8 and Python's str ----

// The code point starting at s[i] and its length in bytes, as decode_utf8 (core/unicode.hpp)
// reads it. A byte that does not start a well-formed sequence (a stray continuation byte, a
// truncated, overlong or otherwise broken sequence) is a unit of its own, so ill-formed text is
// measured, sliced and trimmed one byte per such unit, and decodes past U+10FFFF, so that no
// test (a space?) mistakes it for a character: a stray 0xA0 byte is not U+00A0, nor the
// overlong C0 9F U+001F.
inline std::pair<std::uint32_t, std::size_t> decode_at(std::string_view s, std::size_t i) {
    Utf8Unit const unit = decode_utf8(s, i);
    if (!unit.valid) return {0x110000 + static_cast<unsigned char>(s[i]), 1};
    return {unit.code_point, unit.length};
}

// Where each code point (unit, above) of `s` starts.
inline std::vector<std::size_t> code_point_starts(std::string_view s) {
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < s.size(); i += decode_at(s, i).second) starts.push_back(i);
    return starts;
}

inline std::size_t code_point_count(std::string_view s) {
    return code_point_starts(s).size();
}

// Python's str.isspace() code points: what str.strip() (Jinja's trim) removes.
inline bool python_space(std::uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

inline std::string strip(std::string_view s, bool left, bool right,
                         std::optional<std::string_view> chars = std::nullopt) {
    auto const starts = code_point_starts(s);
    auto const strippable = [&](std::size_t k) {
        std::size_t const begin = starts[k];
        std::size_t const end = k + 1 < starts.size() ? starts[k + 1] : s.size();
        if (chars) {
            std::string_view const cp = s.substr(begin, end - begin);
            for (std::size_t at = 0; (at = chars->find(cp, at)) != std::string_view::npos; ++at) {
                bool const whole = (static_cast<unsigned char>((*chars)[at]) & 0xC0) != 0x80;
                if (whole) return true;
            }
            return false;
        }
        return python_space(decode_at(s, begin).first);
    };
    std::size_t first = 0, last = starts.size();
    if (left)
        while (first < last && strippable(first)) ++first;
    if (right)
        while (last > first && strippable(last - 1)) --last;
    if (first == last) return {};
    std::size_t const begin = starts[first];
    std::size_t const end = last < starts.size() ? starts[last] : s.size();
    return std::string(s.substr(begin, end - begin));
}

inline std::string ascii_case(std::string s, bool upper) {
    for (char& c : s) {
        if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return s;
}

// Python's repr() of a float.
inline std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buffer[64];
    double const magnitude = std::fabs(d);
    bool const fixed = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e16);
    auto const [end, ec] =
        std::to_chars(buffer, buffer + sizeof buffer, d,
                      fixed ? std::chars_format::fixed : std::chars_format::scientific);
    std::string text(buffer, end);
    if (fixed && text.find('.') == std::string::npos) text += ".0";
    if (!fixed) {  // Python writes at least two exponent digits: 1e-05, 1e+16
        auto const e = text.find('e');
        std::string mantissa = text.substr(0, e), exponent = text.substr(e + 2);
        if (exponent.size() < 2) exponent.insert(0, "0");
        text = mantissa + "e" + text[e + 1] + exponent;
    }
    return text;
}

inline std::string string_repr(std::string_view s) {
    char const quote =
        s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"'
                                                                                        : '\'';
    std::string out(1, quote);
    for (char c : s) {
        if (c == quote || c == '\\')
            out += '\\', out += c;
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
            static constexpr char digits[] = "0123456789abcdef";
            out += "\\x";
            out += digits[(c >> 4) & 15];
            out += digits[c & 15];
        } else
            out += c;
    }
    return out + quote;
}

[[noreturn]] inline void fail(std::string const& message) {
    throw RequestError("chat template: " + message);
}

inline char const* kind_name(TemplateValue const& v) {
    switch (v.kind) {
        case TemplateValue::Kind::undefined:
            return "undefined";
        case TemplateValue::Kind::none:
            return "none";
        case TemplateValue::Kind::boolean:
            return "bool";
        case TemplateValue::Kind::integer:
            return "int";
        case TemplateValue::Kind::real:
            return "float";
        case TemplateValue::Kind::string:
            return "str";
        case TemplateValue::Kind::list:
            return "list";
        case TemplateValue::Kind::dict:
            return "dict";
        case TemplateValue::Kind::ns:
            return "namespace";
        case TemplateValue::Kind::function:
            return "function";
    }
    return "?";
}

std::string repr(TemplateValue const& v);

// Python's str() of a value, as {{ }} and ~ print it; an undefined value prints as nothing.
inline std::string to_text(TemplateValue const& v) {
    switch (v.kind) {
        case TemplateValue::Kind::undefined:
            return {};
        case TemplateValue::Kind::none:
            return "None";
        case TemplateValue::Kind::boolean:
            return v.boolean ? "True" : "False";
        case TemplateValue::Kind::integer:
            return std::to_string(v.integer);
        case TemplateValue::Kind::real:
            return float_repr(v.real);
        case TemplateValue::Kind::string:
            return v.string;
        default:
            return repr(v);
    }
}

inline std::string repr(TemplateValue const& v) {
    switch (v.kind) {
        case TemplateValue::Kind::string:
            return string_repr(v.string);
        case TemplateValue::Kind::list: {
            std::string out = "[";
            for (std::size_t i = 0; i < v.list->size(); ++i)
                out += (i ? ", " : "") + repr((*v.list)[i]);
            return out + "]";
        }
        case TemplateValue::Kind::dict: {
            std::string out = "{";
            for (std::size_t i = 0; i < v.dict->size(); ++i)
                out += (i ? ", " : "") + string_repr((*v.dict)[i].first) + ": " +
                       repr((*v.dict)[i].second);
            return out + "}";
        }
        case TemplateValue::Kind::ns:
            return "<Namespace>";
        case TemplateValue::Kind::function:
            return "<function " + v.string + ">";
        default:
            return to_text(v);
    }
}

inline bool truthy(TemplateValue const& v) {
    switch (v.kind) {
        case TemplateValue::Kind::undefined:
        case TemplateValue::Kind::none:
            return false;
        case TemplateValue::Kind::boolean:
            return v.boolean;
        case TemplateValue::Kind::integer:
            return v.integer != 0;
        case TemplateValue::Kind::real:
            return v.real != 0;
        case TemplateValue::Kind::string:
            return !v.string.empty();
        case TemplateValue::Kind::list:
            return !v.list->empty();
        case TemplateValue::Kind::dict:
            return !v.dict->empty();
        case TemplateValue::Kind::ns:
        case TemplateValue::Kind::function:
            return true;
    }
    return false;
}

inline double as_double(TemplateValue const& v) {
    return v.kind == TemplateValue::Kind::real      ? v.real
           : v.kind == TemplateValue::Kind::boolean ? v.boolean
                                            : static_cast<double>(v.integer);
}
inline std::int64_t as_integer(TemplateValue const& v) {
    return v.kind == TemplateValue::Kind::boolean ? v.boolean : v.integer;
}

inline bool equal(TemplateValue const& a, TemplateValue const& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == TemplateValue::Kind::real || b.kind == TemplateValue::Kind::real)
            return as_double(a) == as_double(b);
        return as_integer(a) == as_integer(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case TemplateValue::Kind::undefined:
        case TemplateValue::Kind::none:
            return true;
        case TemplateValue::Kind::string:
            return a.string == b.string;
        case TemplateValue::Kind::list:
            return a.list->size() == b.list->size() &&
                   std::equal(a.list->begin(), a.list->end(), b.list->begin(), equal);
        case TemplateValue::Kind::dict:
            if (a.dict->size() != b.dict->size()) return false;
            for (auto const& [k, v] : *a.dict) {
                TemplateValue const* other = b.find(k);
                if (!other || !equal(v, *other)) return false;
            }
            return true;
        case TemplateValue::Kind::function:
            return a.string == b.string;
        default:
            return a.dict == b.dict;  // namespaces: identity
    }
}

// Python's json.dumps(value, ensure_ascii=False, indent=indent), transformers' tojson.
inline void append_json(std::string& out, TemplateValue const& v, std::optional<int> indent, int depth) {
    auto const newline = [&](int level) {
        out += '\n';
        out.append(static_cast<std::size_t>(*indent) * level, ' ');
    };
    auto const json_string = [&](std::string_view s) {
        out += '"';
        for (char c : s) {
            switch (c) {
                case '"':
                    out += "\\\"";
                    break;
                case '\\':
                    out += "\\\\";
                    break;
                case '\n':
                    out += "\\n";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                case '\b':
                    out += "\\b";
                    break;
                case '\f':
                    out += "\\f";
                    break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20) {
                        static constexpr char digits[] = "0123456789abcdef";
                        out += "\\u00";
                        out += digits[(c >> 4) & 15];
                        out += digits[c & 15];
                    } else
                        out += c;
            }
        }
        out += '"';
    };
    if (depth > 64) fail("tojson: nesting deeper than 64");
    switch (v.kind) {
        case TemplateValue::Kind::none:
            out += "null";
            return;
        case TemplateValue::Kind::boolean:
            out += v.boolean ? "true" : "false";
            return;
        case TemplateValue::Kind::integer:
            out += std::to_string(v.integer);
            return;
        case TemplateValue::Kind::real:
            out += std::isnan(v.real)   ? "NaN"
                   : std::isinf(v.real) ? (v.real > 0 ? "Infinity" : "-Infinity")
                                        : float_repr(v.real);
            return;
        case TemplateValue::Kind::string:
            json_string(v.string);
            return;
        case TemplateValue::Kind::list:
        case TemplateValue::Kind::dict: {
            bool const is_list = v.kind == TemplateValue::Kind::list;
            std::size_t const n = is_list ? v.list->size() : v.dict->size();
            out += is_list ? '[' : '{';
            if (n == 0) {
                out += is_list ? ']' : '}';
                return;
            }
            for (std::size_t i = 0; i < n; ++i) {
                if (i) out += indent ? "," : ", ";
                if (indent) newline(depth + 1);
                if (is_list) {
                    append_json(out, (*v.list)[i], indent, depth + 1);
                } else {
                    json_string((*v.dict)[i].first);
                    out += ": ";
                    append_json(out, (*v.dict)[i].second, indent, depth + 1);
                }
            }
            if (indent) newline(depth);
            out += is_list ? ']' : '}';
            return;
        }
        default:
            fail(std::string("tojson: a ") + kind_name(v) + " value is not JSON");
    }
}

// ------------------------------------------------------------------------------ lexing ------

enum class Tok : std::uint8_t { name, string, integer, real, op, end };

struct Token {
    Tok type;
    std::string text;  // name, operator, or the string literal's unescaped value
    int line;
    std::int64_t integer = 0;
    double real = 0;
};

// Python's unicode-escape of a string literal, as jinja2 applies it.
inline std::string unescape(std::string_view body, int line) {
    std::string out;
    for (std::size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
            out += body[i];
            continue;
        }
        char const c = body[++i];
        auto const hex = [&](std::size_t digits) {
            if (i + digits >= body.size())
                fail("line " + std::to_string(line) + ": truncated \\x/\\u escape");
            std::uint32_t cp = 0;
            for (std::size_t k = 1; k <= digits; ++k) {
                char const h = body[i + k];
                int const d = h >= '0' && h <= '9'   ? h - '0'
                              : h >= 'a' && h <= 'f' ? h - 'a' + 10
                              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                     : -1;
                if (d < 0) fail("line " + std::to_string(line) + ": bad hex digit in an escape");
                cp = cp * 16 + static_cast<std::uint32_t>(d);
            }
            if (cp > 0x10FFFF) fail("line " + std::to_string(line) + ": escape beyond U+10FFFF");
            i += digits;
            append_utf8(out, cp);
        };
        switch (c) {
            case '\n':
                break;  // a line continuation
            case '\\':
                out += '\\';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case 'a':
                out += '\a';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'v':
                out += '\v';
                break;
            case 'x':
                hex(2);
                break;
            case 'u':
                hex(4);
                break;
            case 'U':
                hex(8);
                break;
            default:
                if (c >= '0' && c <= '7') {
                    std::uint32_t cp = static_cast<std::uint32_t>(c - '0');
                    for (int k = 0;
                         k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
                         ++k)
                        cp = cp * 8 + static_cast<std::uint32_t>(body[++i] - '0');
                    append_utf8(out, cp);
                } else {
                    out += '\\';  // Python keeps an unknown escape as written
                    out += c;
                }
        }
    }
    return out;
}

// The tokens of one tag's inside, up to its closing delimiter; `at` moves past the delimiter.
// Returns whether the closing delimiter had the whitespace-control '-'.
inline bool lex_tag(std::string_view src, std::size_t& at, std::string_view close, int& line,
                    std::vector<Token>& tokens) {
    auto const here = [&] { return "line " + std::to_string(line) + ": "; };
    int brackets = 0;  // open ( [ {: a "}}" inside a dict literal does not close the tag
    while (true) {
        if (at >= src.size())
            fail(here() + "a tag is not closed (expected '" + std::string(close) + "')");
        char const c = src[at];
        if (c == '\n') ++line;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ++at;
            continue;
        }
        if (brackets == 0 && src.substr(at).starts_with(close)) {
            at += close.size();
            return false;
        }
        if (brackets == 0 && (c == '-' || c == '+') && src.substr(at + 1).starts_with(close)) {
            at += 1 + close.size();
            return c == '-';
        }
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            std::size_t end = at;
            while (end < src.size() &&
                   (std::isalnum(static_cast<unsigned char>(src[end])) || src[end] == '_'))
                ++end;
            tokens.push_back({Tok::name, std::string(src.substr(at, end - at)), line});
            at = end;
            continue;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) {
            std::size_t end = at;
            bool real = false;
            while (end < src.size() &&
                   (std::isdigit(static_cast<unsigned char>(src[end])) || src[end] == '_'))
                ++end;
            if (end + 1 < src.size() && src[end] == '.' &&
                std::isdigit(static_cast<unsigned char>(src[end + 1]))) {
                real = true;
                ++end;
                while (end < src.size() && std::isdigit(static_cast<unsigned char>(src[end])))
                    ++end;
            }
            if (end < src.size() && (src[end] == 'e' || src[end] == 'E')) {
                std::size_t e = end + 1;
                if (e < src.size() && (src[e] == '+' || src[e] == '-')) ++e;
                if (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) {
                    real = true;
                    end = e;
                    while (end < src.size() && std::isdigit(static_cast<unsigned char>(src[end])))
                        ++end;
                }
            }
            std::string digits;
            for (char d : src.substr(at, end - at))
                if (d != '_') digits += d;
            Token t{real ? Tok::real : Tok::integer, digits, line};
            if (real) {
                std::from_chars(digits.data(), digits.data() + digits.size(), t.real);
            } else if (std::from_chars(digits.data(), digits.data() + digits.size(), t.integer)
                           .ec != std::errc{}) {
                fail(here() + "integer literal " + digits + " does not fit 64 bits");
            }
            tokens.push_back(std::move(t));
            at = end;
            continue;
        }
        if (c == '\'' || c == '"') {
            std::size_t end = at + 1;
            while (end < src.size() && src[end] != c) {
                if (src[end] == '\\') ++end;
                if (end < src.size() && src[end] == '\n') ++line;
                ++end;
            }
            if (end >= src.size()) fail(here() + "a string literal is not closed");
            tokens.push_back({Tok::string, unescape(src.substr(at + 1, end - at - 1), line), line});
            at = end + 1;
            continue;
        }
        static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
        bool matched = false;
        for (std::string_view op : two) {
            if (src.substr(at).starts_with(op)) {
                tokens.push_back({Tok::op, std::string(op), line});
                at += 2;
                matched = true;
                break;
            }
        }
        if (matched) continue;
        if (std::string_view("+-*/%~<>()[]{},.:|=").find(c) != std::string_view::npos) {
            if (c == '(' || c == '[' || c == '{') ++brackets;
            if ((c == ')' || c == ']' || c == '}') && brackets > 0) --brackets;
            tokens.push_back({Tok::op, std::string(1, c), line});
            ++at;
            continue;
        }
        fail(here() + "unexpected character '" + std::string(1, c) + "' in a tag");
    }
}

// One piece of the template: text, an output {{ }}, or a statement {% %}.
struct Piece {
    enum class Kind : std::uint8_t { text, output, statement } kind;
    std::string text;
    std::vector<Token> tokens;
    int line;
};

// Splits the template as jinja2 does with trim_blocks and lstrip_blocks, applying whitespace
// control to the text around each tag; comments leave nothing.
inline std::vector<Piece> lex(std::string_view source) {
    std::string src;  // newlines normalized to \n, one trailing newline dropped (jinja2's defaults)
    for (std::size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            src += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else
            src += source[i];
    }
    if (!src.empty() && src.back() == '\n') src.pop_back();

    std::vector<Piece> pieces;
    int line = 1;
    std::size_t at = 0;
    bool strip_next_text = false, trim_next_newline = false;
    // jinja2's line_starting: the text before the next tag begins a line (the template's start,
    // or a newline that trim_blocks took after the previous tag).
    bool line_starting = true;
    while (at < src.size()) {
        std::size_t open = src.find('{', at);
        while (open != std::string::npos &&
               (open + 1 >= src.size() ||
                std::string_view("{%#").find(src[open + 1]) == std::string_view::npos))
            open = src.find('{', open + 1);
        std::string text =
            src.substr(at, open == std::string::npos ? std::string::npos : open - at);
        int const text_line = line;
        line += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
        if (trim_next_newline && text.starts_with('\n')) {
            text.erase(0, 1);
            line_starting = true;
        }
        if (strip_next_text)
            text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\v\f")));
        strip_next_text = trim_next_newline = false;
        if (open == std::string::npos) {
            if (!text.empty())
                pieces.push_back({Piece::Kind::text, std::move(text), {}, text_line});
            break;
        }
        char const kind = src[open + 1];
        std::size_t inner = open + 2;
        char const modifier = inner < src.size() ? src[inner] : '\0';
        if (modifier == '-' || modifier == '+') ++inner;
        if (modifier == '-') {
            auto const keep = text.find_last_not_of(" \t\n\r\v\f");
            text.erase(keep == std::string::npos ? 0 : keep + 1);
        } else if (modifier != '+' && kind != '{') {
            // lstrip_blocks: the spaces and tabs between a line's start and a block or comment tag.
            auto const newline = text.find_last_of('\n');
            std::size_t const from = newline == std::string::npos ? 0 : newline + 1;
            if ((newline != std::string::npos || line_starting) &&
                text.find_first_not_of(" \t", from) == std::string::npos)
                text.erase(from);
        }
        line_starting = false;
        if (!text.empty()) pieces.push_back({Piece::Kind::text, std::move(text), {}, text_line});
        at = inner;
        int const tag_line = line;
        if (kind == '#') {
            std::size_t const close = src.find("#}", at);
            if (close == std::string::npos)
                fail("line " + std::to_string(line) + ": a comment is not closed");
            line += static_cast<int>(std::count(src.begin() + static_cast<std::ptrdiff_t>(at),
                                                src.begin() + static_cast<std::ptrdiff_t>(close),
                                                '\n'));
            strip_next_text = close > at && src[close - 1] == '-';
            trim_next_newline = !strip_next_text && !(close > at && src[close - 1] == '+');
            at = close + 2;
            continue;
        }
        Piece piece{kind == '{' ? Piece::Kind::output : Piece::Kind::statement, {}, {}, tag_line};
        strip_next_text = lex_tag(src, at, kind == '{' ? "}}" : "%}", line, piece.tokens);
        // trim_blocks: the first newline after a block tag goes (not after {{ }}).
        trim_next_newline = kind == '%' && !strip_next_text && src[at - 3] != '+';
        if (kind == '%' && !piece.tokens.empty() && piece.tokens[0].type == Tok::name &&
            piece.tokens[0].text == "raw")
            fail("line " + std::to_string(tag_line) + ": unsupported Jinja construct '{% raw %}'");
        pieces.push_back(std::move(piece));
    }
    return pieces;
}

// ------------------------------------------------------------------------------- syntax -----

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind : std::uint8_t {
        literal,
        name,
        list,
        dict,
        attr,
        item,
        slice,
        call,
        method,
        filter,
        test,
        logical_not,
        negate,
        plus,
        binary,
        logical_and,
        logical_or,
        conditional,
        contains
    } kind;
    int line = 0;
    TemplateValue literal;
    std::string name;           // variable, attribute, function, method, filter, test or operator
    bool negated = false;       // `is not`, `not in`
    std::vector<ExprPtr> args;  // operands, arguments, elements (dict: key, value, key, value...)
    std::vector<std::string> keywords;  // names of the last keywords.size() arguments
};

struct Node;
using Body = std::vector<Node>;

struct Node {
    enum class Kind : std::uint8_t {
        text,
        output,
        if_,
        for_,
        set,
        set_block,
        break_,
        continue_
    } kind;
    int line = 0;
    Node(Kind k, int at, std::string t = {}) : kind(k), line(at), text(std::move(t)) {}
    std::string text;                  // text; set: the variable name
    std::string attribute;             // set ns.attribute = ...
    std::vector<std::string> targets;  // for: loop variables
    std::vector<ExprPtr>
        exprs;  // output: [value]; if: conditions; for: [iterable, filter?]; set: [value]
    std::vector<Body> bodies;  // if: one per condition, then else; for: [body, else]
    bool has_filter = false;   // for ... if
};

inline constexpr std::string_view supported_filters[] = {
    "abs",        "capitalize", "count",      "d",       "default", "first",  "float",
    "int",        "items",      "join",       "last",    "length",  "list",   "lower",
    "map",        "reject",     "rejectattr", "replace", "reverse", "safe",   "select",
    "selectattr", "string",     "title",      "tojson",  "trim",    "unique", "upper"};
inline constexpr std::string_view supported_tests[] = {
    "boolean", "defined", "divisibleby", "eq",      "equalto",  "even",   "false", "float",
    "ge",      "gt",      "in",          "integer", "iterable", "le",     "lt",    "mapping",
    "ne",      "none",    "number",      "odd",     "sequence", "string", "true",  "undefined"};
inline constexpr std::string_view supported_methods[] = {
    "endswith", "get",        "items", "keys",  "lower", "lstrip", "replace",   "rstrip",
    "split",    "startswith", "strip", "title", "upper", "values", "capitalize"};
inline constexpr std::string_view supported_functions[] = {"namespace", "raise_exception", "range",
                                                           "strftime_now"};

inline bool listed(std::span<std::string_view const> names, std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

class Parser {
  public:
    explicit Parser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

    Body parse_template() {
        std::string end;
        Body body = parse_body({}, end);
        return body;
    }

  private:
    static constexpr int max_depth = 200;

    [[noreturn]] void unsupported(int line, std::string const& what) const {
        fail("line " + std::to_string(line) + ": unsupported Jinja construct " + what);
    }
    [[noreturn]] void syntax(std::string const& what) const {
        fail("line " + std::to_string(token().line) + ": " + what);
    }

    // --- statements
    // Parses nodes until a statement whose keyword is in `ends`; that keyword goes to `end`.
    Body parse_body(std::vector<std::string_view> const& ends, std::string& end) {
        Body body;
        while (piece_ < pieces_.size()) {
            Piece& p = pieces_[piece_++];
            if (p.kind == Piece::Kind::text) {
                body.push_back({Node::Kind::text, p.line, std::move(p.text)});
                continue;
            }
            begin_tokens(p);
            if (p.kind == Piece::Kind::output) {
                Node node{Node::Kind::output, p.line};
                node.exprs.push_back(parse_expression());
                expect_end();
                body.push_back(std::move(node));
                continue;
            }
            if (token().type != Tok::name) syntax("a statement must start with a keyword");
            std::string const keyword = token().text;
            if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) {
                ++at_;
                end = keyword;
                return body;
            }
            ++at_;
            if (keyword == "if")
                body.push_back(parse_if(p.line));
            else if (keyword == "for")
                body.push_back(parse_for(p.line));
            else if (keyword == "set")
                body.push_back(parse_set(p.line));
            else if (keyword == "break" || keyword == "continue") {
                if (loop_depth_ == 0) syntax("'" + keyword + "' outside a for loop");
                expect_end();
                body.push_back(
                    {keyword == "break" ? Node::Kind::break_ : Node::Kind::continue_, p.line});
            } else if (keyword.starts_with("end") || keyword == "elif" || keyword == "else") {
                syntax("unexpected '{% " + keyword + " %}'");
            } else {
                unsupported(p.line, "'{% " + keyword + " %}'");
            }
        }
        if (!ends.empty())
            fail("the template ends inside a block: expected '{% " + std::string(ends.back()) +
                 " %}'");
        return body;
    }

    Node parse_if(int line) {
        Node node{Node::Kind::if_, line};
        node.exprs.push_back(parse_expression());
        expect_end();
        while (true) {
            std::string end;
            node.bodies.push_back(parse_body({"elif", "else", "endif"}, end));
            if (end == "elif") {
                node.exprs.push_back(parse_expression());
                expect_end();
            } else if (end == "else") {
                expect_end();
                std::string endif;
                node.bodies.push_back(parse_body({"endif"}, endif));
                expect_end();
                return node;
            } else {
                expect_end();
                return node;
            }
        }
    }

    Node parse_for(int line) {
        Node node{Node::Kind::for_, line};
        do {
            if (token().type != Tok::name) syntax("expected a loop variable");
            node.targets.push_back(token().text);
            ++at_;
        } while (accept_op(","));
        if (!accept_name("in")) syntax("expected 'in' in a for statement");
        node.exprs.push_back(
            parse_or_expression());  // `if` here is the loop filter, not a conditional
        if (accept_name("if")) {
            node.has_filter = true;
            node.exprs.push_back(parse_or_expression());
        }
        if (accept_name("recursive")) unsupported(line, "'{% for ... recursive %}'");
        expect_end();
        ++loop_depth_;
        std::string end;
        node.bodies.push_back(parse_body({"else", "endfor"}, end));
        --loop_depth_;
        expect_end();
        if (end == "else") {
            std::string endfor;
            node.bodies.push_back(parse_body({"endfor"}, endfor));
            expect_end();
        }
        return node;
    }

    Node parse_set(int line) {
        Node node{Node::Kind::set, line};
        if (token().type != Tok::name) syntax("expected a variable name after 'set'");
        node.text = token().text;
        ++at_;
        if (accept_op(".")) {
            if (token().type != Tok::name) syntax("expected an attribute name");
            node.attribute = token().text;
            ++at_;
        }
        if (is_op(",")) unsupported(line, "'{% set a, b = ... %}'");
        if (!accept_op("=")) {
            if (!node.attribute.empty() || at_ != tokens_->size())
                syntax("expected '=' in a set statement");
            node.kind = Node::Kind::set_block;
            std::string end;
            node.bodies.push_back(parse_body({"endset"}, end));
            expect_end();
            return node;
        }
        node.exprs.push_back(parse_expression());
        expect_end();
        return node;
    }

    // --- tokens
    void begin_tokens(Piece& p) {
        tokens_ = &p.tokens;
        at_ = 0;
        end_token_ = Token{Tok::end, "end of tag", p.line};
    }
    Token const& token() const { return at_ < tokens_->size() ? (*tokens_)[at_] : end_token_; }
    bool is_op(std::string_view op) const { return token().type == Tok::op && token().text == op; }
    bool is_name(std::string_view name) const {
        return token().type == Tok::name && token().text == name;
    }
    bool accept_op(std::string_view op) {
        if (!is_op(op)) return false;
        ++at_;
        return true;
    }
    bool accept_name(std::string_view name) {
        if (!is_name(name)) return false;
        ++at_;
        return true;
    }
    void expect_op(std::string_view op) {
        if (!accept_op(op))
            syntax("expected '" + std::string(op) + "', found '" + token().text + "'");
    }
    void expect_end() {
        if (at_ != tokens_->size()) syntax("unexpected '" + token().text + "' in a tag");
    }

    ExprPtr node(Expr::Kind kind, std::string name = {}) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = token().line;
        e->name = std::move(name);
        return e;
    }
    ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr left, ExprPtr right) {
        auto e = node(kind, std::move(op));
        e->args.push_back(std::move(left));
        e->args.push_back(std::move(right));
        return e;
    }

    struct DepthGuard {
        int& depth;
        explicit DepthGuard(int& d, Parser const& p) : depth(d) {
            if (++depth > max_depth)
                p.syntax("expression nested deeper than " + std::to_string(max_depth));
        }
        ~DepthGuard() { --depth; }
    };

    // --- expressions, jinja2's precedence from loosest to tightest
    ExprPtr parse_expression() {
        DepthGuard guard(depth_, *this);
        ExprPtr value = parse_or_expression();
        while (accept_name("if")) {
            auto e = node(Expr::Kind::conditional);
            e->args.push_back(parse_or_expression());  // condition
            e->args.push_back(std::move(value));
            if (accept_name("else")) e->args.push_back(parse_expression());
            value = std::move(e);
        }
        return value;
    }
    ExprPtr parse_or_expression() {
        ExprPtr left = parse_and();
        while (accept_name("or"))
            left = binary(Expr::Kind::logical_or, "or", std::move(left), parse_and());
        return left;
    }
    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (accept_name("and"))
            left = binary(Expr::Kind::logical_and, "and", std::move(left), parse_not());
        return left;
    }
    ExprPtr parse_not() {
        if (accept_name("not")) {
            DepthGuard guard(depth_, *this);
            auto e = node(Expr::Kind::logical_not);
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }
    ExprPtr parse_compare() {
        ExprPtr left = parse_math1();
        while (true) {
            static constexpr std::string_view ops[] = {"==", "!=", "<", "<=", ">", ">="};
            if (token().type == Tok::op && listed(ops, token().text)) {
                std::string op = token().text;
                ++at_;
                left = binary(Expr::Kind::binary, op, std::move(left), parse_math1());
            } else if (accept_name("in")) {
                left = binary(Expr::Kind::contains, "in", std::move(left), parse_math1());
            } else if (is_name("not") && at_ + 1 < tokens_->size() &&
                       (*tokens_)[at_ + 1].text == "in") {
                at_ += 2;
                left = binary(Expr::Kind::contains, "not in", std::move(left), parse_math1());
                left->negated = true;
            } else {
                return left;
            }
        }
    }
    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = token().text;
            ++at_;
            left = binary(Expr::Kind::binary, op, std::move(left), parse_concat());
        }
        return left;
    }
    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (accept_op("~"))
            left = binary(Expr::Kind::binary, "~", std::move(left), parse_math2());
        return left;
    }
    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = token().text;
            ++at_;
            left = binary(Expr::Kind::binary, op, std::move(left), parse_pow());
        }
        return left;
    }
    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (accept_op("**"))
            left = binary(Expr::Kind::binary, "**", std::move(left), parse_unary(true));
        return left;
    }
    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(depth_, *this);
        ExprPtr value;
        if (is_op("-") || is_op("+")) {
            auto e = node(is_op("-") ? Expr::Kind::negate : Expr::Kind::plus);
            ++at_;
            e->args.push_back(parse_unary(false));
            value = std::move(e);
        } else {
            value = parse_postfix(parse_primary());
        }
        if (with_filter) return parse_filters_and_tests(std::move(value));
        return value;
    }
    ExprPtr parse_primary() {
        Token const& t = token();
        if (t.type == Tok::string) {
            std::string text = t.text;
            ++at_;
            while (token().type == Tok::string) {  // adjacent literals concatenate, as in Python
                text += token().text;
                ++at_;
            }
            auto e = node(Expr::Kind::literal);
            e->literal = TemplateValue::from(std::move(text));
            return e;
        }
        if (t.type == Tok::integer || t.type == Tok::real) {
            auto e = node(Expr::Kind::literal);
            e->literal = t.type == Tok::integer ? TemplateValue::from(t.integer) : TemplateValue::from(t.real);
            ++at_;
            return e;
        }
        if (t.type == Tok::name) {
            std::string const name = t.text;
            auto e = node(Expr::Kind::literal);
            if (name == "true" || name == "True")
                e->literal = TemplateValue::from(true);
            else if (name == "false" || name == "False")
                e->literal = TemplateValue::from(false);
            else if (name == "none" || name == "None")
                e->literal = TemplateValue::none();
            else {
                static constexpr std::string_view keywords[] = {"and", "or", "not", "in",
                                                                "is",  "if", "else"};
                if (listed(keywords, name)) syntax("unexpected '" + name + "'");
                e->kind = Expr::Kind::name;
                e->name = name;
            }
            ++at_;
            return e;
        }
        if (accept_op("(")) {
            if (accept_op(")")) {
                auto e = node(Expr::Kind::list);  // an empty tuple
                return e;
            }
            ExprPtr inner = parse_expression();
            if (is_op(",")) {  // a tuple: a list here (no template tells them apart)
                auto e = node(Expr::Kind::list);
                e->args.push_back(std::move(inner));
                while (accept_op(",") && !is_op(")")) e->args.push_back(parse_expression());
                inner = std::move(e);
            }
            expect_op(")");
            return inner;
        }
        if (accept_op("[")) {
            auto e = node(Expr::Kind::list);
            while (!is_op("]")) {
                e->args.push_back(parse_expression());
                if (!accept_op(",")) break;
            }
            expect_op("]");
            return e;
        }
        if (accept_op("{")) {
            auto e = node(Expr::Kind::dict);
            while (!is_op("}")) {
                e->args.push_back(parse_expression());
                expect_op(":");
                e->args.push_back(parse_expression());
                if (!accept_op(",")) break;
            }
            expect_op("}");
            return e;
        }
        syntax("expected a value, found '" + t.text + "'");
    }

    // (args, name=value...) after '(' has been read.
    void parse_call_arguments(Expr& call) {
        while (!is_op(")")) {
            if (token().type == Tok::name && at_ + 1 < tokens_->size() &&
                (*tokens_)[at_ + 1].text == "=" && (*tokens_)[at_ + 1].type == Tok::op) {
                call.keywords.push_back(token().text);
                at_ += 2;
                call.args.push_back(parse_expression());
            } else {
                if (!call.keywords.empty())
                    syntax("a positional argument after a keyword argument");
                call.args.push_back(parse_expression());
            }
            if (!accept_op(",")) break;
        }
        expect_op(")");
    }

    ExprPtr parse_postfix(ExprPtr value) {
        while (true) {
            DepthGuard guard(depth_, *this);
            if (accept_op(".")) {
                if (token().type != Tok::name && token().type != Tok::integer)
                    syntax("expected an attribute name after '.'");
                std::string attribute = token().text;
                ++at_;
                if (is_op("(")) {
                    if (!listed(supported_methods, attribute))
                        unsupported(token().line, "method '." + attribute + "()'");
                    ++at_;
                    auto e = node(Expr::Kind::method, attribute);
                    e->args.push_back(std::move(value));
                    parse_call_arguments(*e);
                    value = std::move(e);
                } else {
                    auto e = node(Expr::Kind::attr, attribute);
                    e->args.push_back(std::move(value));
                    value = std::move(e);
                }
            } else if (accept_op("[")) {
                ExprPtr start, stop, step;
                bool slice = false;
                if (!is_op(":")) start = parse_expression();
                if (accept_op(":")) {
                    slice = true;
                    if (!is_op("]") && !is_op(":")) stop = parse_expression();
                    if (accept_op(":") && !is_op("]")) step = parse_expression();
                }
                expect_op("]");
                auto e = node(slice ? Expr::Kind::slice : Expr::Kind::item);
                e->args.push_back(std::move(value));
                e->args.push_back(std::move(start));
                if (slice) {
                    e->args.push_back(std::move(stop));
                    e->args.push_back(std::move(step));
                }
                value = std::move(e);
            } else if (is_op("(")) {
                if (value->kind != Expr::Kind::name)
                    unsupported(token().line, "call of a computed value");
                if (!listed(supported_functions, value->name))
                    unsupported(token().line, "function '" + value->name + "()'");
                ++at_;
                auto e = node(Expr::Kind::call, value->name);
                parse_call_arguments(*e);
                value = std::move(e);
            } else {
                return value;
            }
        }
    }

    ExprPtr parse_filters_and_tests(ExprPtr value) {
        while (true) {
            DepthGuard guard(depth_, *this);
            if (accept_op("|")) {
                if (token().type != Tok::name) syntax("expected a filter name after '|'");
                std::string name = token().text;
                if (!listed(supported_filters, name))
                    unsupported(token().line, "filter '" + name + "'");
                ++at_;
                auto e = node(Expr::Kind::filter, name);
                e->args.push_back(std::move(value));
                if (accept_op("(")) parse_call_arguments(*e);
                value = parse_postfix(std::move(e));
            } else if (accept_name("is")) {
                auto e = node(Expr::Kind::test);
                e->negated = accept_name("not");
                if (token().type != Tok::name) syntax("expected a test name after 'is'");
                e->name = token().text;
                if (!listed(supported_tests, e->name))
                    unsupported(token().line, "test 'is " + e->name + "'");
                ++at_;
                e->args.push_back(std::move(value));
                if (accept_op("(")) {
                    parse_call_arguments(*e);
                } else {
                    Token const& t = token();
                    static constexpr std::string_view stops[] = {"else", "or", "and", "if",
                                                                 "is",   "in", "not"};
                    bool const argument = (t.type == Tok::name && !listed(stops, t.text)) ||
                                          t.type == Tok::string || t.type == Tok::integer ||
                                          t.type == Tok::real ||
                                          (t.type == Tok::op && (t.text == "[" || t.text == "{"));
                    if (argument) e->args.push_back(parse_postfix(parse_primary()));
                }
                value = std::move(e);
            } else {
                return value;
            }
        }
    }

    std::vector<Piece> pieces_;
    std::size_t piece_ = 0;
    std::vector<Token>* tokens_ = nullptr;
    std::size_t at_ = 0;
    Token end_token_{Tok::end, "end of tag", 0};
    int depth_ = 0;
    int loop_depth_ = 0;
};

}  // namespace detail

// A parsed template. Copies share the parsed form.
class Template {
  public:
    // Parses `source`; refuses (tinfer::RequestError) what the subset does not implement.
    explicit Template(std::string_view source)
        : body_(std::make_shared<detail::Body>(
              detail::Parser(detail::lex(source)).parse_template())) {}

    // Renders with `variables` as the template's globals (messages, add_generation_prompt,
    // bos_token, ...). `now` is what strftime_now formats (seconds since the epoch, UTC).
    std::string render(Dict const& variables, std::function<std::time_t()> const& now = {},
                       RenderLimits limits = {}) const;

  private:
    std::shared_ptr<detail::Body const> body_;
};

namespace detail {

class Renderer {
  public:
    Renderer(Dict const& globals, std::function<std::time_t()> const& now, RenderLimits limits)
        : now_(now), limits_(limits) {
        scopes_.emplace_back();
        for (auto const& [k, v] : globals) scopes_.back().emplace_back(k, v);
    }

    std::string take() { return std::move(out_); }

    enum class Flow : std::uint8_t { normal, break_, continue_ };

    Flow run(Body const& body, std::string& out) {
        for (Node const& node : body) {
            step(node.line);
            switch (node.kind) {
                case Node::Kind::text:
                    emit(out, node.text);
                    break;
                case Node::Kind::output:
                    emit(out, to_text(eval(*node.exprs[0])));
                    break;
                case Node::Kind::if_: {
                    std::size_t branch = 0;
                    while (branch < node.exprs.size() && !truthy(eval(*node.exprs[branch])))
                        ++branch;
                    if (branch < node.bodies.size()) {
                        Flow const flow = run(node.bodies[branch], out);
                        if (flow != Flow::normal) return flow;
                    }
                    break;
                }
                case Node::Kind::for_:
                    run_for(node, out);
                    break;
                case Node::Kind::set:
                    assign(node, eval(*node.exprs[0]));
                    break;
                case Node::Kind::set_block: {
                    std::string captured;
                    run(node.bodies[0], captured);
                    assign(node, TemplateValue::from(std::move(captured)));
                    break;
                }
                case Node::Kind::break_:
                    return Flow::break_;
                case Node::Kind::continue_:
                    return Flow::continue_;
            }
        }
        return Flow::normal;
    }

    std::string out_;

  private:
    using Scope = std::vector<std::pair<std::string, TemplateValue>>;

    [[noreturn]] void error(int line, std::string const& message) const {
        fail("line " + std::to_string(line) + ": " + message);
    }
    void step(int line) {
        if (++steps_ > limits_.max_steps)
            error(line, "rendering took more than " + std::to_string(limits_.max_steps) + " steps");
    }
    void check_size(std::size_t bytes, int line) const {
        if (bytes > limits_.max_output_bytes)
            error(line, "a rendered string exceeds " + std::to_string(limits_.max_output_bytes) +
                            " bytes");
    }
    void emit(std::string& out, std::string_view text) {
        out += text;
        check_size(out.size(), 0);
    }

    TemplateValue lookup(std::string const& name) const {
        for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
            for (auto const& [k, v] : *scope)
                if (k == name) return v;
        // The global functions are values too (Llama 3.2 asks `strftime_now is defined`).
        if (listed(supported_functions, name)) {
            TemplateValue f = TemplateValue::undefined(name);
            f.kind = TemplateValue::Kind::function;
            return f;
        }
        return TemplateValue::undefined(name);
    }
    void define(std::string const& name, TemplateValue value) {
        for (auto& [k, v] : scopes_.back())
            if (k == name) {
                v = std::move(value);
                return;
            }
        scopes_.back().emplace_back(name, std::move(value));
    }
    void assign(Node const& node, TemplateValue value) {
        if (node.attribute.empty()) {
            define(node.text, std::move(value));
            return;
        }
        TemplateValue target = lookup(node.text);
        if (!target.is(TemplateValue::Kind::ns))
            error(node.line, "cannot set an attribute of '" + node.text +
                                 "': only a namespace() takes attributes");
        for (auto& [k, v] : *target.dict)
            if (k == node.attribute) {
                v = std::move(value);
                return;
            }
        target.dict->emplace_back(node.attribute, std::move(value));
    }

    List iterate(TemplateValue const& v, int line) const {
        switch (v.kind) {
            case TemplateValue::Kind::undefined:
                return {};
            case TemplateValue::Kind::list:
                return *v.list;
            case TemplateValue::Kind::dict: {
                List keys;
                for (auto const& [k, _] : *v.dict) keys.push_back(TemplateValue::from(k));
                return keys;
            }
            case TemplateValue::Kind::string: {
                List chars;
                auto const starts = code_point_starts(v.string);
                for (std::size_t k = 0; k < starts.size(); ++k) {
                    std::size_t const end = k + 1 < starts.size() ? starts[k + 1] : v.string.size();
                    chars.push_back(TemplateValue::from(v.string.substr(starts[k], end - starts[k])));
                }
                return chars;
            }
            default:
                error(line, std::string("a ") + kind_name(v) + " value is not iterable");
        }
    }

    void bind_targets(Node const& node, TemplateValue const& item) {
        if (node.targets.size() == 1) {
            define(node.targets[0], item);
            return;
        }
        if (!item.is(TemplateValue::Kind::list) || item.list->size() != node.targets.size())
            error(node.line, "cannot unpack a loop item into " +
                                 std::to_string(node.targets.size()) + " variables");
        for (std::size_t i = 0; i < node.targets.size(); ++i)
            define(node.targets[i], (*item.list)[i]);
    }

    void run_for(Node const& node, std::string& out) {
        List items = iterate(eval(*node.exprs[0]), node.line);
        if (node.has_filter) {  // the filter sees the loop variables, and loop.length counts what
                                // it keeps
            List kept;
            for (TemplateValue const& item : items) {
                scopes_.emplace_back();
                bind_targets(node, item);
                bool const keep = truthy(eval(*node.exprs[1]));
                scopes_.pop_back();
                if (keep) kept.push_back(item);
            }
            items = std::move(kept);
        }
        auto const n = static_cast<std::int64_t>(items.size());
        for (std::int64_t i = 0; i < n; ++i) {
            step(node.line);
            scopes_.emplace_back();
            Dict loop{{"index0", TemplateValue::from(i)},
                      {"index", TemplateValue::from(i + 1)},
                      {"revindex0", TemplateValue::from(n - i - 1)},
                      {"revindex", TemplateValue::from(n - i)},
                      {"first", TemplateValue::from(i == 0)},
                      {"last", TemplateValue::from(i == n - 1)},
                      {"length", TemplateValue::from(n)},
                      {"previtem", i > 0 ? items[i - 1] : TemplateValue::undefined("previtem")},
                      {"nextitem", i + 1 < n ? items[i + 1] : TemplateValue::undefined("nextitem")}};
            define("loop", TemplateValue::from(std::move(loop)));
            bind_targets(node, items[static_cast<std::size_t>(i)]);
            Flow const flow = run(node.bodies[0], out);
            scopes_.pop_back();
            if (flow == Flow::break_) break;
        }
        if (n == 0 && node.bodies.size() > 1) {
            scopes_.emplace_back();
            run(node.bodies[1], out);
            scopes_.pop_back();
        }
    }

    // --- expressions
    TemplateValue eval(Expr const& e) {
        step(e.line);
        switch (e.kind) {
            case Expr::Kind::literal:
                return e.literal;
            case Expr::Kind::name:
                return lookup(e.name);
            case Expr::Kind::list: {
                List items;
                for (auto const& a : e.args) items.push_back(eval(*a));
                return TemplateValue::from(std::move(items));
            }
            case Expr::Kind::dict: {
                Dict entries;
                for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    TemplateValue key = eval(*e.args[i]);
                    if (!key.is(TemplateValue::Kind::string))
                        error(e.line, "dict keys must be strings here");
                    TemplateValue value = eval(*e.args[i + 1]);
                    auto found = std::find_if(entries.begin(), entries.end(), [&](auto const& kv) {
                        return kv.first == key.string;
                    });
                    if (found != entries.end())
                        found->second = std::move(value);
                    else
                        entries.emplace_back(std::move(key.string), std::move(value));
                }
                return TemplateValue::from(std::move(entries));
            }
            case Expr::Kind::attr:
                return get_attribute(eval(*e.args[0]), e.name, e.line);
            case Expr::Kind::item:
                return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line);
            case Expr::Kind::slice:
                return slice(e);
            case Expr::Kind::call:
                return call(e);
            case Expr::Kind::method:
                return method(e);
            case Expr::Kind::filter:
                return filter(e);
            case Expr::Kind::test:
                return TemplateValue::from(test(e) != e.negated);
            case Expr::Kind::logical_not:
                return TemplateValue::from(!truthy(eval(*e.args[0])));
            case Expr::Kind::negate:
            case Expr::Kind::plus: {
                TemplateValue v = eval(*e.args[0]);
                if (!v.is_number())
                    error(e.line, std::string("unary ") +
                                      (e.kind == Expr::Kind::negate ? "-" : "+") + " on a " +
                                      kind_name(v));
                if (e.kind == Expr::Kind::plus)
                    return v.is(TemplateValue::Kind::boolean) ? TemplateValue::from(as_integer(v)) : v;
                return v.is(TemplateValue::Kind::real) ? TemplateValue::from(-v.real) : TemplateValue::from(-as_integer(v));
            }
            case Expr::Kind::logical_and: {
                TemplateValue left = eval(*e.args[0]);
                return truthy(left) ? eval(*e.args[1]) : left;
            }
            case Expr::Kind::logical_or: {
                TemplateValue left = eval(*e.args[0]);
                return truthy(left) ? left : eval(*e.args[1]);
            }
            case Expr::Kind::conditional:
                if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
                return e.args.size() > 2 ? eval(*e.args[2]) : TemplateValue::undefined();
            case Expr::Kind::contains:
                return TemplateValue::from(contains(eval(*e.args[1]), eval(*e.args[0]), e.line) !=
                                   e.negated);
            case Expr::Kind::binary:
                return binary(e);
        }
        return {};
    }

    TemplateValue get_attribute(TemplateValue const& object, std::string const& name, int line) const {
        if (object.is(TemplateValue::Kind::undefined))
            error(line, "'" + (object.string.empty() ? std::string("value") : object.string) +
                            "' is undefined (reading ." + name + ")");
        if (object.is(TemplateValue::Kind::dict) || object.is(TemplateValue::Kind::ns)) {
            if (TemplateValue const* v = object.find(name)) return *v;
        }
        if (object.is(TemplateValue::Kind::list) && !name.empty() &&
            std::isdigit(static_cast<unsigned char>(name[0]))) {
            std::int64_t index = 0;
            auto const [end, ec] = std::from_chars(name.data(), name.data() + name.size(), index);
            if (ec != std::errc{} || end != name.data() + name.size())
                return TemplateValue::undefined(name);
            return get_item(object, TemplateValue::from(index), line);
        }
        return TemplateValue::undefined(name);
    }

    TemplateValue get_item(TemplateValue const& object, TemplateValue const& key, int line) const {
        if (object.is(TemplateValue::Kind::undefined))
            error(line, "'" + (object.string.empty() ? std::string("value") : object.string) +
                            "' is undefined (reading [" + repr(key) + "])");
        if (object.is(TemplateValue::Kind::dict) || object.is(TemplateValue::Kind::ns)) {
            if (key.is(TemplateValue::Kind::string))
                if (TemplateValue const* v = object.find(key.string)) return *v;
            return TemplateValue::undefined(key.is(TemplateValue::Kind::string) ? key.string : repr(key));
        }
        if ((object.is(TemplateValue::Kind::list) || object.is(TemplateValue::Kind::string)) &&
            (key.is(TemplateValue::Kind::integer) || key.is(TemplateValue::Kind::boolean))) {
            if (object.is(TemplateValue::Kind::list)) {
                auto const n = static_cast<std::int64_t>(object.list->size());
                std::int64_t i = as_integer(key);
                if (i < 0) i += n;
                if (i < 0 || i >= n) return TemplateValue::undefined(repr(key));
                return (*object.list)[static_cast<std::size_t>(i)];
            }
            auto const starts = code_point_starts(object.string);
            auto const n = static_cast<std::int64_t>(starts.size());
            std::int64_t i = as_integer(key);
            if (i < 0) i += n;
            if (i < 0 || i >= n) return TemplateValue::undefined(repr(key));
            std::size_t const begin = starts[static_cast<std::size_t>(i)];
            std::size_t const end =
                i + 1 < n ? starts[static_cast<std::size_t>(i) + 1] : object.string.size();
            return TemplateValue::from(object.string.substr(begin, end - begin));
        }
        if (key.is(TemplateValue::Kind::string)) return get_attribute(object, key.string, line);
        return TemplateValue::undefined(repr(key));
    }

    TemplateValue slice(Expr const& e) {
        TemplateValue object = eval(*e.args[0]);
        auto const bound = [&](ExprPtr const& x) -> std::optional<std::int64_t> {
            if (!x) return std::nullopt;
            TemplateValue v = eval(*x);
            if (v.is(TemplateValue::Kind::none)) return std::nullopt;
            if (!v.is(TemplateValue::Kind::integer) && !v.is(TemplateValue::Kind::boolean))
                error(e.line, "slice indices must be integers");
            return as_integer(v);
        };
        std::optional<std::int64_t> start = bound(e.args[1]), stop = bound(e.args[2]),
                                    step_by = bound(e.args[3]);
        std::int64_t const step = step_by.value_or(1);
        if (step == 0) error(e.line, "slice step cannot be zero");
        bool const is_string = object.is(TemplateValue::Kind::string);
        if (!is_string && !object.is(TemplateValue::Kind::list))
            error(e.line, std::string("cannot slice a ") + kind_name(object));
        List pieces = is_string ? iterate(object, e.line) : *object.list;
        auto const n = static_cast<std::int64_t>(pieces.size());
        // Python's slice.indices().
        auto const clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
            if (!v) return fallback;
            std::int64_t x = *v < 0 ? *v + n : *v;
            if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
            return std::clamp<std::int64_t>(x, -1, n - 1);
        };
        std::int64_t const first = clamp(start, step > 0 ? 0 : n - 1);
        std::int64_t const last = clamp(stop, step > 0 ? n : -1);
        List taken;
        for (std::int64_t i = first; step > 0 ? i < last : i > last; i += step)
            taken.push_back(pieces[static_cast<std::size_t>(i)]);
        if (!is_string) return TemplateValue::from(std::move(taken));
        std::string text;
        for (TemplateValue const& p : taken) text += p.string;
        return TemplateValue::from(std::move(text));
    }

    bool contains(TemplateValue const& container, TemplateValue const& item, int line) const {
        switch (container.kind) {
            case TemplateValue::Kind::undefined:
                return false;
            case TemplateValue::Kind::string:
                if (!item.is(TemplateValue::Kind::string))
                    error(line, std::string("'in <string>' needs a string on the left, not a ") +
                                    kind_name(item));
                return container.string.find(item.string) != std::string::npos;
            case TemplateValue::Kind::list:
                return std::any_of(container.list->begin(), container.list->end(),
                                   [&](TemplateValue const& v) { return equal(v, item); });
            case TemplateValue::Kind::dict:
                return item.is(TemplateValue::Kind::string) && container.find(item.string) != nullptr;
            default:
                error(line, std::string("'in' on a ") + kind_name(container));
        }
    }

    TemplateValue binary(Expr const& e) {
        TemplateValue a = eval(*e.args[0]);
        TemplateValue b = eval(*e.args[1]);
        std::string const& op = e.name;
        if (op == "==") return TemplateValue::from(equal(a, b));
        if (op == "!=") return TemplateValue::from(!equal(a, b));
        if (op == "~") {
            std::string text = to_text(a) + to_text(b);
            check_size(text.size(), e.line);
            return TemplateValue::from(std::move(text));
        }
        auto const type_error = [&]() -> TemplateValue {
            error(e.line, "unsupported operand types for " + op + ": " + kind_name(a) + " and " +
                              kind_name(b));
        };
        if (op == "<" || op == "<=" || op == ">" || op == ">=") {
            int order = 0;
            if (a.is_number() && b.is_number()) {
                double const x = as_double(a), y = as_double(b);
                order = x < y ? -1 : x > y ? 1 : 0;
            } else if (a.is(TemplateValue::Kind::string) && b.is(TemplateValue::Kind::string)) {
                order = a.string.compare(b.string) < 0 ? -1 : a.string == b.string ? 0 : 1;
            } else {
                type_error();
            }
            bool const r = op == "<"    ? order < 0
                           : op == "<=" ? order <= 0
                           : op == ">"  ? order > 0
                                        : order >= 0;
            return TemplateValue::from(r);
        }
        if (op == "+") {
            if (a.is(TemplateValue::Kind::string) && b.is(TemplateValue::Kind::string)) {
                check_size(a.string.size() + b.string.size(), e.line);
                return TemplateValue::from(a.string + b.string);
            }
            if (a.is(TemplateValue::Kind::list) && b.is(TemplateValue::Kind::list)) {
                List items = *a.list;
                items.insert(items.end(), b.list->begin(), b.list->end());
                return TemplateValue::from(std::move(items));
            }
        }
        if (op == "*") {  // sequence repetition
            bool const seq_left = a.is(TemplateValue::Kind::string) || a.is(TemplateValue::Kind::list);
            TemplateValue const& seq = seq_left ? a : b;
            TemplateValue const& count = seq_left ? b : a;
            if ((seq.is(TemplateValue::Kind::string) || seq.is(TemplateValue::Kind::list)) &&
                (count.is(TemplateValue::Kind::integer) || count.is(TemplateValue::Kind::boolean))) {
                std::int64_t const times = std::max<std::int64_t>(0, as_integer(count));
                std::size_t const unit =
                    seq.is(TemplateValue::Kind::string) ? seq.string.size() : seq.list->size();
                if (unit != 0 &&
                    static_cast<std::uint64_t>(times) > limits_.max_output_bytes / unit)
                    check_size(limits_.max_output_bytes + 1, e.line);
                if (seq.is(TemplateValue::Kind::string)) {
                    std::string text;
                    for (std::int64_t i = 0; i < times; ++i) text += seq.string;
                    return TemplateValue::from(std::move(text));
                }
                List items;
                for (std::int64_t i = 0; i < times; ++i)
                    items.insert(items.end(), seq.list->begin(), seq.list->end());
                return TemplateValue::from(std::move(items));
            }
        }
        if (!a.is_number() || !b.is_number()) type_error();
        bool const integers = !a.is(TemplateValue::Kind::real) && !b.is(TemplateValue::Kind::real);
        if (op == "/") {
            if (as_double(b) == 0) error(e.line, "division by zero");
            return TemplateValue::from(as_double(a) / as_double(b));
        }
        if (integers) {
            std::int64_t const x = as_integer(a), y = as_integer(b), r = 0;
            (void)r;
            std::int64_t result = 0;
            if (op == "+") {
                if (__builtin_add_overflow(x, y, &result)) error(e.line, "integer overflow");
            } else if (op == "-") {
                if (__builtin_sub_overflow(x, y, &result)) error(e.line, "integer overflow");
            } else if (op == "*") {
                if (__builtin_mul_overflow(x, y, &result)) error(e.line, "integer overflow");
            } else if (op == "//" || op == "%") {
                if (y == 0) error(e.line, "division by zero");
                if (x == INT64_MIN && y == -1) error(e.line, "integer overflow");
                std::int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    --q;
                    m += y;
                }
                result = op == "//" ? q : m;
            } else if (op == "**") {
                if (y < 0)
                    return TemplateValue::from(std::pow(static_cast<double>(x), static_cast<double>(y)));
                result = 1;
                for (std::int64_t i = 0; i < y; ++i) {
                    if (__builtin_mul_overflow(result, x, &result))
                        error(e.line, "integer overflow");
                    if (result == 0 || result == 1) break;
                }
                if (result == 1 && x == -1 && y % 2 == 1) result = -1;
            }
            return TemplateValue::from(result);
        }
        double const x = as_double(a), y = as_double(b);
        if (op == "+") return TemplateValue::from(x + y);
        if (op == "-") return TemplateValue::from(x - y);
        if (op == "*") return TemplateValue::from(x * y);
        if (op == "**") return TemplateValue::from(std::pow(x, y));
        if (y == 0) error(e.line, "division by zero");
        double const q = std::floor(x / y);
        return TemplateValue::from(op == "//" ? q : x - q * y);
    }

    // The arguments of a call, positional then keyword, against a parameter list.
    std::vector<TemplateValue> arguments(Expr const& e, std::size_t first,
                                 std::vector<std::string_view> const& parameters,
                                 std::string const& what) {
        std::vector<TemplateValue> values(parameters.size(), TemplateValue::undefined());
        std::size_t const positional = e.args.size() - first - e.keywords.size();
        if (positional > parameters.size())
            error(e.line,
                  what + " takes at most " + std::to_string(parameters.size()) + " arguments");
        for (std::size_t i = 0; i < positional; ++i) values[i] = eval(*e.args[first + i]);
        for (std::size_t k = 0; k < e.keywords.size(); ++k) {
            auto const at = std::find(parameters.begin(), parameters.end(), e.keywords[k]);
            if (at == parameters.end())
                error(e.line, what + " has no argument '" + e.keywords[k] + "'");
            values[static_cast<std::size_t>(at - parameters.begin())] =
                eval(*e.args[first + positional + k]);
        }
        return values;
    }

    TemplateValue call(Expr const& e) {
        if (e.name == "raise_exception") {
            auto const args = arguments(e, 0, {"message"}, "raise_exception()");
            throw RequestError("chat template raised: " + to_text(args[0]));
        }
        if (e.name == "namespace") {
            Dict entries;
            if (e.args.size() != e.keywords.size())
                error(e.line, "namespace() takes keyword arguments only");
            for (std::size_t k = 0; k < e.keywords.size(); ++k)
                entries.emplace_back(e.keywords[k], eval(*e.args[k]));
            return TemplateValue::make_namespace(std::move(entries));
        }
        if (e.name == "strftime_now") {
            auto const args = arguments(e, 0, {"format"}, "strftime_now()");
            if (!args[0].is(TemplateValue::Kind::string))
                error(e.line, "strftime_now() takes a format string");
            std::time_t const t = now_ ? now_() : std::time(nullptr);
            std::tm parts{};
            gmtime_r(&t, &parts);
            char buffer[256];
            std::size_t const n =
                std::strftime(buffer, sizeof buffer, args[0].string.c_str(), &parts);
            return TemplateValue::from(std::string(buffer, n));
        }
        // range(stop) / range(start, stop[, step])
        auto const args = arguments(e, 0, {"a", "b", "c"}, "range()");
        std::vector<std::int64_t> bounds;
        for (TemplateValue const& v : args) {
            if (v.is(TemplateValue::Kind::undefined)) continue;
            if (!v.is(TemplateValue::Kind::integer) && !v.is(TemplateValue::Kind::boolean))
                error(e.line, "range() takes integers");
            bounds.push_back(as_integer(v));
        }
        if (bounds.empty()) error(e.line, "range() takes 1 to 3 integers");
        std::int64_t start = 0, stop = bounds[0], step = 1;
        if (bounds.size() > 1) start = bounds[0], stop = bounds[1];
        if (bounds.size() > 2) step = bounds[2];
        if (step == 0) error(e.line, "range() step must not be zero");
        List items;
        for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (static_cast<std::int64_t>(items.size()) >= limits_.max_range)
                error(e.line, "range() longer than " + std::to_string(limits_.max_range));
            items.push_back(TemplateValue::from(i));
        }
        return TemplateValue::from(std::move(items));
    }

    TemplateValue method(Expr const& e) {
        TemplateValue object = eval(*e.args[0]);
        std::string const& name = e.name;
        auto const what = "." + name + "()";
        if (object.is(TemplateValue::Kind::string)) {
            std::string const& s = object.string;
            if (name == "strip" || name == "lstrip" || name == "rstrip") {
                auto const args = arguments(e, 1, {"chars"}, what);
                std::optional<std::string_view> chars;
                if (args[0].is(TemplateValue::Kind::string)) chars = args[0].string;
                return TemplateValue::from(strip(s, name != "rstrip", name != "lstrip", chars));
            }
            if (name == "upper" || name == "lower")
                return TemplateValue::from(ascii_case(s, name == "upper"));
            if (name == "capitalize" || name == "title")
                return TemplateValue::from(name == "title" ? title(s) : capitalize(s));
            if (name == "startswith" || name == "endswith") {
                auto const args = arguments(e, 1, {"prefix"}, what);
                if (!args[0].is(TemplateValue::Kind::string)) error(e.line, what + " takes a string");
                return TemplateValue::from(name == "startswith" ? s.starts_with(args[0].string)
                                                        : s.ends_with(args[0].string));
            }
            if (name == "replace") {
                auto const args = arguments(e, 1, {"old", "new", "count"}, what);
                return TemplateValue::from(replace(s, args[0], args[1], args[2], e.line));
            }
            if (name == "split") {
                auto const args = arguments(e, 1, {"sep", "maxsplit"}, what);
                return TemplateValue::from(split(s, args[0], e.line));
            }
        }
        if (object.is(TemplateValue::Kind::dict)) {
            if (name == "items" || name == "keys" || name == "values") {
                List items;
                for (auto const& [k, v] : *object.dict) {
                    if (name == "items")
                        items.push_back(TemplateValue::from(List{TemplateValue::from(k), v}));
                    else
                        items.push_back(name == "keys" ? TemplateValue::from(k) : v);
                }
                return TemplateValue::from(std::move(items));
            }
            if (name == "get") {
                auto const args = arguments(e, 1, {"key", "default"}, what);
                if (args[0].is(TemplateValue::Kind::string))
                    if (TemplateValue const* v = object.find(args[0].string)) return *v;
                return args[1].is(TemplateValue::Kind::undefined) ? TemplateValue::none() : args[1];
            }
        }
        error(e.line, "a " + std::string(kind_name(object)) + " value has no method " + what);
    }

    static std::string capitalize(std::string const& s) {
        std::string out = ascii_case(s, false);
        if (!out.empty()) out[0] = ascii_case(out.substr(0, 1), true)[0];
        return out;
    }
    static std::string title(std::string const& s) {
        std::string out;
        bool word_start = true;
        for (char c : s) {
            bool const letter = std::isalpha(static_cast<unsigned char>(c));
            out += letter ? (word_start ? ascii_case(std::string(1, c), true)[0]
                                        : ascii_case(std::string(1, c), false)[0])
                          : c;
            word_start = !letter && !(static_cast<unsigned char>(c) & 0x80) &&
                         !std::isdigit(static_cast<unsigned char>(c));
        }
        return out;
    }
    std::string replace(std::string const& s, TemplateValue const& old_value, TemplateValue const& new_value,
                        TemplateValue const& count, int line) const {
        if (!old_value.is(TemplateValue::Kind::string) || !new_value.is(TemplateValue::Kind::string))
            error(line, "replace takes strings");
        std::int64_t left = count.is(TemplateValue::Kind::integer) ? count.integer : -1;
        std::string const& old_text = old_value.string;
        std::string out;
        std::size_t at = 0;
        if (old_text.empty()) {  // Python inserts `new` between every character
            auto const pieces = iterate(TemplateValue::from(s), line);
            for (TemplateValue const& p : pieces) {
                if (left != 0) out += new_value.string, --left;
                out += p.string;
                check_size(out.size(), line);
            }
            if (left != 0) out += new_value.string;
            return out;
        }
        while (left != 0) {
            auto const found = s.find(old_text, at);
            if (found == std::string::npos) break;
            out.append(s, at, found - at).append(new_value.string);
            check_size(out.size(), line);
            at = found + old_text.size();
            --left;
        }
        return out + s.substr(at);
    }
    List split(std::string const& s, TemplateValue const& separator, int line) const {
        List parts;
        if (separator.is(TemplateValue::Kind::undefined) || separator.is(TemplateValue::Kind::none)) {
            std::size_t at = 0;
            while (true) {
                at = s.find_first_not_of(" \t\n\r\v\f", at);
                if (at == std::string::npos) break;
                std::size_t const end = s.find_first_of(" \t\n\r\v\f", at);
                parts.push_back(TemplateValue::from(
                    s.substr(at, end == std::string::npos ? std::string::npos : end - at)));
                if (end == std::string::npos) break;
                at = end;
            }
            return parts;
        }
        if (!separator.is(TemplateValue::Kind::string) || separator.string.empty())
            error(line, "split takes a non-empty string separator");
        std::size_t at = 0;
        while (true) {
            auto const found = s.find(separator.string, at);
            parts.push_back(TemplateValue::from(
                s.substr(at, found == std::string::npos ? std::string::npos : found - at)));
            if (found == std::string::npos) return parts;
            at = found + separator.string.size();
        }
    }

    // A test by name on an evaluated value (the `is` tests, and select/reject's).
    bool run_test(std::string const& name, TemplateValue const& v, std::vector<TemplateValue> const& args,
                  int line) const {
        auto const arg = [&]() -> TemplateValue const& {
            if (args.empty() || args[0].is(TemplateValue::Kind::undefined))
                error(line, "test '" + name + "' needs an argument");
            return args[0];
        };
        using K = TemplateValue::Kind;
        if (name == "defined") return !v.is(K::undefined);
        if (name == "undefined") return v.is(K::undefined);
        if (name == "none") return v.is(K::none);
        if (name == "boolean") return v.is(K::boolean);
        if (name == "true") return v.is(K::boolean) && v.boolean;
        if (name == "false") return v.is(K::boolean) && !v.boolean;
        if (name == "integer") return v.is(K::integer);
        if (name == "float") return v.is(K::real);
        if (name == "number") return v.is_number();
        if (name == "string") return v.is(K::string);
        if (name == "mapping") return v.is(K::dict);
        if (name == "iterable" || name == "sequence")
            return v.is(K::string) || v.is(K::list) || v.is(K::dict);
        if (name == "even" || name == "odd") {
            if (!v.is(K::integer) && !v.is(K::boolean))
                error(line, "test '" + name + "' on a " + kind_name(v));
            return (as_integer(v) % 2 == 0) == (name == "even");
        }
        if (name == "divisibleby") {
            TemplateValue const& d = arg();
            if (!v.is_number() || !d.is_number() || as_double(d) == 0)
                error(line, "divisibleby needs a non-zero number");
            return std::fmod(as_double(v), as_double(d)) == 0;
        }
        if (name == "eq" || name == "equalto") return equal(v, arg());
        if (name == "ne") return !equal(v, arg());
        if (name == "in") return contains(arg(), v, line);
        // lt, le, gt, ge
        TemplateValue const& other = arg();
        double x = 0, y = 0;
        if (v.is_number() && other.is_number())
            x = as_double(v), y = as_double(other);
        else if (v.is(K::string) && other.is(K::string))
            x = v.string.compare(other.string), y = 0;
        else
            error(line, "test '" + name + "' cannot compare a " + kind_name(v) + " and a " +
                            kind_name(other));
        return name == "lt" ? x < y : name == "le" ? x <= y : name == "gt" ? x > y : x >= y;
    }

    bool test(Expr const& e) {
        TemplateValue v = eval(*e.args[0]);
        std::vector<TemplateValue> args;
        for (std::size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
        return run_test(e.name, v, args, e.line);
    }

    std::size_t length(TemplateValue const& v, int line) const {
        switch (v.kind) {
            case TemplateValue::Kind::undefined:
                return 0;
            case TemplateValue::Kind::string:
                return code_point_count(v.string);
            case TemplateValue::Kind::list:
                return v.list->size();
            case TemplateValue::Kind::dict:
                return v.dict->size();
            default:
                error(line, std::string("a ") + kind_name(v) + " value has no length");
        }
    }

    TemplateValue filter(Expr const& e) {
        TemplateValue v = eval(*e.args[0]);
        std::string const& name = e.name;
        auto const what = "filter '" + name + "'";
        if (name == "trim") {
            auto const args = arguments(e, 1, {"chars"}, what);
            std::optional<std::string_view> chars;
            if (args[0].is(TemplateValue::Kind::string)) chars = args[0].string;
            return TemplateValue::from(strip(to_text(v), true, true, chars));
        }
        if (name == "length" || name == "count")
            return TemplateValue::from(static_cast<std::int64_t>(length(v, e.line)));
        if (name == "upper" || name == "lower")
            return TemplateValue::from(ascii_case(to_text(v), name == "upper"));
        if (name == "capitalize") return TemplateValue::from(capitalize(to_text(v)));
        if (name == "title") return TemplateValue::from(title(to_text(v)));
        if (name == "string") return TemplateValue::from(to_text(v));
        if (name == "safe") return v;
        if (name == "default" || name == "d") {
            auto const args = arguments(e, 1, {"default_value", "boolean"}, what);
            bool const use_default =
                v.is(TemplateValue::Kind::undefined) || (truthy(args[1]) && !truthy(v));
            if (!use_default) return v;
            return args[0].is(TemplateValue::Kind::undefined) ? TemplateValue::from("") : args[0];
        }
        if (name == "tojson") {
            auto const args = arguments(e, 1, {"indent"}, what);
            std::optional<int> indent;
            if (args[0].is(TemplateValue::Kind::integer))
                indent = static_cast<int>(std::clamp<std::int64_t>(args[0].integer, 0, 64));
            else if (!args[0].is(TemplateValue::Kind::undefined) && !args[0].is(TemplateValue::Kind::none))
                error(e.line, "tojson's indent must be an integer");
            std::string out;
            append_json(out, v, indent, 0);
            check_size(out.size(), e.line);
            return TemplateValue::from(std::move(out));
        }
        if (name == "join") {
            auto const args = arguments(e, 1, {"d", "attribute"}, what);
            std::string out;
            bool first = true;
            for (TemplateValue const& item : iterate(v, e.line)) {
                if (!first) out += to_text(args[0]);
                first = false;
                out += to_text(
                    args[1].is(TemplateValue::Kind::undefined) ? item : get_item(item, args[1], e.line));
                check_size(out.size(), e.line);
            }
            return TemplateValue::from(std::move(out));
        }
        if (name == "first" || name == "last") {
            List items = iterate(v, e.line);
            if (items.empty()) return TemplateValue::undefined(name);
            return name == "first" ? items.front() : items.back();
        }
        if (name == "list") return TemplateValue::from(iterate(v, e.line));
        if (name == "reverse") {
            List items = iterate(v, e.line);
            std::reverse(items.begin(), items.end());
            if (!v.is(TemplateValue::Kind::string)) return TemplateValue::from(std::move(items));
            std::string out;
            for (TemplateValue const& p : items) out += p.string;
            return TemplateValue::from(std::move(out));
        }
        if (name == "unique") {
            List kept;
            for (TemplateValue const& item : iterate(v, e.line))
                if (std::none_of(kept.begin(), kept.end(),
                                 [&](TemplateValue const& k) { return equal(k, item); }))
                    kept.push_back(item);
            return TemplateValue::from(std::move(kept));
        }
        if (name == "items") {
            if (v.is(TemplateValue::Kind::undefined)) return TemplateValue::from(List{});
            if (!v.is(TemplateValue::Kind::dict)) error(e.line, "filter 'items' needs a mapping");
            List items;
            for (auto const& [k, x] : *v.dict)
                items.push_back(TemplateValue::from(List{TemplateValue::from(k), x}));
            return TemplateValue::from(std::move(items));
        }
        if (name == "replace") {
            auto const args = arguments(e, 1, {"old", "new", "count"}, what);
            return TemplateValue::from(replace(to_text(v), args[0], args[1], args[2], e.line));
        }
        if (name == "abs") {
            if (!v.is_number()) error(e.line, "filter 'abs' on a " + std::string(kind_name(v)));
            return v.is(TemplateValue::Kind::real)
                       ? TemplateValue::from(std::fabs(v.real))
                       : TemplateValue::from(as_integer(v) < 0 ? -as_integer(v) : as_integer(v));
        }
        if (name == "int" || name == "float") {
            auto const args = arguments(e, 1, {"default"}, what);
            TemplateValue const fallback = args[0].is(TemplateValue::Kind::undefined)
                                       ? (name == "int" ? TemplateValue::from(0) : TemplateValue::from(0.0))
                                       : args[0];
            if (v.is_number())
                return name == "int" ? TemplateValue::from(static_cast<std::int64_t>(as_double(v)))
                                     : TemplateValue::from(as_double(v));
            if (v.is(TemplateValue::Kind::string)) {
                std::string const text = strip(v.string, true, true);
                if (name == "int") {
                    std::int64_t i = 0;
                    auto const [end, ec] =
                        std::from_chars(text.data(), text.data() + text.size(), i);
                    return ec == std::errc{} && end == text.data() + text.size() && !text.empty()
                               ? TemplateValue::from(i)
                               : fallback;
                }
                double d = 0;
                auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
                return ec == std::errc{} && end == text.data() + text.size() && !text.empty()
                           ? TemplateValue::from(d)
                           : fallback;
            }
            return fallback;
        }
        if (name == "map") {
            std::size_t const positional = e.args.size() - 1 - e.keywords.size();
            List out;
            if (positional == 0 && e.keywords.size() >= 1 && e.keywords[0] == "attribute") {
                auto const args = arguments(e, 1, {"attribute", "default"}, what);
                for (TemplateValue const& item : iterate(v, e.line)) {
                    TemplateValue x = get_item(item, args[0], e.line);
                    out.push_back(x.is(TemplateValue::Kind::undefined) &&
                                          !args[1].is(TemplateValue::Kind::undefined)
                                      ? args[1]
                                      : x);
                }
                return TemplateValue::from(std::move(out));
            }
            error(e.line,
                  "unsupported Jinja construct: filter 'map' other than map(attribute=...)");
        }
        // select, reject, selectattr, rejectattr
        bool const by_attribute = name.ends_with("attr");
        bool const keep_matching = name.starts_with("select");
        std::size_t const first_arg = 1 + (by_attribute ? 1 : 0);
        if (!e.keywords.empty()) error(e.line, what + " takes positional arguments only");
        TemplateValue attribute = by_attribute && e.args.size() > 1 ? eval(*e.args[1]) : TemplateValue::undefined();
        if (by_attribute && !attribute.is(TemplateValue::Kind::string))
            error(e.line, what + " needs an attribute name");
        std::string test_name;
        std::vector<TemplateValue> test_args;
        if (e.args.size() > first_arg) {
            TemplateValue t = eval(*e.args[first_arg]);
            if (!t.is(TemplateValue::Kind::string) || !listed(supported_tests, t.string))
                error(e.line, "unsupported Jinja construct: test " + repr(t) + " in " + what);
            test_name = t.string;
            for (std::size_t i = first_arg + 1; i < e.args.size(); ++i)
                test_args.push_back(eval(*e.args[i]));
        }
        List kept;
        for (TemplateValue const& item : iterate(v, e.line)) {
            step(e.line);
            TemplateValue const subject = by_attribute ? get_item(item, attribute, e.line) : item;
            bool const matches = test_name.empty()
                                     ? truthy(subject)
                                     : run_test(test_name, subject, test_args, e.line);
            if (matches == keep_matching) kept.push_back(item);
        }
        return TemplateValue::from(std::move(kept));
    }

    std::vector<Scope> scopes_;
    std::function<std::time_t()> const& now_;
    RenderLimits limits_;
    std::uint64_t steps_ = 0;
};

}  // namespace detail

inline std::string Template::render(Dict const& variables, std::function<std::time_t()> const& now,
                                    RenderLimits limits) const {
    detail::Renderer renderer(variables, now, limits);
    std::string out;
    renderer.run(*body_, out);
    return out;
}

}  // namespace tinfer::jinja
