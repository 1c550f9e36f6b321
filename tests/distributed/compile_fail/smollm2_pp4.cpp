// Must not compile: SmolLM2-135M's 30 layers cannot be cut into 4 equal pipeline stages.
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/presets/presets.hpp>

int main() {
    return tinfer::model::PipelineStages<tinfer::presets::smollm2_135m, 4>::layers_per_stage;
}
