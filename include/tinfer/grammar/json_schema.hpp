#pragma once
// JSON Schema -> grammar text (grammar.hpp's notation), for the subset below. What it emits
// is compact JSON: no whitespace but one optional space after ':' and ','; properties in the
// schema's order. A keyword outside the subset is refused, naming it.
//
//   type: object, array, string, integer, number, boolean, null, or a list of these
//   object: properties, required; additionalProperties false is the default (and only
//     choice) when properties are given; an object without properties is any JSON object
//   array: items (absent: any value), minItems, maxItems
//   string: minLength, maxLength (in characters); no `pattern` or `format` (refused)
//   enum, const (any JSON values), anyOf (alternatives)
//   annotations ignored: title, description, $schema, $id, default, examples, $comment
// {"type": "json_object"} (OpenAI's response_format) is any JSON object; {} is any JSON value.
// Numbers are bounded (at most 16 integer digits, 15 fraction digits, 2 exponent digits: a double
// holds it) so a sampled number ends; strings are well-formed UTF-8 with JSON escapes.
#include <cctype>
#include <concepts>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <tinfer/grammar/grammar.hpp>

namespace tinfer::grammar {

class JsonSchemaError : public GrammarError {
  public:
    using GrammarError::GrammarError;
};

namespace detail {

// Json: nlohmann::json or nlohmann::ordered_json (which keeps the schema's property order).
template <class Json>
class SchemaCompiler {
  public:
    std::string compile(Json const& schema) {
        std::string const root = rule_for(schema, "root");
        std::string out = "root ::= " + root + "\n";
        out += R"(ws ::= " "?
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
array ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" char* "\""
char ::= [\x20-\x21\x23-\x5B\x5D-\x7F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex ) | utf8
utf8 ::= [\xC2-\xDF] cont | "\xE0" [\xA0-\xBF] cont | [\xE1-\xEC\xEE\xEF] cont cont | "\xED" [\x80-\x9F] cont | "\xF0" [\x90-\xBF] cont cont | [\xF1-\xF3] cont cont cont | "\xF4" [\x80-\x8F] cont cont
cont ::= [\x80-\xBF]
hex ::= [0-9a-fA-F]
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
)";
        return out + rules_;
    }

  private:
    [[noreturn]] static void refuse(std::string const& keyword, std::string const& why) {
        throw JsonSchemaError("json schema: keyword '" + keyword + "' " + why);
    }
    std::string fresh(std::string_view hint) {
        std::string name = "s" + std::to_string(++counter_) + "-";
        for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
        if (name.size() > 40) name.resize(40);
        return name;
    }
    std::string define(std::string_view hint, std::string const& body) {
        std::string name = fresh(hint);
        rules_ += name + " ::= " + body + "\n";
        return name;
    }
    // A literal's bytes as a grammar string.
    static std::string literal(std::string_view bytes) {
        std::string out = "\"";
        static char const* hex = "0123456789ABCDEF";
        for (unsigned char c : bytes) {
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7F) {
                out += "\\x";
                out += hex[c >> 4];
                out += hex[c & 15];
            } else {
                out += static_cast<char>(c);
            }
        }
        return out + "\"";
    }
    static int count_of(Json const& s, char const* key) {
        auto const& v = s.at(key);
        if (!v.is_number_integer() || v.template get<long long>() < 0 ||
            v.template get<long long>() > 1000)
            refuse(key, "must be an integer in [0, 1000]");
        return v.template get<int>();
    }

    std::string rule_for(Json const& s, std::string_view hint) {
        if (s.is_boolean()) {
            if (s.template get<bool>()) return "value";
            refuse("false", "(a schema that matches nothing) cannot be generated");
        }
        if (!s.is_object()) throw JsonSchemaError("json schema: a schema must be an object");
        static std::set<std::string> const known = {
            "type",      "properties",  "required", "additionalProperties",
            "items",     "minItems",    "maxItems", "minLength",
            "maxLength", "enum",        "const",    "anyOf",
            "title",     "description", "$schema",  "$id",
            "default",   "examples",    "$comment"};
        for (auto const& [key, _] : s.items())
            if (!known.contains(key)) refuse(key, "is not supported");
        if (s.contains("const")) return literal(s["const"].dump());
        if (s.contains("enum")) {
            if (!s["enum"].is_array() || s["enum"].empty())
                refuse("enum", "must be a non-empty array");
            std::string body;
            for (auto const& v : s["enum"]) body += (body.empty() ? "" : " | ") + literal(v.dump());
            return define(std::string(hint) + "-enum", body);
        }
        if (s.contains("anyOf")) {
            if (!s["anyOf"].is_array() || s["anyOf"].empty())
                refuse("anyOf", "must be a non-empty array");
            std::string body;
            for (auto const& sub : s["anyOf"])
                body += (body.empty() ? "" : " | ") + rule_for(sub, hint);
            return define(std::string(hint) + "-any", body);
        }
        if (!s.contains("type")) return "value";
        auto const& type = s["type"];
        if (type.is_array()) {
            std::string body;
            for (auto const& t : type) {
                Json one = s;
                one["type"] = t;
                body += (body.empty() ? "" : " | ") + rule_for(one, hint);
            }
            if (body.empty()) refuse("type", "must not be an empty list");
            return define(std::string(hint) + "-types", body);
        }
        if (!type.is_string()) refuse("type", "must be a string or a list of strings");
        std::string const t = type.template get<std::string>();
        if (t == "json_object") return "object";
        if (t == "boolean" || t == "null" || t == "integer" || t == "number") return t;
        if (t == "string") return string_rule(s, hint);
        if (t == "array") return array_rule(s, hint);
        if (t == "object") return object_rule(s, hint);
        refuse("type", "has the unknown value '" + t + "'");
    }

