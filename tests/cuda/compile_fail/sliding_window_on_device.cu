// The device layer has no sliding-window mask yet: a shape with a window is refused where its
// device model is compiled, naming the part, never run as full attention.
#include <tinfer/model/cuda/device_llama.cuh>

namespace {
constexpr tinfer::ModelConfig windowed{.layers = 2,
                                       .hidden = 128,
                                       .heads = 4,
                                       .kv_heads = 2,
                                       .head_dim = 64,
                                       .ffn = 256,
                                       .vocab = 96,
                                       .max_context = 512,
                                       .sliding_window = 64};
}

void run(tinfer::model::ModelWeights<windowed> const& weights) {
    tinfer::cuda::DeviceLlama<windowed> model(weights);
    model.forward({}, {});
}
