// Static against dynamic extents, kernel by kernel, from one source (core/extent.hpp): each
// kernel is compiled once with its dimensions as StaticExtent (generated for the shape) and
// once as DynamicExtent (one instantiation for every shape), run side by side on the same
// seeded inputs, and timed as the median of repeated runs on one thread. The two forms must
// agree bitwise (the same operations in the same order); the program fails if they do not.
//
// Time is the thread's CPU time by default: on a machine whose cores are shared with other
// jobs, wall time counts the slices the scheduler gave to them (on the 2-core CI box at load
// average 10 it swung ratios from 0.3x to 4x), CPU time counts only this thread's own work.
// --wall times wall-clock instead.
//
// usage: specialization [--repeats N] [--markdown] [--wall] [--model FILE] [--gemma3 FILE]
//                       [--model-repeats N] [--threads N] [--models-only | --kernels-only]
// Shapes: SmolLM2 (hidden 576, head_dim 64, 9 query / 3 KV heads), Gemma 3 270M (hidden 640,
// head_dim 256, 4 / 1), and synthetic head_dim 64/128/256 with GQA groups 1/3/8.
//
// Then the whole model both ways: Llama::forward with StaticShapes (what every program runs)
// and with DynamicShapes (each dimension a run-time value, from the same source), on the real
// files (SmolLM2 Q4_1 and Gemma 3 Q4_K_M, int8 activations): pp512 and tg128 as llama-bench
// defines them, the two forms' runs interleaved, their logits required to agree bitwise. The
// files default to where scripts/fetch_model.sh caches them; a missing one is skipped, said.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <tinfer/core/extent.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/kv_view.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace {

using namespace tinfer;
bool wall_clock = false;

// Seconds on the clock the run measures (see the top of this file).
double now_seconds() {
    if (wall_clock)
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

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
        double const start = now_seconds();
        for (int i = 0; i < calls; ++i) f();
        double const s = now_seconds() - start;
        if (s > 2e-3 || calls > (1 << 22)) return calls;
        calls *= 2;
    }
}

template <class F>
double seconds_per_call(F& f, int calls) {
    double const start = now_seconds();
    for (int i = 0; i < calls; ++i) f();
    return (now_seconds() - start) / calls;
}

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

struct Timing {
    double static_seconds, dynamic_seconds;
    double ratio;  // dynamic / static: the median of the ratios of adjacent samples
};

// Median seconds per call of each form, their samples interleaved (static, dynamic, static,
// ...) so that a change in the machine's load falls on both alike. The ratio is the median of
// each adjacent pair's ratio rather than the ratio of the medians: on a loaded machine a pair
// shares its moment's load, while the two medians may come from different moments.
template <class Static, class Dynamic>
Timing side_by_side(Static&& fixed, Dynamic&& any) {
    int const calls = std::max(calibrated_calls(fixed), calibrated_calls(any));
    std::vector<double> s, d, ratios;
    for (int r = 0; r < repeats; ++r) {
        // Alternate which form goes first, so neither always runs on a warmer cache.
        if (r % 2 == 0) {
            s.push_back(seconds_per_call(fixed, calls));
            d.push_back(seconds_per_call(any, calls));
        } else {
            d.push_back(seconds_per_call(any, calls));
            s.push_back(seconds_per_call(fixed, calls));
        }
        ratios.push_back(d.back() / s.back());
    }
    return {median(s), median(d), median(ratios)};
}

