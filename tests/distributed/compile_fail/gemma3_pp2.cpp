// Must not compile: Gemma 3 270M's 18 layers (every 6th global) in 2 stages of 9 would give the
// stages different patterns of sliding and global layers.
#include <tinfer/model/pipeline_parallel.hpp>
#include <tinfer/presets/presets.hpp>

int main() {
    return tinfer::model::PipelineStages<tinfer::presets::gemma3_270m, 2>::layers_per_stage;
}
