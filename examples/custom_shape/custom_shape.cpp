// A shape no preset has, end to end through the installed package:
//   1. declare it as a ModelConfig (checked at compile time by ModelShape);
//   2. write a GGUF of it with seeded random weights (gguf/synthetic_model.hpp);
//   3. serve it with the Engine: a pp/tg measurement of one request, llama-bench style
//      (prompt tokens / prefill seconds, generated tokens / decode seconds);
//   4. time this shape's attention, RMSNorm and RoPE with every dimension static (generated for
//      the shape) against dynamic (one instantiation for any shape), from the same source, and
//      the whole forward pass both ways (Llama::forward<Precision, DynamicShapes>).
// usage: custom_shape [gguf path to write] [prompt tokens] [generated tokens]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <tinfer/tinfer.hpp>

namespace {

using namespace tinfer;
using Clock = std::chrono::steady_clock;

// The researcher's shape: 6 layers, MQA (one KV head for 5 query heads), head_dim 96.
constexpr ModelConfig my_shape{.layers = 6,
                               .hidden = 480,
                               .heads = 5,
                               .kv_heads = 1,
                               .head_dim = 96,
                               .ffn = 1280,
                               .vocab = 4096,
                               .max_context = 2048,
                               .rope_base = 10000.0,
                               .norm_eps = 1e-5,
                               .arch = {.lm_head = LmHead::separate}};
static_assert(ModelShape<my_shape>);

using Serving = sched::Scheduler<sched::ContinuousBatching<8, 1024>, sched::ChunkedPrefill<512>,
                                 sched::PreemptByRecompute, sched::Fcfs>;
using MyEngine = Engine<model::Llama<my_shape>, Serving>;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median seconds per call, static and dynamic samples interleaved.
template <class F, class G>
std::pair<double, double> side_by_side(F&& fixed, G&& any) {
    int calls = 1;
    for (auto start = Clock::now(); seconds_since(start) < 2e-3; calls *= 2) {
        start = Clock::now();
        for (int i = 0; i < calls; ++i) fixed();
    }
    std::vector<double> s, d;
    for (int r = 0; r < 15; ++r) {
        auto t = Clock::now();
        for (int i = 0; i < calls; ++i) fixed();
        s.push_back(seconds_since(t) / calls);
        t = Clock::now();
        for (int i = 0; i < calls; ++i) any();
        d.push_back(seconds_since(t) / calls);
    }
    std::ranges::sort(s);
    std::ranges::sort(d);
    return {s[s.size() / 2], d[d.size() / 2]};
}

void row(char const* kernel, std::pair<double, double> t) {
    std::printf("| %-28s | %10.2f | %10.2f | %5.2f |\n", kernel, t.first * 1e6, t.second * 1e6,
                t.second / t.first);
}

void kernel_table() {
    constexpr int d = my_shape.head_dim, group = my_shape.group_size();
    std::vector<float> x(static_cast<std::size_t>(512) * my_shape.hidden, 0.5f);
    std::vector<float> w(my_shape.hidden, 1.0f), out(x.size());
    std::printf(
        "\n| kernel (this shape)          |  static us | dynamic us | ratio |\n"
        "|---|---|---|---|\n");
    row("rmsnorm hidden x 1", side_by_side(
                                  [&] {
                                      kernels::rmsnorm(StaticExtent<my_shape.hidden>{}, x.data(),
                                                       w.data(), 1e-5f, 1, out.data());
                                  },
                                  [&] {
                                      kernels::rmsnorm(opaque_extent(my_shape.hidden), x.data(),
                                                       w.data(), 1e-5f, 1, out.data());
                                  }));
    row("rmsnorm head_dim x 6 heads",
        side_by_side(
            [&] { kernels::rmsnorm(StaticExtent<d>{}, x.data(), w.data(), 1e-5f, 6, out.data()); },
            [&] { kernels::rmsnorm(opaque_extent(d), x.data(), w.data(), 1e-5f, 6, out.data()); }));
    std::vector<int> positions(512);
    for (int i = 0; i < 512; ++i) positions[static_cast<std::size_t>(i)] = i;
    std::vector<float> table(static_cast<std::size_t>(512) * d);
    kernels::rope_table(StaticExtent<d>{}, my_shape.rope_base, positions.data(), 512, table.data());
    std::size_t const q_row = static_cast<std::size_t>(my_shape.heads) * d;
    row("rope q heads x 512 rows", side_by_side(
                                       [&] {
                                           kernels::apply_rope(StaticExtent<d>{}, x.data(), 512,
                                                               my_shape.heads, q_row, table.data());
                                       },
                                       [&] {
                                           kernels::apply_rope(opaque_extent(d), x.data(), 512,
                                                               my_shape.heads, q_row, table.data());
                                       }));
    int const context = 1024;
    std::vector<float> const keys(static_cast<std::size_t>(context) * d, 0.01f);
    std::vector<float> const values(static_cast<std::size_t>(context) * d, 0.02f);
    kv::FloatKvView const view{d, context, keys, values};
    std::vector<float> q(q_row, 0.1f), o(q_row);
    kernels::AttentionChunk const chunk{.first_position = context - 1,
                                        .queries = 1,
                                        .q = q.data(),
                                        .q_stride = q_row,
                                        .out = o.data(),
                                        .out_stride = q_row};
    kernels::AttentionKernel<StaticExtent<d>, StaticExtent<group>> const fixed;
    kernels::AttentionKernel<DynamicExtent, DynamicExtent, DynamicExtent, DynamicExtent> const any(
        opaque_extent(d), opaque_extent(group), opaque_extent(0), opaque_extent(d));
    std::vector<float> scratch(std::max(fixed.scratch_floats(), any.scratch_floats()));
    row("attention decode ctx 1024",
        side_by_side([&] { fixed.attend(view, my_shape.kv_heads, chunk, 1, scratch); },
                     [&] { any.attend(view, my_shape.kv_heads, chunk, 1, scratch); }));
}

// The whole forward pass both ways (Llama::forward with StaticShapes, what the engine runs,
// and DynamicShapes, every dimension at run time): a prefill of `prompt_tokens` and a decode
// of `generated` tokens, milliseconds per run, interleaved; the logits must agree bitwise.
bool model_rows(std::string const& path, int prompt_tokens, int generated) {
    using Model = model::Llama<my_shape>;
    auto const file = gguf::File::open(path);
    Model const m = Model::bind(file);
    typename Model::Workspace ws(prompt_tokens, 1);
    kv::ContiguousKvCache<my_shape> cache(1, prompt_tokens + generated);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_tokens));
    for (int i = 0; i < prompt_tokens; ++i) prompt[static_cast<std::size_t>(i)] = (i * 17) % 97;
    std::vector<float> fixed_logits(my_shape.vocab), any_logits(my_shape.vocab);
    auto const prefill = [&]<class Shapes>(Shapes, std::vector<float>& logits) {
        cache.clear(0);
        SequenceChunk const chunk{.slot = 0, .first_position = 0, .tokens = prompt};
        m.forward<kernels::Float32Activations, Shapes>(std::span(&chunk, 1), cache, ws, logits);
    };
    auto const decode = [&]<class Shapes>(Shapes, std::vector<float>& logits) {
        cache.clear(0);
        std::int32_t next = 1;
        for (int i = 0; i < generated; ++i) {
            SequenceChunk const chunk{
                .slot = 0, .first_position = i, .tokens = std::span(&next, 1)};
            m.forward<kernels::Float32Activations, Shapes>(std::span(&chunk, 1), cache, ws, logits);
            next = static_cast<std::int32_t>(std::ranges::max_element(logits) - logits.begin());
        }
    };
    bool equal = true;
    auto const both = [&](std::string const& what, auto const& run) {
        auto const t = side_by_side([&] { run(StaticShapes{}, fixed_logits); },
                                    [&] { run(DynamicShapes{}, any_logits); });
        std::printf("| %-28s | %10.2f | %10.2f | %5.2f |\n", what.c_str(), t.first * 1e3,
                    t.second * 1e3, t.second / t.first);
        equal = equal && fixed_logits == any_logits;
    };
    std::printf(
        "\n| whole model, f32 activations |  static ms | dynamic ms | ratio |\n"
        "|---|---|---|---|\n");
    both("prefill pp" + std::to_string(prompt_tokens), prefill);
    both("decode tg" + std::to_string(generated), decode);
    if (!equal) std::fprintf(stderr, "custom_shape: static and dynamic logits differ\n");
    return equal;
}

}  // namespace