void report(std::string const& kernel, std::string const& shape, Timing t, bool equal) {
    double const static_s = t.static_seconds, dynamic_s = t.dynamic_seconds, ratio = t.ratio;
    if (!equal) ++failures;
    if (markdown) {
        std::printf("| %s | %s | %.3f | %.3f | %.2f |%s\n", kernel.c_str(), shape.c_str(),
                    static_s * 1e6, dynamic_s * 1e6, ratio, equal ? "" : " **outputs differ**");
    } else {
        std::printf("%-22s %-34s static %10.3f us  dynamic %10.3f us  ratio %5.2f%s\n",
                    kernel.c_str(), shape.c_str(), static_s * 1e6, dynamic_s * 1e6, ratio,
                    equal ? "" : "  OUTPUTS DIFFER");
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
                                  [&] { run(opaque_extent(width), out_dynamic); });
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
            kernels::apply_rope<RopePairing::neox>(opaque_extent(head_dim), out_dynamic.data(),
                                                   rows, heads, stride, table.data(), 1);
        });
    // Both were rotated the same number of times (the calibration may differ): rerun once
    // from the same input to compare outputs.
    out_static = x;
    out_dynamic = x;
    kernels::apply_rope<RopePairing::neox>(StaticExtent<head_dim>{}, out_static.data(), rows, heads,
                                           stride, table.data(), 1);
    kernels::apply_rope<RopePairing::neox>(opaque_extent(head_dim), out_dynamic.data(), rows, heads,
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
            kernels::rope_table(opaque_extent(head_dim), 10000.0, positions.data(), rows,
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
        opaque_extent(head_dim), opaque_extent(group), opaque_extent(0), opaque_extent(head_dim));
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

// ---- the linear kernels: y = x W^T over `cols` input features, static or dynamic ----
// Seeded weights in encoding W: the legacy blocks quantized from floats, the K-quant blocks
// random bytes under a small finite scale (their products need only be finite and repeatable).
template <DType W>
std::vector<std::byte> random_weights(int rows, int cols, std::uint32_t seed) {
    constexpr int elements = kernels::block_elements<W>();
    constexpr std::size_t bytes_per_block = kernels::block_bytes<W>();
    std::size_t const blocks = static_cast<std::size_t>(rows) * cols / elements;
    std::vector<std::byte> bytes(blocks * bytes_per_block);
    auto const values = random_floats(static_cast<std::size_t>(rows) * cols, seed, 0.05f);
    std::mt19937 rng(seed + 1);
    for (std::size_t b = 0; b < blocks; ++b) {
        std::byte* out = bytes.data() + b * bytes_per_block;
        float const* in = values.data() + b * elements;
        if constexpr (W == DType::f32) {
            std::memcpy(out, in, sizeof(float));
        } else if constexpr (W == DType::f16 || W == DType::bf16) {
            std::uint16_t const bits =
                W == DType::f16 ? float_to_f16_bits(in[0]) : float_to_bf16_bits(in[0]);
            std::memcpy(out, &bits, sizeof bits);
        } else if constexpr (elements == quant::k_block_elements) {
            quant::BlockOfT<W> block;
            auto* raw = reinterpret_cast<unsigned char*>(&block);
            for (std::size_t i = 0; i < sizeof block; ++i)
                raw[i] = static_cast<unsigned char>(rng());
            block.d = float_to_f16_bits(1e-3f);
            if constexpr (requires { block.dmin; }) block.dmin = float_to_f16_bits(1e-3f);
            std::memcpy(out, &block, sizeof block);
        } else {
            quant::BlockOfT<W> block;
            quant::quantize_block(in, block);
            std::memcpy(out, &block, sizeof block);
        }
    }
    return bytes;
}

bool bitwise_equal(std::vector<float> const& a, std::vector<float> const& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Float activations (the weights decoded a strip at a time) and, for the types with an int8
// dot, int8 activations on the repacked strips; `gated`: the FFN's gate and up pair with its
// activation fused (SwiGLU or GeGLU), as the model runs it.
template <DType W, int cols, bool gated = false, class Activation = kernels::SiluGate>
void bench_linear(char const* what, int rows, int tokens) {
    auto const gate_bytes = random_weights<W>(rows, cols, 7);
    auto const up_bytes = random_weights<W>(rows, cols, 8);
    kernels::WeightMatrix const gate{W, rows, cols, gate_bytes.data()};
    kernels::WeightMatrix const up{W, rows, cols, up_bytes.data()};
    auto const x = random_floats(static_cast<std::size_t>(tokens) * cols, 9);
    kernels::FloatRows const float_rows{x.data(), static_cast<std::size_t>(cols)};
    std::vector<float> buffer(kernels::linear_scratch_floats(cols));
    std::vector<float> out_static(static_cast<std::size_t>(tokens) * rows),
        out_dynamic(out_static.size());
    auto const run_float = [&](auto extent, std::vector<float>& out) {
        if constexpr (gated) {
            kernels::gated_linear_team<W, kernels::Isa::native, Activation>(
                extent, gate, up, float_rows, tokens, out.data(), static_cast<std::size_t>(rows),
                buffer.data());
        } else {
            kernels::linear_team<W>(extent, gate, float_rows, tokens, out.data(),
                                    static_cast<std::size_t>(rows), kernels::Store::assign,
                                    buffer.data());
        }
    };
    std::string const kernel =
        std::string(gated ? (std::is_same_v<Activation, kernels::SiluGate> ? "swiglu linear"
                                                                           : "geglu linear")
                          : "linear") +
        " " + std::string(name_of(W));
    std::string const shape = std::string(what) + " " + std::to_string(cols) + "->" +
                              std::to_string(rows) + " x " + std::to_string(tokens);
    Timing const t = side_by_side([&] { run_float(StaticExtent<cols>{}, out_static); },
                                  [&] { run_float(opaque_extent(cols), out_dynamic); });
    report(kernel, shape, t, bitwise_equal(out_static, out_dynamic));
    if constexpr (kernels::has_int8_dot(W)) {
        std::vector<std::byte> gate_strips(kernels::int8_strip_matrix_bytes(W, rows, cols)),
            up_strips(gate_strips.size());
        kernels::WeightMatrix const gate8 = kernels::repack_int8_strips(gate, gate_strips.data());
        kernels::WeightMatrix const up8 = kernels::repack_int8_strips(up, up_strips.data());
        std::size_t const stride = kernels::int8_row_bytes(cols);
        std::vector<std::byte> quantized(stride * static_cast<std::size_t>(tokens));
        for (int i = 0; i < tokens; ++i)
            kernels::quantize_row_int8(x.data() + static_cast<std::size_t>(i) * cols, cols,
                                       quantized.data() + stride * static_cast<std::size_t>(i));
        kernels::Int8Rows const int8_rows{quantized.data(), stride};
        auto const run_int8 = [&](auto extent, std::vector<float>& out) {
            if constexpr (gated) {
                kernels::gated_linear_team<W, kernels::Isa::native, Activation>(
                    extent, gate8, up8, int8_rows, tokens, out.data(),
                    static_cast<std::size_t>(rows));
            } else {
                kernels::linear_team<W>(extent, gate8, int8_rows, tokens, out.data(),
                                        static_cast<std::size_t>(rows), kernels::Store::assign);
            }
        };
        Timing const t8 = side_by_side([&] { run_int8(StaticExtent<cols>{}, out_static); },
                                       [&] { run_int8(opaque_extent(cols), out_dynamic); });
        report(kernel + " int8 strips", shape, t8, bitwise_equal(out_static, out_dynamic));
    }
}

// ---- sampling over a `vocab`-token distribution: greedy, and temperature with top-k/top-p ----
template <int vocab>
void bench_sampling(char const* what) {
    auto const logits = random_floats(vocab, 10, 3.0f);
    kernels::SamplingWorkspace workspace_static(vocab), workspace_dynamic(vocab);
    std::uint32_t step_static = 0, step_dynamic = 0;
    std::vector<float> tokens_static, tokens_dynamic;
    auto const run = [&](char const* mode, kernels::SamplingParams const& params) {
        tokens_static.clear();
        tokens_dynamic.clear();
        step_static = step_dynamic = 0;
        Timing const t = side_by_side(
            [&] {
                tokens_static.push_back(
                    static_cast<float>(kernels::sample_token(StaticExtent<vocab>{}, logits, params,
                                                             {}, 1, step_static++, workspace_static)
                                           .token));
            },
            [&] {
                tokens_dynamic.push_back(static_cast<float>(
                    kernels::sample_token(opaque_extent(vocab), logits, params, {}, 1,
                                          step_dynamic++, workspace_dynamic)
                        .token));
            });
        // The same steps drew the same tokens (the calls each form made may differ in number).
        std::size_t const common = std::min(tokens_static.size(), tokens_dynamic.size());
        tokens_static.resize(common);
        tokens_dynamic.resize(common);
        report(std::string("sampling ") + mode,
               std::string(what) + " vocab " + std::to_string(vocab), t,
               tokens_static == tokens_dynamic);
    };
    run("greedy", {.temperature = 0});
    run("top-k 40", {.temperature = 0.8f, .top_k = 40, .seed = 3});
    run("top-p 0.9", {.temperature = 0.8f, .top_p = 0.9f, .seed = 3});
}

// ---- KV append (encode) and decode of `vectors` head_dim vectors through one codec ----
template <class Codec, int head_dim>
void bench_kv_codec(char const* what, int vectors) {
    constexpr std::size_t stored = Codec::template vector_bytes<head_dim>;
    auto const x = random_floats(static_cast<std::size_t>(vectors) * head_dim, 11);
    std::vector<std::byte> encoded_static(stored * static_cast<std::size_t>(vectors)),
        encoded_dynamic(encoded_static.size());
    auto const append = [&](auto extent, std::vector<std::byte>& out) {
        for (int v = 0; v < vectors; ++v)
            Codec::encode(extent, x.data() + static_cast<std::size_t>(v) * head_dim,
                          out.data() + stored * static_cast<std::size_t>(v));
    };
    Timing const ta = side_by_side([&] { append(StaticExtent<head_dim>{}, encoded_static); },
                                   [&] { append(opaque_extent(head_dim), encoded_dynamic); });
    std::string const shape = std::string(what) + " d" + std::to_string(head_dim) + " x " +
                              std::to_string(vectors) + " vectors";
    report(std::string("kv append ") + std::string(Codec::name), shape, ta,
           encoded_static == encoded_dynamic);
    std::vector<float> decoded_static(x.size()), decoded_dynamic(x.size());
    auto const decode = [&](auto extent, std::vector<float>& out) {
        for (int v = 0; v < vectors; ++v)
            Codec::decode(extent, encoded_static.data() + stored * static_cast<std::size_t>(v),
                          out.data() + static_cast<std::size_t>(v) * head_dim);
    };
    Timing const td = side_by_side([&] { decode(StaticExtent<head_dim>{}, decoded_static); },
                                   [&] { decode(opaque_extent(head_dim), decoded_dynamic); });
    report(std::string("kv decode ") + std::string(Codec::name), shape, td,
           bitwise_equal(decoded_static, decoded_dynamic));
}

template <int head_dim>
void bench_kv_codecs(char const* what, int vectors) {
    bench_kv_codec<kv::Fp32Codec, head_dim>(what, vectors);
    bench_kv_codec<kv::Fp16Codec, head_dim>(what, vectors);
    bench_kv_codec<kv::Bf16Codec, head_dim>(what, vectors);
    bench_kv_codec<kv::Fp8E4M3Codec, head_dim>(what, vectors);
    bench_kv_codec<kv::Int8Codec, head_dim>(what, vectors);
    bench_kv_codec<kv::Int4Codec, head_dim>(what, vectors);
}

// ---- The whole model, StaticShapes against DynamicShapes ----
int model_repeats = 5;
int model_threads = 1;

// pp512 and tg128 of one model file, each form's runs interleaved with the other's (which goes
// first alternates); t/s from the median time, the ratio the median of the pairs' time ratios.
template <ModelConfig Cfg>
void bench_model(char const* what, std::filesystem::path const& path) {
    if (!std::filesystem::exists(path)) {
        std::printf("model %s: %s not found (scripts/fetch_model.sh fetches it): skipped\n", what,
                    path.c_str());
        return;
    }
    using Model = model::Llama<Cfg>;
    using Precision = kernels::Int8Activations;
    auto const file = gguf::File::open(path);
    Model const m = Model::bind(file);
    constexpr int prompt_tokens = 512, generated_tokens = 128;
    typename Model::Workspace ws(prompt_tokens, model_threads);
    kv::ContiguousKvCache<Cfg> cache(1, prompt_tokens + generated_tokens);
    std::vector<float> logits_static(Cfg.vocab), logits_dynamic(Cfg.vocab);
    std::mt19937 random(7);
    std::vector<std::int32_t> prompt(prompt_tokens);
    for (auto& t : prompt) t = static_cast<std::int32_t>(random() % Cfg.vocab);

    // Seconds of one run of `test` under Shapes, its last logits left in `logits`.
    auto const pp = [&]<class Shapes>(Shapes, std::vector<float>& logits) {
        cache.clear(0);
        SequenceChunk const chunk{.slot = 0, .first_position = 0, .tokens = prompt};
        double const start = now_seconds();
        m.template forward<Precision, Shapes>(std::span(&chunk, 1), cache, ws, logits);
        return now_seconds() - start;
    };
    auto const tg = [&]<class Shapes>(Shapes, std::vector<float>& logits) {
        cache.clear(0);
        std::int32_t next = prompt[0];
        double const start = now_seconds();
        for (int i = 0; i < generated_tokens; ++i) {
            SequenceChunk const chunk{
                .slot = 0, .first_position = i, .tokens = std::span(&next, 1)};
            m.template forward<Precision, Shapes>(std::span(&chunk, 1), cache, ws, logits);
            next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                             logits.begin());
        }
        return now_seconds() - start;
    };
    auto const compare = [&](char const* test, int tokens, auto const& run) {
        run(StaticShapes{}, logits_static);  // warm-up: the int8 strips are repacked here
        run(DynamicShapes{}, logits_dynamic);
        std::vector<double> s, d, ratios;
        for (int r = 0; r < model_repeats; ++r) {
            if (r % 2 == 0) {
                s.push_back(run(StaticShapes{}, logits_static));
                d.push_back(run(DynamicShapes{}, logits_dynamic));
            } else {
                d.push_back(run(DynamicShapes{}, logits_dynamic));
                s.push_back(run(StaticShapes{}, logits_static));
            }
            ratios.push_back(d.back() / s.back());
        }
        bool const equal = std::memcmp(logits_static.data(), logits_dynamic.data(),
                                       logits_static.size() * sizeof(float)) == 0;
        if (!equal) ++failures;
        double const static_rate = tokens / median(s), dynamic_rate = tokens / median(d);
        std::string const shape = std::string(what) + ", int8 activations, " +
                                  std::to_string(model_threads) + " thread" +
                                  (model_threads > 1 ? "s" : "");
        if (markdown) {
            std::printf("| %s | %s | %.1f | %.1f | %.2f |%s\n", test, shape.c_str(), static_rate,
                        dynamic_rate, median(ratios), equal ? "" : " **logits differ**");
        } else {
            std::printf(
                "model %-6s %-44s static %8.1f t/s  dynamic %8.1f t/s  time ratio %5.2f%s\n", test,
                shape.c_str(), static_rate, dynamic_rate, median(ratios),
                equal ? "" : "  LOGITS DIFFER");
        }
        std::fflush(stdout);
    };
    compare("pp512", prompt_tokens, pp);
    compare("tg128", generated_tokens, tg);
}

// Where scripts/fetch_model.sh caches a model.
std::filesystem::path cached_model(char const* name) {
    char const* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : ".") / ".cache/tinfer/models" / name;
}

