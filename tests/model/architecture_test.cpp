// The composed architecture: which parts each preset's layers are built from (checked on the
// types, so SmolLM2's instantiation provably holds none of Gemma's parts), read_config and the
// C++ it prints, refusals that name the key, and every part on small synthetic GGUFs written
// by the project's writer, against the float64 reference (tests/reference/llama_reference.py
// --logits), among them the two parts no shipped file uses: QKV bias and soft-capping.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/hyperparameters.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "synthetic_model.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
namespace presets = tinfer::presets;
namespace model = tinfer::model;
using tinfer::LayerKind;
using tinfer::ModelConfig;

// SmolLM2: one kind of layer, and every part Llama's.
using Smol = tinfer::model::Llama<presets::smollm2_135m>;
static_assert(!model::uses_two_layer_kinds<presets::smollm2_135m>);
static_assert(std::is_same_v<Smol::FirstLayer, Smol::GlobalLayer>);
static_assert(std::is_same_v<Smol::FirstLayer::Gate, tinfer::kernels::SiluGate>);
static_assert(!Smol::FirstLayer::qk_norm && !Smol::FirstLayer::qkv_bias &&
              !Smol::FirstLayer::post_norms && Smol::FirstLayer::window == 0 &&
              Smol::FirstLayer::rope_pairing == tinfer::RopePairing::adjacent);
static_assert(!presets::smollm2_135m.arch.scale_embedding &&
              presets::smollm2_135m.arch.final_logit_softcap == 0);
static_assert(
    std::is_same_v<Smol::FirstLayer::Attention, tinfer::kernels::Attention<64, 3, 0, 64>>);
static_assert(!model::has_sliding_rope_table<presets::smollm2_135m>);

// Gemma 3: two kinds of layer (5, 11 and 17 global), each with Gemma's parts.
using Gemma = tinfer::model::Llama<presets::gemma3_270m>;
static_assert(model::uses_two_layer_kinds<presets::gemma3_270m>);
static_assert(presets::gemma3_270m.layer_kind(4) == LayerKind::sliding &&
              presets::gemma3_270m.layer_kind(5) == LayerKind::global &&
              presets::gemma3_270m.layer_kind(11) == LayerKind::global &&
              presets::gemma3_270m.layer_kind(17) == LayerKind::global &&
              presets::gemma3_270m.layer_kind(16) == LayerKind::sliding);
static_assert(Gemma::SlidingLayer::window == 512 && Gemma::GlobalLayer::window == 0);
static_assert(Gemma::SlidingLayer::rope_base == 10000.0 && Gemma::GlobalLayer::rope_base == 1e6);
static_assert(std::is_same_v<Gemma::SlidingLayer::Gate, tinfer::kernels::GeluTanhGate>);
static_assert(Gemma::SlidingLayer::qk_norm && Gemma::SlidingLayer::post_norms &&
              !Gemma::SlidingLayer::qkv_bias &&
              Gemma::SlidingLayer::rope_pairing == tinfer::RopePairing::neox);
static_assert(model::has_sliding_rope_table<presets::gemma3_270m>);

