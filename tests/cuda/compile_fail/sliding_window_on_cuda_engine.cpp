// Sliding-window layers keep layer groups the device cache does not have: an Engine of such a
// shape on the CUDA backend is refused at compile time (Gemma 3 270M, say), naming the part.
#include <tinfer/engine/cuda_backend.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/sched/scheduler.hpp>

namespace {
namespace s = tinfer::sched;
using Serving =
    s::Scheduler<s::ContinuousBatching<8, 512>, s::WholePrompt, s::PreemptBySwap, s::Fcfs>;
}  // namespace

tinfer::Engine<tinfer::model::Llama<tinfer::presets::gemma3_270m>, Serving, tinfer::Cuda>* engine =
    nullptr;
std::size_t size = sizeof(*engine);