void run_kernels();

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path smollm2 = cached_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::filesystem::path gemma3 = cached_model("gemma-3-270m-q4_k_m.gguf");
    bool kernels_wanted = true, models_wanted = true;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--repeats" && i + 1 < argc) {
            repeats = std::max(3, std::atoi(argv[++i]));
        } else if (arg == "--markdown") {
            markdown = true;
        } else if (arg == "--wall") {
            wall_clock = true;
        } else if (arg == "--model" && i + 1 < argc) {
            smollm2 = argv[++i];
        } else if (arg == "--gemma3" && i + 1 < argc) {
            gemma3 = argv[++i];
        } else if (arg == "--model-repeats" && i + 1 < argc) {
            model_repeats = std::max(1, std::atoi(argv[++i]));
        } else if (arg == "--threads" && i + 1 < argc) {
            model_threads = std::max(1, std::atoi(argv[++i]));
        } else if (arg == "--models-only") {
            kernels_wanted = false;
        } else if (arg == "--kernels-only") {
            models_wanted = false;
        } else {
            std::fprintf(stderr,
                         "usage: specialization [--repeats N] [--markdown] [--wall] [--model "
                         "FILE] [--gemma3 FILE] [--model-repeats N] [--threads N] "
                         "[--models-only | --kernels-only]\n");
            return 2;
        }
    }
    if (kernels_wanted) run_kernels();
    if (models_wanted) {
        // Thread CPU time counts one thread: a team of several is timed by the wall clock.
        if (model_threads > 1) wall_clock = true;
        if (markdown) {
            std::printf("\n| model | shape | static t/s | dynamic t/s | dynamic / static time |\n");
            std::printf("|---|---|---|---|---|\n");
        }
        bench_model<presets::smollm2_135m>("SmolLM2 Q4_1", smollm2);
        bench_model<presets::gemma3_270m>("Gemma 3 Q4_K_M", gemma3);
    }
    if (failures > 0) {
        std::fprintf(stderr,
                     "specialization: %d kernel(s) or model(s) gave different outputs static and "
                     "dynamic\n",
                     failures);
        return 1;
    }
    return 0;
}