namespace {

// A few layers of every kind, small enough for the float64 reference to run in a second.
constexpr ModelConfig tiny_llama{.layers = 3,
                                 .hidden = 64,
                                 .heads = 4,
                                 .kv_heads = 2,
                                 .head_dim = 16,
                                 .ffn = 96,
                                 .vocab = 128,
                                 .max_context = 64,
                                 .rope_base = 10000.0,
                                 .norm_eps = 1e-5};

// Qwen2's QKV bias, NeoX RoPE and a separate LM head.
constexpr ModelConfig tiny_qwen2 = [] {
    ModelConfig c = tiny_llama;
    c.arch = {.family = tinfer::Family::qwen2,
              .rope_pairing = tinfer::RopePairing::neox,
              .lm_head = tinfer::LmHead::separate,
              .qkv_bias = true};
    c.norm_eps = 1e-6;
    return c;
}();

// Gemma 3's parts on six layers (layer 5 global), a window of 5 tokens so prompts of 24
// exercise it, and soft-capping, which Gemma 2 has and no shipped file does.
constexpr ModelConfig tiny_gemma3 = [] {
    ModelConfig c = tiny_llama;
    c.layers = 6;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 32;
    c.norm_eps = 1e-6;
    c.rope_base = 1e6;
    c.sliding_window = 5;
    c.arch = {.family = tinfer::Family::gemma3,
              .norms = tinfer::NormPlacement::sandwich,
              .activation = tinfer::GatedActivation::gelu_tanh,
              .rope_pairing = tinfer::RopePairing::neox,
              .lm_head = tinfer::LmHead::tied,
              .qk_norm = true,
              .scale_embedding = true,
              .query_pre_attn_scalar = 32,
              .final_logit_softcap = 3.0,
              .global_every = 6,
              .rope_base_sliding = 10000.0};
    return c;
}();

std::filesystem::path write_model(std::vector<std::byte> const& bytes, std::string const& name) {
    auto const path = std::filesystem::temp_directory_path() /
                      ("tinfer_arch_" + std::to_string(::getpid()) + "_" + name + ".gguf");
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<char const*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path;
}

// The float64 reference's logits for every position of `tokens`: [positions][vocab].
std::vector<double> reference_logits(std::filesystem::path const& gguf,
                                     std::vector<std::int32_t> const& tokens, int vocab) {
    std::string ids;
    for (std::int32_t t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    auto const out = std::filesystem::path(gguf).replace_extension(".logits");
    std::string const command =
        "python3 " + (tt::data_dir().parent_path() / "reference" / "llama_reference.py").string() +
        " --logits " + gguf.string() + " --tokens " + ids + " --out " + out.string();
    int const status = std::system(command.c_str());
    BOOST_REQUIRE_MESSAGE(status == 0, "the float64 reference failed ("
                                           << command
                                           << "): is numpy/gguf "
                                              "installed? "
                                              "scripts/python_deps.sh");
    std::vector<double> logits(tokens.size() * static_cast<std::size_t>(vocab));
    std::ifstream in(out, std::ios::binary);
    in.read(reinterpret_cast<char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(double)));
    BOOST_REQUIRE_MESSAGE(
        in.gcount() == static_cast<std::streamsize>(logits.size() * sizeof(double)),
        "the reference wrote " << in.gcount() << " bytes");
    std::filesystem::remove(out);
    return logits;
}

// Float32 error of a logit: each of `layers` layers adds the error of dot products of at most
// `width` terms (n * eps relative, worst case); the bound is that times the largest |logit|.
double logit_tolerance(ModelConfig const& c, double max_abs_logit) {
    int const width = std::max({c.hidden, c.ffn, c.q_width()});
    return (c.layers + 1) * width * static_cast<double>(std::numeric_limits<float>::epsilon()) *
           max_abs_logit;
}

template <ModelConfig Cfg>
void check_against_reference(std::string const& name, std::uint64_t seed) {
    using Model = tinfer::model::Llama<Cfg>;
    auto const path = write_model(tt::SyntheticModel(Cfg, seed).bytes(), name);
    auto const file = tinfer::gguf::File::open(path);
    // The file reads back as exactly the config it was written from.
    BOOST_TEST((tinfer::model::read_config(file) == Cfg), tinfer::model::read_config(file)
                                                              << " vs " << Cfg);
    Model const m = Model::bind(file);

    std::vector<std::int32_t> tokens(24);
    std::mt19937 random(static_cast<unsigned>(seed));
    for (auto& t : tokens) t = static_cast<std::int32_t>(random() % Cfg.vocab);
    std::vector<double> const ref = reference_logits(path, tokens, Cfg.vocab);

    tinfer::kv::ContiguousKvCache<Cfg> cache(1, Cfg.max_context);
    typename Model::Workspace ws(static_cast<int>(tokens.size()), 2);
    std::vector<float> logits(tokens.size() * Cfg.vocab);
    tt::poison(std::span<float>(logits));
    tinfer::SequenceChunk const chunk{0, 0, tokens, true};
    m.forward(std::span(&chunk, 1), cache, ws, logits);
    double worst = 0;
    for (std::size_t p = 0; p < tokens.size(); ++p) {
        double max_abs = 0;
        for (int v = 0; v < Cfg.vocab; ++v)
            max_abs = std::max(max_abs, std::abs(ref[p * Cfg.vocab + v]));
        double const tolerance = logit_tolerance(Cfg, max_abs);
        for (int v = 0; v < Cfg.vocab; ++v) {
            double const e = std::abs(logits[p * Cfg.vocab + v] - ref[p * Cfg.vocab + v]);
            worst = std::max(worst, e / tolerance);
            if (!(e <= tolerance)) {
                BOOST_TEST(e <= tolerance, name << " position " << p << " id " << v << ": "
                                                << logits[p * Cfg.vocab + v] << " vs "
                                                << ref[p * Cfg.vocab + v]);
                return;
            }
        }
    }
    BOOST_TEST_MESSAGE(name << ": worst logit error " << worst << " of the derived bound");
    std::filesystem::remove(path);
}

// The layer with every dimension a run-time value (DynamicShapes) runs the static layer's
// source: the same operations in the same order, so the same logits bit for bit, on a step
// of two prefill chunks (one with every position's logits) and then a decode of both.
template <ModelConfig Cfg, class Precision>
void check_dynamic_shapes_twin(tinfer::gguf::TensorType matrices, std::uint64_t seed) {
    using Model = tinfer::model::Llama<Cfg>;
    std::vector<std::byte> const bytes = tt::SyntheticModel(Cfg, seed, matrices).bytes();
    auto const file = tinfer::gguf::File::from_bytes(bytes);  // views `bytes`
    Model const m = Model::bind(file);
    std::mt19937 random(static_cast<unsigned>(seed));
    std::vector<std::int32_t> first(13), second(6);
    for (auto& t : first) t = static_cast<std::int32_t>(random() % Cfg.vocab);
    for (auto& t : second) t = static_cast<std::int32_t>(random() % Cfg.vocab);
    std::int32_t next[2] = {1, 2};
    std::vector<tinfer::SequenceChunk> const prefill{{0, 0, first, true}, {1, 0, second}};
    std::vector<tinfer::SequenceChunk> const decode{{0, 13, std::span(next, 1)},
                                                    {1, 6, std::span(next + 1, 1)}};
    struct Run {
        tinfer::kv::ContiguousKvCache<Cfg> cache{2, Cfg.max_context};
        typename Model::Workspace ws{24, 2};
        std::vector<float> logits = std::vector<float>(14 * Cfg.vocab);
    } fixed, any;
    auto const step = [&](std::vector<tinfer::SequenceChunk> const& chunks, char const* what) {
        tt::poison(std::span<float>(fixed.logits));
        tt::poison(std::span<float>(any.logits));
        m.template forward<Precision, tinfer::StaticShapes>(chunks, fixed.cache, fixed.ws,
                                                            fixed.logits);
        m.template forward<Precision, tinfer::DynamicShapes>(chunks, any.cache, any.ws, any.logits);
        std::size_t const n = Model::logit_rows(chunks) * Cfg.vocab;
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n; ++i)
            differ += std::memcmp(&fixed.logits[i], &any.logits[i], sizeof(float)) != 0;
        BOOST_TEST(differ == 0u, what << " (" << Precision::name << ", matrices "
                                      << static_cast<int>(matrices) << "): " << differ << " of "
                                      << n << " logits differ static vs dynamic");
    };
    step(prefill, "prefill");
    step(decode, "decode");
}

