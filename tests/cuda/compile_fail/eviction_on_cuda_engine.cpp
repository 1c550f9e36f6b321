// Token eviction addresses cache slots apart from positions, which the device kernels do not:
// an Engine on the CUDA backend with an eviction policy is refused at compile time.
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
using Evicting = s::Scheduler<s::ContinuousBatching<8, 512>, s::WholePrompt, s::PreemptBySwap,
                              s::Fcfs, s::AttentionSinks<4, 60>>;
}  // namespace

tinfer::Engine<tinfer::model::Llama<shape>, Evicting, tinfer::Cuda>* engine = nullptr;
std::size_t size = sizeof(*engine);