int main(int argc, char** argv) try {
    std::string const path = argc > 1 ? argv[1] : "custom_shape.gguf";
    int const prompt_tokens = argc > 2 ? std::atoi(argv[2]) : 256;
    int const generated = argc > 3 ? std::atoi(argv[3]) : 64;

    std::ostringstream shape;
    shape << my_shape;
    std::printf("shape: %s\nKV cache: %.0f bytes per token\n", shape.str().c_str(),
                static_cast<double>(my_shape.kv_bytes_per_token()));
    {
        gguf::SyntheticModel model(my_shape, /*seed=*/20261201);
        model.with_tokenizer();
        std::vector<std::byte> const bytes = model.bytes();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<char const*>(bytes.data()),
                   static_cast<std::streamsize>(bytes.size()));
        std::printf("wrote %s (%zu bytes, seeded random f32 weights)\n", path.c_str(),
                    bytes.size());
    }

    MyEngine engine(gguf::File::open(path),
                    EngineOptions{.kv_budget_bytes = std::size_t{64} << 20, .threads = 1});
    GenerationRequest request{.max_tokens = generated, .ignore_eos = true};
    for (int i = 0; i < prompt_tokens; ++i)
        request.prompt_tokens.push_back((i * 131 + 7) % my_shape.vocab);
    request.sampling.temperature = 0;
    auto const start = Clock::now();
    std::optional<Clock::time_point> first_token;
    int tokens = 0;
    FinishReason finish = FinishReason::aborted;
    engine.submit(request, [&](TokenEvent const& e) {
        if (e.token >= 0 && !first_token) first_token = Clock::now();
        tokens += e.token >= 0;
        if (e.finish) finish = *e.finish;
    });
    engine.run_until_idle();
    auto const end = Clock::now();
    if (!first_token || tokens != generated) {
        std::fprintf(stderr, "custom_shape: generated %d of %d tokens (%s)\n", tokens, generated,
                     std::string(name_of(finish)).c_str());
        return 1;
    }
    double const prefill = std::chrono::duration<double>(*first_token - start).count();
    double const decode = std::chrono::duration<double>(end - *first_token).count();
    std::printf("engine, 1 thread: pp%d %.1f tokens/s, tg%d %.1f tokens/s (%s)\n", prompt_tokens,
                prompt_tokens / prefill, generated, (generated - 1) / decode,
                std::string(name_of(finish)).c_str());
    kernel_table();
    return model_rows(path, prompt_tokens, generated) ? 0 : 1;
} catch (std::exception const& e) {
    std::fprintf(stderr, "custom_shape: %s\n", e.what());
    return 1;
}
