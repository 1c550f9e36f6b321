#include "host_llama_runs.hpp"

#include <omp.h>
#include <algorithm>
#include <cmath>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

namespace tinfer::cuda_testing {

namespace {
constexpr ModelConfig smollm2 = presets::smollm2_135m;

struct RowStatistics {
    std::int32_t argmax;  // the lowest id of the largest logit
    float margin;
    float max_abs;
};

RowStatistics statistics(float const* row) {
    std::int32_t best = 0;
    for (int i = 1; i < smollm2.vocab; ++i)
        if (row[i] > row[best]) best = i;
    float second = -INFINITY, max_abs = 0;
    for (int i = 0; i < smollm2.vocab; ++i) {
        if (i != best) second = std::max(second, row[i]);
        max_abs = std::max(max_abs, std::abs(row[i]));
    }
    return {best, row[best] - second, max_abs};
}
}  // namespace

HostLlamaRun run_host_llama(std::string const& model_path, std::span<std::int32_t const> prompt,
                            int steps) {
    using Model = model::Llama<smollm2>;
    gguf::File const file = gguf::File::open(model_path);
    Model const model = Model::bind(file);
    int const n = static_cast<int>(prompt.size());
    kv::ContiguousKvCache<smollm2> cache(1, n + steps);
    Model::Workspace ws(n, std::max(1, omp_get_max_threads()));

    HostLlamaRun run;
    run.prefill_logits.assign(static_cast<std::size_t>(n) * smollm2.vocab, NAN);
    SequenceChunk const prefill{0, 0, prompt, true};
    model.forward(std::span(&prefill, 1), cache, ws, run.prefill_logits);
    std::vector<float> logits(run.prefill_logits.end() - smollm2.vocab, run.prefill_logits.end());
    for (int i = 0; i < steps; ++i) {
        RowStatistics const s = statistics(logits.data());
        run.greedy.push_back(s.argmax);
        run.margins.push_back(s.margin);
        run.max_abs_logits.push_back(s.max_abs);
        if (i + 1 == steps) break;
        SequenceChunk const decode{0, n + i, std::span(&run.greedy.back(), 1)};
        model.forward(std::span(&decode, 1), cache, ws, logits);
    }
    return run;
}

}  // namespace tinfer::cuda_testing
