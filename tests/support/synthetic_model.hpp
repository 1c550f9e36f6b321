#pragma once
// The tests' name for the library's random-weight GGUF model (gguf/synthetic_model.hpp).
#include <tinfer/gguf/synthetic_model.hpp>

namespace tinfer::testing {
using gguf::SyntheticModel;
}  // namespace tinfer::testing