    std::string string_rule(Json const& s, std::string_view hint) {
        if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
        int const min = s.contains("minLength") ? count_of(s, "minLength") : 0;
        std::string rep = "{" + std::to_string(min) + ",";
        if (s.contains("maxLength")) {
            int const max = count_of(s, "maxLength");
            if (max < min) refuse("maxLength", "is below minLength");
            rep += std::to_string(max);
        }
        return define(std::string(hint) + "-str", "\"\\\"\" char" + rep + "} \"\\\"\"");
    }

    std::string array_rule(Json const& s, std::string_view hint) {
        std::string const item =
            s.contains("items") ? rule_for(s["items"], std::string(hint) + "-item") : "value";
        int const min = s.contains("minItems") ? count_of(s, "minItems") : 0;
        int const max = s.contains("maxItems") ? count_of(s, "maxItems") : -1;
        if (max >= 0 && max < min) refuse("maxItems", "is below minItems");
        std::string const more = "( \",\" ws " + item + " )";
        std::string body;
        if (max == 0) {
            body = "\"[\" ws \"]\"";
        } else {
            std::string rest = "{" + std::to_string(min > 0 ? min - 1 : 0) + "," +
                               (max >= 0 ? std::to_string(max - 1) : std::string()) + "}";
            std::string const items = item + " " + more + rest;
            body = "\"[\" ws " + (min > 0 ? items : "( " + items + " )?") + " \"]\"";
        }
        return define(std::string(hint) + "-arr", body);
    }

    std::string object_rule(Json const& s, std::string_view hint) {
        if (!s.contains("properties")) {
            if (s.contains("required") && !s["required"].empty())
                refuse("required", "needs properties");
            if (s.contains("additionalProperties") && s["additionalProperties"] == false)
                return "\"{\" ws \"}\"";
            return "object";
        }
        if (s.contains("additionalProperties") && s["additionalProperties"] != false)
            refuse("additionalProperties", "may only be false when properties are given");
        auto const& props = s["properties"];
        if (!props.is_object()) refuse("properties", "must be an object");
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) refuse("required", "must be an array");
            for (auto const& r : s["required"]) {
                if (!r.is_string() || !props.contains(r.template get<std::string>()))
                    refuse("required", "names a property that is not in properties");
                required.insert(r.template get<std::string>());
            }
        }
        // kv_i is one property; after_i: the rest when one was already written (so each
        // starts with a comma); first_i: the rest when none was written yet.
        std::vector<std::string> kv;
        std::vector<bool> req;
        for (auto const& [name, sub] : props.items()) {
            kv.push_back(literal(Json(name).dump()) + " \":\" ws " +
                         rule_for(sub, std::string(hint) + "-" + name));
            req.push_back(required.contains(name));
        }
        std::size_t const n = kv.size();
        std::vector<std::string> after(n + 1), first(n + 1);
        after[n] = "\"\"";
        first[n] = "\"\"";
        for (std::size_t i = n; i-- > 0;) {
            std::string const with = "\",\" ws " + kv[i] + " " + after[i + 1];
            after[i] = req[i] ? with : "( \",\" ws " + kv[i] + " )? " + after[i + 1];
            if (i + 1 < n) after[i] = define(std::string(hint) + "-after", after[i]);
            std::string const here = kv[i] + " " + after[i + 1];
            first[i] = req[i] ? here : here + " | " + first[i + 1];
            first[i] = define(std::string(hint) + "-first", first[i]);
        }
        return define(std::string(hint) + "-obj", "\"{\" ws " + first[0] + " \"}\"");
    }

    std::string rules_;
    int counter_ = 0;
};

}  // namespace detail

// The grammar text for a schema (to show, log or edit), and the grammar itself. Properties
// come in the order the schema object holds them: parsed from text, the schema's own order.
template <class Json>
concept JsonValue =
    std::same_as<Json, nlohmann::json> || std::same_as<Json, nlohmann::ordered_json>;

template <JsonValue Json>
std::string json_schema_to_grammar_text(Json const& schema) {
    return detail::SchemaCompiler<Json>{}.compile(schema);
}
template <JsonValue Json>
Grammar json_schema_to_grammar(Json const& schema) {
    return Grammar::parse(json_schema_to_grammar_text(schema));
}
inline nlohmann::ordered_json parse_json_schema(std::string_view schema_text) {
    try {
        return nlohmann::ordered_json::parse(schema_text);
    } catch (nlohmann::json::exception const& e) {
        throw JsonSchemaError(std::string("json schema: not JSON: ") + e.what());
    }
}
inline Grammar json_schema_to_grammar(std::string_view schema_text) {
    return json_schema_to_grammar(parse_json_schema(schema_text));
}

}  // namespace tinfer::grammar
