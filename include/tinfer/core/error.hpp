#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tinfer {

// Base of every error tinfer raises on bad input; never thrown for programming errors.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A malformed or unsupported model file. The message names the byte offset and what was
// expected there.
struct FormatError : Error {
    std::uint64_t offset;
    FormatError(std::uint64_t byte_offset, std::string const& what)
        : Error("GGUF error at byte " + std::to_string(byte_offset) + ": " + what),
          offset(byte_offset) {}
};

// A model file whose hyperparameters do not match the compile-time config it is bound to.
struct ConfigMismatch : Error {
    using Error::Error;
};

// A request the engine cannot serve (too long for the cache, bad sampling settings, ...).
struct RequestError : Error {
    using Error::Error;
};

}  // namespace tinfer
