#pragma once
// For the grammar tests: random JSON schemas of the supported subset, and a validator of that
// subset written from the JSON Schema rules (independently of json_schema.hpp's compiler).
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace grammar_test {

using nlohmann::json;

inline bool valid(json const& v, json const& s) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("const")) return v == s["const"];
    if (s.contains("enum")) {
        for (auto const& e : s["enum"])
            if (v == e) return true;
        return false;
    }
    if (s.contains("anyOf")) {
        for (auto const& sub : s["anyOf"])
            if (valid(v, sub)) return true;
        return false;
    }
    if (!s.contains("type")) return true;
    if (s["type"].is_array()) {
        for (auto const& t : s["type"]) {
            json one = s;
            one["type"] = t;
            if (valid(v, one)) return true;
        }
        return false;
    }
    std::string const t = s["type"];
    if (t == "json_object") return v.is_object();
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && false);
    if (t == "number") return v.is_number();
    if (t == "string") {
        if (!v.is_string()) return false;
        // Length in code points.
        std::size_t n = 0;
        for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
        if (s.contains("minLength") && n < s["minLength"].get<std::size_t>()) return false;
        if (s.contains("maxLength") && n > s["maxLength"].get<std::size_t>()) return false;
        return true;
    }
    if (t == "array") {
        if (!v.is_array()) return false;
        if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
        if (s.contains("items"))
            for (auto const& e : v)
                if (!valid(e, s["items"])) return false;
        return true;
    }
    if (t == "object") {
        if (!v.is_object()) return false;
        if (s.contains("required"))
            for (auto const& r : s["required"])
                if (!v.contains(r.get<std::string>())) return false;
        if (s.contains("properties")) {
            for (auto const& [k, e] : v.items()) {
                if (!s["properties"].contains(k)) return false;  // additionalProperties false
                if (!valid(e, s["properties"][k])) return false;
            }
        } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
            return v.empty();
        }
        return true;
    }
    return false;
}

inline json random_schema(std::mt19937_64& rng, int depth = 0) {
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    static char const* words[] = {"id", "name", "tags", "x", "value", "ok", "items", "é"};
    int const kind = depth >= 3 ? pick(6) : pick(10);
    switch (kind) {
        case 0:
            return {{"type", "integer"}};
        case 1:
            return {{"type", "number"}};
        case 2:
            return {{"type", "boolean"}};
        case 3: {
            json s = {{"type", "string"}};
            if (pick(2)) s["maxLength"] = pick(8);
            if (pick(3) == 0) s["minLength"] = pick(3);
            if (s.contains("maxLength") && s.contains("minLength") &&
                s["minLength"] > s["maxLength"])
                s.erase("minLength");
            return s;
        }
        case 4:
            return {{"enum", json::array({"red", 1, nullptr, json::array({1, 2})})}};
        case 5:
            return {{"const", "fixed"}};
        case 6: {
            json s = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
            if (pick(2)) s["minItems"] = pick(2);
            s["maxItems"] = pick(4) + (s.value("minItems", 0));
            return s;
        }
        case 7:
            return {{"anyOf", json::array({random_schema(rng, depth + 1), {{"type", "null"}}})}};
        case 8:
            return {{"type", json::array({"integer", "string"})}, {"maxLength", 4}};
        default: {
            json s = {{"type", "object"}};
            json props = json::object();
            json req = json::array();
            int const n = 1 + pick(4);
            for (int i = 0; i < n; ++i) {
                std::string const k = words[pick(8)] + std::to_string(i);
                props[k] = random_schema(rng, depth + 1);
                if (pick(2)) req.push_back(k);
            }
            s["properties"] = props;
            s["required"] = req;
            return s;
        }
    }
}

}  // namespace grammar_test
