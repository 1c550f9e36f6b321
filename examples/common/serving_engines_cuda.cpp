// --device cuda's engine (serving_engines.hpp): host code, compiled by the host compiler; its
// device model's kernels are device_models.cu's.
#include "serving_engines.hpp"

namespace tinfer {

template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Cuda, PagedKv<16>>;

}  // namespace tinfer