std::string bind_error(std::vector<std::byte> const& bytes) {
    try {
        auto const file = tinfer::gguf::File::from_bytes(bytes);
        (void)tinfer::model::Llama<tiny_llama>::bind(file);
    } catch (tinfer::Error const& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(architecture)

BOOST_AUTO_TEST_CASE(llama_parts_against_float64_reference) {
    check_against_reference<tiny_llama>("llama", 11);
}

BOOST_AUTO_TEST_CASE(qkv_bias_and_neox_rope_against_float64_reference) {
    check_against_reference<tiny_qwen2>("qwen2", 12);
}

BOOST_AUTO_TEST_CASE(gemma3_parts_and_softcap_against_float64_reference) {
    check_against_reference<tiny_gemma3>("gemma3", 13);
}

BOOST_AUTO_TEST_CASE(dynamic_shapes_give_the_static_logits_bitwise) {
    using tinfer::gguf::TensorType;
    using Float = tinfer::kernels::Float32Activations;
    using Int8 = tinfer::kernels::Int8Activations;
    check_dynamic_shapes_twin<tiny_llama, Float>(TensorType::f32, 21);
    check_dynamic_shapes_twin<tiny_llama, Int8>(TensorType::q4_1, 22);
    check_dynamic_shapes_twin<tiny_qwen2, Float>(TensorType::f32, 23);
    check_dynamic_shapes_twin<tiny_gemma3, Float>(TensorType::f32, 24);
    // The int8 strips on every product, the gated pair's fused kernel among them.
    check_dynamic_shapes_twin<tiny_gemma3, Int8>(TensorType::q8_0, 25);
}

// The benchmarks' fast stand-in for large shapes (SyntheticModel::random_q4_0_blocks): every
// matrix Q4_0, embedding and LM head included; it binds as the shape, and its logits are finite
// and of the normal model's order (each row's spread within 10x of a normal-weight model's).
BOOST_AUTO_TEST_CASE(random_q4_0_blocks_bind_and_run) {
    constexpr ModelConfig shape = [] {
        ModelConfig c = tiny_llama;
        c.arch.lm_head = tinfer::LmHead::separate;
        return c;
    }();
    using Model = tinfer::model::Llama<shape>;
    std::vector<std::int32_t> const prompt = {3, 1, 4, 1, 5, 9, 2, 6};
    auto const logits_of = [&](std::vector<std::byte> const& bytes) {
        tinfer::gguf::File const file = tinfer::gguf::File::from_bytes(bytes);
        Model const model = Model::bind(file);
        tinfer::kv::ContiguousKvCache<shape> cache(1, 16);
        Model::Workspace ws(static_cast<int>(prompt.size()), 1);
        std::vector<float> logits(shape.vocab);
        tinfer::SequenceChunk const chunk{0, 0, prompt};
        model.forward(std::span(&chunk, 1), cache, ws, logits);
        return logits;
    };
    auto const spread = [](std::vector<float> const& v) {
        double sum = 0, squares = 0;
        for (float x : v) {
            BOOST_REQUIRE(std::isfinite(x));
            sum += x;
            squares += static_cast<double>(x) * x;
        }
        double const mean = sum / static_cast<double>(v.size());
        return std::sqrt(squares / static_cast<double>(v.size()) - mean * mean);
    };
    auto const random_blocks = tinfer::gguf::SyntheticModel::random_q4_0_blocks(shape, 31).bytes();
    tinfer::gguf::File const file = tinfer::gguf::File::from_bytes(random_blocks);
    auto const weights = tinfer::model::ModelWeights<shape>::bind(file);
    BOOST_TEST((weights.token_embedding.type == tinfer::DType::q4_0));
    BOOST_TEST((weights.output.type == tinfer::DType::q4_0));
    BOOST_TEST((weights.layers[0].down.type == tinfer::DType::q4_0));
    double const random_spread = spread(logits_of(random_blocks));
    double const normal_spread = spread(
        logits_of(tinfer::gguf::SyntheticModel(shape, 31, tinfer::gguf::TensorType::q4_0).bytes()));
    BOOST_TEST(random_spread > normal_spread / 10);
    BOOST_TEST(random_spread < normal_spread * 10);
}

BOOST_AUTO_TEST_CASE(cpp_initializer_compiles_the_shape_it_prints) {
    // The printed initializer, pasted, is the preset (checked by the static_assert below on a
    // copy of the text this test prints).
    std::string const text = tinfer::model::cpp_initializer(presets::gemma3_270m, "gemma");
    BOOST_TEST_MESSAGE(text);
    BOOST_TEST(text ==
               "constexpr tinfer::ModelConfig gemma{.layers = 18, .hidden = 640, .heads = 4, "
               ".kv_heads = 1, .head_dim = 256, .ffn = 2048, .vocab = 262144, .max_context = "
               "32768, .rope_base = 1000000, .norm_eps = 1e-06, .weights = tinfer::DType::q5_0, "
               ".sliding_window = 512, .arch = {.family = "
               "tinfer::Family::gemma3, .norms = tinfer::NormPlacement::sandwich, .activation = "
               "tinfer::GatedActivation::gelu_tanh, .rope_pairing = tinfer::RopePairing::neox, "
               ".qk_norm = true, .scale_embedding = true, .query_pre_attn_scalar = 256, "
               ".global_every = 6, .rope_base_sliding = 10000.0}};");
}
constexpr tinfer::ModelConfig gemma{.layers = 18,
                                    .hidden = 640,
                                    .heads = 4,
                                    .kv_heads = 1,
                                    .head_dim = 256,
                                    .ffn = 2048,
                                    .vocab = 262144,
                                    .max_context = 32768,
                                    .rope_base = 1000000,
                                    .norm_eps = 1e-06,
                                    .weights = tinfer::DType::q5_0,
                                    .sliding_window = 512,
                                    .arch = {.family = tinfer::Family::gemma3,
                                             .norms = tinfer::NormPlacement::sandwich,
                                             .activation = tinfer::GatedActivation::gelu_tanh,
                                             .rope_pairing = tinfer::RopePairing::neox,
                                             .qk_norm = true,
                                             .scale_embedding = true,
                                             .query_pre_attn_scalar = 256,
                                             .global_every = 6,
                                             .rope_base_sliding = 10000.0}};
static_assert(gemma == presets::gemma3_270m);

BOOST_AUTO_TEST_CASE(refusals_name_the_key) {
    // Another architecture: the message lists what tinfer composes.
    {
        std::string const what =
            bind_error(tt::SyntheticModel(tiny_llama, 1, 0.08f, "phi3").bytes());
        BOOST_TEST(what == "general.architecture: file has \"phi3\", config has \"llama\"", what);
        auto const file = tinfer::gguf::File::from_bytes(
            tt::SyntheticModel(tiny_llama, 1, 0.08f, "phi3").bytes());
        BOOST_CHECK_EXCEPTION(tinfer::model::read_config(file), tinfer::ConfigMismatch,
                              [](tinfer::ConfigMismatch const& e) {
                                  return std::string(e.what()) ==
                                         "general.architecture: file has \"phi3\", which tinfer "
                                         "does not compose (supported: llama, qwen2, gemma3)";
                              });
    }
    // RoPE scaling, by key and by Llama 3.1's frequency tensor.
    {
        tt::SyntheticModel m(tiny_llama, 2);
        m.writer().add("llama.rope.scaling.type", tinfer::gguf::Value(std::string("yarn")));
        std::string const what = bind_error(m.bytes());
        BOOST_TEST(what.find("llama.rope.scaling.type: file has \"yarn\"") != std::string::npos,
                   what);
    }
    {
        tt::SyntheticModel m(tiny_llama, 3);
        std::vector<float> freqs(tiny_llama.head_dim / 2, 1.0f);
        m.writer().add_tensor("rope_freqs.weight", tinfer::gguf::TensorType::f32,
                              {static_cast<std::uint64_t>(freqs.size())},
                              std::as_bytes(std::span(freqs)));
        std::string const what = bind_error(m.bytes());
        BOOST_TEST(what.find("rope_freqs.weight") != std::string::npos, what);
    }
    // A part the file has and the config does not.
    {
        std::string const what = bind_error(tt::SyntheticModel(tiny_qwen2, 4).bytes());
        BOOST_TEST(what.find("general.architecture: file has \"qwen2\", config has \"llama\"") !=
                       std::string::npos,
                   what);
    }
    {
        ModelConfig c = tiny_llama;
        c.arch.qkv_bias = true;
        std::string const what = bind_error(tt::SyntheticModel(c, 5).bytes());
        BOOST_TEST(what.find("blk.0.attn_q.bias (qkv_bias): file has true, config has false") !=
                       std::string::npos,
                   what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
