// Static against dynamic extents, kernel by kernel, from one source (core/extent.hpp): each
// kernel is compiled once with its dimensions as StaticExtent (generated for the shape) and
// once as DynamicExtent (one instantiation for every shape), run side by side on the same
// seeded inputs, and timed as the median of repeated runs on one thread. The two forms must
// agree bitwise (the same operations in the same order); the program fails if they do not.
//
// usage: specialization [--repeats N] [--markdown]
// Shapes: SmolLM2 (hidden 576, head_dim 64, 9 query / 3 KV heads), Gemma 3 270M (hidden 640,
// head_dim 256, 4 / 1), and synthetic head_dim 64/128/256 with GQA groups 1/3/8.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <tinfer/core/extent.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kv/kv_view.hpp>

namespace {

using namespace tinfer;
using Clock = std::chrono::steady_clock;

int repeats = 21;
bool markdown = false;
int failures = 0;

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

// Calls of `f` that last about 2 ms together.
template <class F>
int calibrated_calls(F& f) {
    int calls = 1;
    for (;;) {
        auto const start = Clock::now();
        for (int i = 0; i < calls; ++i) f();
        double const s = std::chrono::duration<double>(Clock::now() - start).count();
        if (s > 2e-3 || calls > (1 << 22)) return calls;
        calls *= 2;
    }
}

template <class F>
double seconds_per_call(F& f, int calls) {
    auto const start = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

struct Timing {
    double static_seconds, dynamic_seconds;
};

// Median seconds per call of each form, their samples interleaved (static, dynamic, static,
// ...) so that a change in the machine's load falls on both alike.
template <class Static, class Dynamic>
Timing side_by_side(Static&& fixed, Dynamic&& any) {
    int const calls = std::max(calibrated_calls(fixed), calibrated_calls(any));
    std::vector<double> s, d;
    for (int r = 0; r < repeats; ++r) {
        s.push_back(seconds_per_call(fixed, calls));
        d.push_back(seconds_per_call(any, calls));
    }
    return {median(s), median(d)};
}

void report(std::string const& kernel, std::string const& shape, Timing t, bool equal) {
    double const static_s = t.static_seconds, dynamic_s = t.dynamic_seconds;
    if (!equal) ++failures;
    if (markdown) {
        std::printf("| %s | %s | %.3f | %.3f | %.2f |%s\n", kernel.c_str(), shape.c_str(),
                    static_s * 1e6, dynamic_s * 1e6, dynamic_s / static_s,
                    equal ? "" : " **outputs differ**");
    } else {
        std::printf("%-22s %-34s static %10.3f us  dynamic %10.3f us  ratio %5.2f%s\n",
                    kernel.c_str(), shape.c_str(), static_s * 1e6, dynamic_s * 1e6,
                    dynamic_s / static_s, equal ? "" : "  OUTPUTS DIFFER");
    }
    std::fflush(stdout);
}

// ---- RMSNorm over `width`, `rows` rows (QK-norm: width = head_dim, a row per head) ----
template <int width>
void bench_rmsnorm(char const* what, int rows) {
    auto const x = random_floats(static_cast<std::size_t>(rows) * width, 1);
    auto const w = random_floats(width, 2);
    std::vector<float> out_static(x.size()), out_dynamic(x.size());
    auto const run = [&](auto extent, std::vector<float>& out) {
        kernels::rmsnorm(extent, x.data(), w.data(), 1e-6f, rows, out.data(), 1);
    };
    Timing const t = side_by_side([&] { run(StaticExtent<width>{}, out_static); },
                                  [&] { run(DynamicExtent{width}, out_dynamic); });
    report("rmsnorm",
           std::string(what) + " width " + std::to_string(width) + " x " + std::to_string(rows), t,
           out_static == out_dynamic);
}

// ---- RoPE on `heads` heads of `rows` rows ----
template <int head_dim>
void bench_rope(char const* what, int heads, int rows) {
    std::vector<int> positions(static_cast<std::size_t>(rows));
    for (int i = 0; i < rows; ++i) positions[static_cast<std::size_t>(i)] = 1000 + i;
    std::vector<float> table(static_cast<std::size_t>(rows) * head_dim);
    kernels::rope_table(StaticExtent<head_dim>{}, 10000.0, positions.data(), rows, table.data());
    auto const x = random_floats(static_cast<std::size_t>(rows) * heads * head_dim, 3);
    std::vector<float> out_static = x, out_dynamic = x;
    std::size_t const stride = static_cast<std::size_t>(heads) * head_dim;
    Timing const t = side_by_side(
        [&] {
            kernels::apply_rope<RopePairing::neox>(StaticExtent<head_dim>{}, out_static.data(),
                                                   rows, heads, stride, table.data(), 1);
        },
        [&] {
            kernels::apply_rope<RopePairing::neox>(DynamicExtent{head_dim}, out_dynamic.data(),
                                                   rows, heads, stride, table.data(), 1);
        });
    // Both were rotated the same number of times (the calibration may differ): rerun once
    // from the same input to compare outputs.
    out_static = x;
    out_dynamic = x;
    kernels::apply_rope<RopePairing::neox>(StaticExtent<head_dim>{}, out_static.data(), rows, heads,
                                           stride, table.data(), 1);
    kernels::apply_rope<RopePairing::neox>(DynamicExtent{head_dim}, out_dynamic.data(), rows, heads,
                                           stride, table.data(), 1);
    report("rope (neox)",
           std::string(what) + " d" + std::to_string(head_dim) + " " + std::to_string(heads) +
               " heads x " + std::to_string(rows),
           t, out_static == out_dynamic);
    // The angle table, once per pass.
    std::vector<float> table_dynamic(table.size());
    Timing const tt = side_by_side(
        [&] {
            kernels::rope_table(StaticExtent<head_dim>{}, 10000.0, positions.data(), rows,
                                table.data());
        },
        [&] {
            kernels::rope_table(DynamicExtent{head_dim}, 10000.0, positions.data(), rows,
                                table_dynamic.data());
        });
    report("rope table",
           std::string(what) + " d" + std::to_string(head_dim) + " x " + std::to_string(rows), tt,
           table == table_dynamic);
}

// ---- attention: `queries` causal queries at the end of a `context`-token sequence ----
template <int head_dim, int group>
void bench_attention(char const* what, int kv_heads, int context, int queries) {
    auto const keys = random_floats(static_cast<std::size_t>(kv_heads) * context * head_dim, 4);
    auto const values = random_floats(static_cast<std::size_t>(kv_heads) * context * head_dim, 5);
    kv::FloatKvView const view{head_dim, context, keys, values};
    int const heads = kv_heads * group;
    std::size_t const row = static_cast<std::size_t>(heads) * head_dim;
    auto const q = random_floats(static_cast<std::size_t>(queries) * row, 6, 0.3f);
    std::vector<float> out_static(q.size()), out_dynamic(q.size());
    auto const chunk = [&](std::vector<float>& out) {
        return kernels::AttentionChunk{.first_position = context - queries,
                                       .queries = queries,
                                       .q = q.data(),
                                       .q_stride = row,
                                       .out = out.data(),
                                       .out_stride = row};
    };
    kernels::AttentionKernel<StaticExtent<head_dim>, StaticExtent<group>> const fixed;
    kernels::AttentionKernel<DynamicExtent, DynamicExtent, DynamicExtent, DynamicExtent> const any(
        DynamicExtent{head_dim}, DynamicExtent{group}, DynamicExtent{0}, DynamicExtent{head_dim});
    std::vector<float> scratch(std::max(fixed.scratch_floats(), any.scratch_floats()));
    Timing const t =
        side_by_side([&] { fixed.attend(view, kv_heads, chunk(out_static), 1, scratch); },
                     [&] { any.attend(view, kv_heads, chunk(out_dynamic), 1, scratch); });
    report(queries == 1 ? "attention decode" : "attention prefill",
           std::string(what) + " d" + std::to_string(head_dim) + " g" + std::to_string(group) +
               " kv" + std::to_string(kv_heads) + " ctx " + std::to_string(context) +
               (queries > 1 ? " q " + std::to_string(queries) : ""),
           t, out_static == out_dynamic);
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--repeats" && i + 1 < argc) {
            repeats = std::max(3, std::atoi(argv[++i]));
        } else if (arg == "--markdown") {
            markdown = true;
        } else {
            std::fprintf(stderr, "usage: specialization [--repeats N] [--markdown]\n");
            return 2;
        }
    }
    if (markdown) {
        std::printf("| kernel | shape | static us | dynamic us | dynamic / static |\n");
        std::printf("|---|---|---|---|---|\n");
    }
    // RMSNorm: the hidden width (one decode row, a 512-row prefill) and QK-norm over head_dim.
    bench_rmsnorm<576>("SmolLM2 hidden", 1);
    bench_rmsnorm<576>("SmolLM2 hidden", 512);
    bench_rmsnorm<640>("Gemma3 hidden", 1);
    bench_rmsnorm<640>("Gemma3 hidden", 512);
    bench_rmsnorm<64>("head_dim", 12);
    bench_rmsnorm<128>("head_dim", 12);
    bench_rmsnorm<256>("Gemma3 QK-norm", 5);
    bench_rmsnorm<256>("Gemma3 QK-norm", 5 * 512);
    // RoPE: the query and key heads of one decode row and of a prefill.
    bench_rope<64>("SmolLM2", 12, 1);
    bench_rope<64>("SmolLM2", 12, 512);
    bench_rope<128>("synthetic", 40, 1);
    bench_rope<256>("Gemma3", 5, 1);
    bench_rope<256>("Gemma3", 5, 512);
    // Attention: decode (one query) and prefill (512 causal queries).
    bench_attention<64, 3>("SmolLM2", 3, 1024, 1);
    bench_attention<64, 3>("SmolLM2", 3, 512, 512);
    bench_attention<256, 4>("Gemma3", 1, 1024, 1);
    bench_attention<256, 4>("Gemma3", 1, 512, 512);
    bench_attention<64, 1>("synthetic", 8, 1024, 1);
    bench_attention<128, 1>("synthetic", 8, 1024, 1);
    bench_attention<128, 8>("Llama-3-8B", 8, 1024, 1);
    bench_attention<128, 8>("Llama-3-8B", 8, 512, 512);
    bench_attention<256, 1>("synthetic", 4, 1024, 1);
    bench_attention<256, 8>("synthetic", 1, 1024, 1);
    if (failures > 0) {
        std::fprintf(stderr,
                     "specialization: %d kernel(s) gave different outputs static and "
                     "dynamic\n",
                     failures);
        return 1;
    }
    return 0;
}
