#pragma once
// The KV codecs of K and V are compile-time types of the cache (PagedKvCache<Cfg, BlockSize, K,
// V>), not fields of the model's shape: one shape serves every pair, and K may differ from V
// (int8 keys with int4 values). A program that lets its user choose the pair at start-up (serve's
// --kv-cache-dtype) compiles a list of pairs and picks one by name with `with_kv_codecs`. Every
// pair in the list is one more cache and model instantiation per shape, so the list is the
// instantiation budget, as dispatch<Values...>'s list is.
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/kv/codec.hpp>

namespace tinfer::kv {

// One (K, V) choice. An empty structural type, so a value of it is a template argument of
// dispatch<...>.
template <class KeyCodec, class ValueCodec = KeyCodec>
struct KvCodecPair {
    using Key = KeyCodec;
    using Value = ValueCodec;

    // "int8" when K and V agree, "int8,int4" when they differ (serve's --kv-cache-dtype).
    static std::string name() {
        return Key::name == Value::name ? std::string(Key::name)
                                        : std::string(Key::name) + "," + std::string(Value::name);
    }
    static bool is_named(std::string_view key_name, std::string_view value_name) {
        return Key::name == key_name && Value::name == value_name;
    }
    friend std::ostream& operator<<(std::ostream& out, KvCodecPair) { return out << name(); }
};

template <class... Pairs>
struct KvCodecPairList {
    static_assert(sizeof...(Pairs) > 0, "KvCodecPairList: list at least one (K, V) pair");
    static std::vector<std::string> names() { return {Pairs::name()...}; }
};

// The pairs the library's programs offer: every codec for K and V alike, and int8 keys with
// int4 values (the pair kv-cache.md measures as the smallest with usable accuracy).
using CompiledKvCodecPairs =
    KvCodecPairList<KvCodecPair<Fp32Codec>, KvCodecPair<Fp16Codec>, KvCodecPair<Bf16Codec>,
                    KvCodecPair<Fp8E4M3Codec>, KvCodecPair<Fp8E5M2Codec>, KvCodecPair<Int8Codec>,
                    KvCodecPair<Int4Codec>, KvCodecPair<Int8Codec, Int4Codec>>;

template <class List = CompiledKvCodecPairs>
std::vector<std::string> kv_codec_pair_names() {
    return List::names();
}

namespace codec_pairs_detail {

struct RequestedPair {
    std::string_view key;
    std::string_view value;
};

template <class Body, class... Pairs>
decltype(auto) dispatch_pair(KvCodecPairList<Pairs...>*, RequestedPair requested, Body&& body) {
    std::string const what =
        "KV codec pair \"" + std::string(requested.key) +
        (requested.key == requested.value ? std::string() : "," + std::string(requested.value)) +
        "\"";
    return dispatch<Pairs{}...>(
        requested,
        [&]<auto pair>()->decltype(auto) {
            return body.template operator()<std::remove_cvref_t<decltype(pair)>>();
        },
        [](RequestedPair const& r, auto pair) { return pair.is_named(r.key, r.value); }, what);
}

}  // namespace codec_pairs_detail

// Calls body.template operator()<Pair>() for the pair of List whose K codec is named
// `key_name` and V codec `value_name` (Pair::Key, Pair::Value); an unlisted pair raises
// tinfer::Error naming the compiled-in ones.
template <class List = CompiledKvCodecPairs, class Body>
decltype(auto) with_kv_codecs(std::string_view key_name, std::string_view value_name, Body&& body) {
    return codec_pairs_detail::dispatch_pair(static_cast<List*>(nullptr), {key_name, value_name},
                                             std::forward<Body>(body));
}

// The same for a pair's name as KvCodecPair::name() spells it: "bf16" (K and V) or "int8,int4".
template <class List = CompiledKvCodecPairs, class Body>
decltype(auto) with_kv_codecs(std::string_view pair_name, Body&& body) {
    auto const comma = pair_name.find(',');
    std::string_view const key = pair_name.substr(0, comma);
    std::string_view const value =
        comma == std::string_view::npos ? key : pair_name.substr(comma + 1);
    return with_kv_codecs<List>(key, value, std::forward<Body>(body));
}

}  // namespace tinfer::kv
