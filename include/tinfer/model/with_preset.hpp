#pragma once
// Runs code generated for a compile-time shape on a file whose shape is only known at run
// time: with_preset<presets::smollm2_135m, my_shape>(file, [&]<ModelConfig Cfg>() { ... })
// calls the lambda with the first listed shape the file matches in every hyperparameter (the
// KV dtype is the cache's choice, not the file's). The list is the instantiation budget; a file
// matching none raises tinfer::Error naming the file's shape and every shape compiled in.
#include <utility>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/dispatch.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/hyperparameters.hpp>

namespace tinfer::model {

template <ModelConfig... Shapes, class Body>
requires(sizeof...(Shapes) > 0 && (ModelShape<Shapes> && ...)) decltype(auto)
    with_preset(gguf::File const& file, Body&& body) {
    return dispatch<Shapes...>(
        file, std::forward<Body>(body),
        [](gguf::File const& f, ModelConfig const& shape) {
            return model::matches_hyperparameters(f, shape);
        },
        "model file, whose shape compiles as `" + model::describe_hyperparameters(file) +
            "` (add it to the compiled-in shapes)");
}

}  // namespace tinfer::model
