#pragma once
// What the fuzz targets share: a check that reports what broke before it aborts (libFuzzer
// then saves the input as crash-*), and the real model files, opened once per process.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>

namespace fuzz {

// A broken promise: says which, with the offending values, and aborts.
[[noreturn]] inline void fail(std::string_view what) {
    std::fprintf(stderr, "FUZZ CHECK FAILED: %.*s\n", static_cast<int>(what.size()), what.data());
    std::abort();
}

// A check whose message is only built when it fails: messages quote the input, and building
// them for every passing check would cost more than the parsing under test.
#define FUZZ_CHECK(ok, message)                        \
    do {                                               \
        if (!(ok)) ::fuzz::fail(std::string(message)); \
    } while (false)

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

// Whether `bytes` is well-formed UTF-8 (Unicode table 3-7: no overlongs, no surrogates,
// nothing above U+10FFFF), written here rather than taken from the library under test.
inline bool valid_utf8(std::string_view bytes) {
    for (std::size_t i = 0; i < bytes.size();) {
        auto const b = [&](std::size_t k) { return static_cast<unsigned char>(bytes[i + k]); };
        unsigned char const lead = b(0);
        std::size_t length = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
        if (lead < 0x80) {
            length = 1;
        } else if (lead >= 0xC2 && lead <= 0xDF) {
            length = 2;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            length = 3;
            if (lead == 0xE0) lo = 0xA0;
            if (lead == 0xED) hi = 0x9F;
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            length = 4;
            if (lead == 0xF0) lo = 0x90;
            if (lead == 0xF4) hi = 0x8F;
        } else {
            return false;
        }
        if (i + length > bytes.size()) return false;
        for (std::size_t k = 1; k < length; ++k) {
            unsigned char const c = b(k);
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
        }
        i += length;
    }
    return true;
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
