// H2O eviction reads attention probabilities, which the device attention does not compute: an
// Engine on the CUDA backend with such a policy is refused at compile time (sliding-window and
// attention-sink eviction, which read none, run there).
#include <tinfer/engine/cuda_backend.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/sched/scheduler.hpp>

namespace {
constexpr tinfer::ModelConfig shape{.layers = 2,
                                    .hidden = 128,
                                    .heads = 4,
                                    .kv_heads = 2,
                                    .head_dim = 64,
                                    .ffn = 256,
                                    .vocab = 96,
                                    .max_context = 512};
namespace s = tinfer::sched;
using HeavyHitterEviction = s::Scheduler<s::ContinuousBatching<8, 512>, s::WholePrompt,
                                         s::PreemptBySwap, s::Fcfs, s::HeavyHitters<16, 48>>;
}  // namespace

tinfer::Engine<tinfer::model::Llama<shape>, HeavyHitterEviction, tinfer::Cuda>* engine = nullptr;
std::size_t size = sizeof(*engine);
