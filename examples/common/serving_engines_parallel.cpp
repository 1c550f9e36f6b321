// The tensor- and pipeline-parallel serving engines (serving_engines.hpp), under MPI.
#include "serving_engines.hpp"

#ifdef TINFER_WITH_MPI
namespace tinfer {

template class Engine<
    model::Llama<presets::smollm2_135m, model::TensorParallel<3, distributed::MpiCommunicator>>,
    examples::Serving>;
template class Engine<
    model::Llama<presets::smollm2_135m, model::PipelineParallel<2, distributed::MpiCommunicator>>,
    examples::Serving>;
template class Engine<
    model::Llama<presets::gemma3_270m, model::TensorParallel<2, distributed::MpiCommunicator>>,
    examples::Serving>;

}  // namespace tinfer
#endif
