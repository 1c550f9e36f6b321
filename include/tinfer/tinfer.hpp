#pragma once
// The whole public surface of tinfer in one include.
#include <tinfer/config/model_config.hpp>
#include <tinfer/config/presets.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/backend.hpp>
#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/half.hpp>
