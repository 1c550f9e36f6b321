#pragma once
// What the fuzz targets share: a check that reports what broke before it aborts (libFuzzer
// then saves the input as crash-*), and the real model files, opened once per process.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tinfer/core/error.hpp>
#include <tinfer/format/gguf.hpp>

namespace fuzz {

// A broken promise: says which, with the offending values, and aborts.
[[noreturn]] inline void fail(std::string_view what) {
    std::fprintf(stderr, "FUZZ CHECK FAILED: %.*s\n", static_cast<int>(what.size()), what.data());
    std::abort();
}

inline void check(bool ok, std::string_view what) {
    if (!ok) fail(what);
}

// Bytes as a C string literal, so a failure message can be pasted into a test.
inline std::string c_literal(std::string_view bytes, std::size_t max = 200) {
    std::string out = "\"";
    for (std::size_t i = 0; i < bytes.size() && i < max; ++i) {
        auto const c = static_cast<unsigned char>(bytes[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        }
    }
    if (bytes.size() > max) out += "...";
    return out + "\"";
}

// The GGUF file named by environment variable `variable` (run_fuzz.sh checks it exists and
// CTest passes the configured path); for LLVMFuzzerInitialize, which builds what it needs
// from it once per process.
inline tinfer::gguf::File open_model(char const* variable) {
    char const* path = std::getenv(variable);
    if (!path || !*path) fail(std::string(variable) + " is not set; it names the model file");
    try {
        return tinfer::gguf::File::open(path);
    } catch (tinfer::Error const& e) {
        fail(std::string("cannot open ") + path + ": " + e.what());
    }
}

}  // namespace fuzz