namespace {

// Every kernel both ways.
void run_kernels() {
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
    // Linear kernels over the input features: SmolLM2's projections (576 -> 576, the FFN's
    // 576 -> 1536 and 1536 -> 576), Gemma 3's GeGLU (640 -> 2048), at decode (1 token) and
    // prefill (128 tokens) sizes, on the weight types their files hold and the plain ones.
    bench_linear<DType::f32, 576>("SmolLM2 q", 576, 1);
    bench_linear<DType::f16, 576>("SmolLM2 q", 576, 1);
    bench_linear<DType::q4_1, 576>("SmolLM2 q", 576, 1);
    bench_linear<DType::q4_1, 576>("SmolLM2 q", 576, 128);
    bench_linear<DType::q8_0, 576>("SmolLM2 q", 576, 1);
    bench_linear<DType::q8_0, 576>("SmolLM2 q", 576, 128);
    bench_linear<DType::q4_1, 1536>("SmolLM2 down", 576, 1);
    bench_linear<DType::q6_k, 1536>("SmolLM2 down", 576, 1);
    bench_linear<DType::q5_0, 640>("Gemma3 q", 1024, 1);
    bench_linear<DType::q8_0, 640>("Gemma3 q", 1024, 1);
    bench_linear<DType::q4_k, 2048>("Gemma3 down", 640, 1);
    bench_linear<DType::q4_1, 576, true>("SmolLM2 gate,up", 1536, 1);
    bench_linear<DType::q4_1, 576, true>("SmolLM2 gate,up", 1536, 128);
    bench_linear<DType::q5_0, 640, true, kernels::GeluTanhGate>("Gemma3 gate,up", 2048, 1);
    bench_linear<DType::q5_0, 640, true, kernels::GeluTanhGate>("Gemma3 gate,up", 2048, 128);
    // Sampling over the two vocabularies.
    bench_sampling<49152>("SmolLM2");
    bench_sampling<262144>("Gemma3");
    // KV codecs: a 1024-token context of one KV head (what one decode step reads per head).
    bench_kv_codecs<64>("SmolLM2", 1024);
    bench_kv_codecs<128>("synthetic", 1024);
    bench_kv_codecs<256>("Gemma3", 1024);
}

}  // namespace
