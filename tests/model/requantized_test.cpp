// SmolLM2 in Q8_0, which no package ships: examples/requantize rewrites the real file's layer
// matrices with the project's GGUF writer, the same compiled preset binds it (each matrix has
// its own type; the shape does not name one), and its logits match the float64 reference run
// on the written file, so the Q8_0 kernels are checked on a whole real model.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

namespace tt = tinfer::testing;
constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;

BOOST_AUTO_TEST_CASE(smollm2_q8_0_against_float64_reference) {
    char const* tool = std::getenv("TINFER_REQUANTIZE");
    BOOST_REQUIRE_MESSAGE(tool != nullptr, "TINFER_REQUANTIZE (the requantize example) not set");
    auto const dir = std::filesystem::temp_directory_path();
    auto const gguf = dir / ("tinfer_smollm2_q8_0_" + std::to_string(::getpid()) + ".gguf");
    auto const logits_file = std::filesystem::path(gguf).replace_extension(".logits");
    std::string const requantize = std::string(tool) + " --model " + tt::model_path().string() +
                                   " --type q8_0 --out " + gguf.string();
    BOOST_REQUIRE_MESSAGE(std::system(requantize.c_str()) == 0, requantize);

    auto const file = tinfer::gguf::File::open(gguf);
    Model const model = Model::bind(file);
    BOOST_TEST((model.weights().layers[0].q.type == tinfer::DType::q8_0));
    BOOST_TEST((model.weights().layers[29].down.type == tinfer::DType::q8_0));

    // Ten ids of the vocabulary, fixed so a failure repeats.
    std::vector<std::int32_t> const tokens{504, 3575, 282, 4649, 314, 198, 2115, 28, 260, 1789};
    std::string ids;
    for (auto t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    std::string const reference =
        "python3 " + (tt::data_dir().parent_path() / "reference" / "llama_reference.py").string() +
        " --logits " + gguf.string() + " --tokens " + ids + " --out " + logits_file.string();
    BOOST_REQUIRE_MESSAGE(std::system(reference.c_str()) == 0, reference);
    constexpr int vocab = smollm2.vocab;
    std::vector<double> ref(tokens.size() * vocab);
    {
        std::ifstream in(logits_file, std::ios::binary);
        in.read(reinterpret_cast<char*>(ref.data()),
                static_cast<std::streamsize>(ref.size() * sizeof(double)));
        BOOST_REQUIRE(in.gcount() == static_cast<std::streamsize>(ref.size() * sizeof(double)));
    }

    tinfer::kv::ContiguousKvCache<smollm2> cache(1, 64);
    Model::Workspace ws(static_cast<int>(tokens.size()), 2);
    std::vector<float> logits(tokens.size() * vocab);
    tt::poison(std::span<float>(logits));
    tinfer::SequenceChunk const chunk{0, 0, tokens, true};
    model.forward(std::span(&chunk, 1), cache, ws, logits);
    // The golden tests' bound: 8x the float32 error the reference measures on this model
    // (at most 3.5e-6 of max|logit| on SmolLM2, tests/reference/README.md), as a fraction.
    constexpr double rtol = 8 * 3.5e-6;
    double worst = 0;
    for (std::size_t p = 0; p < tokens.size(); ++p) {
        double max_abs = 0;
        for (int v = 0; v < vocab; ++v) max_abs = std::max(max_abs, std::abs(ref[p * vocab + v]));
        for (int v = 0; v < vocab; ++v)
            worst = std::max(
                worst, std::abs(logits[p * vocab + v] - ref[p * vocab + v]) / (rtol * max_abs));
    }
    BOOST_TEST_MESSAGE("SmolLM2 Q8_0: worst logit error " << worst << " of the bound");
    BOOST_TEST(worst <= 1.0);
    std::filesystem::remove(gguf);
    std::filesystem::remove(logits_file);
}
