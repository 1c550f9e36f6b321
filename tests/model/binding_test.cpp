// Binding the real SmolLM2 file: every hyperparameter and tensor checked against the config,
// mismatches named, and with_preset choosing the matching compiled-in shape.
#include <string>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/hyperparameters.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/model/with_preset.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

namespace tt = tinfer::testing;
using tinfer::ModelConfig;
namespace presets = tinfer::presets;

namespace {

// The message of the ConfigMismatch that checking `config` against the file raises.
std::string mismatch_message(tinfer::gguf::File const& file, ModelConfig const& config) {
    try {
        tinfer::model::check_hyperparameters(file, config);
    } catch (tinfer::ConfigMismatch const& e) {
        return e.what();
    }
    return "";
}

constexpr ModelConfig smollm2_four_kv_heads = [] {
    ModelConfig c = presets::smollm2_135m;
    c.heads = 8;
    c.kv_heads = 4;
    c.head_dim = 72;
    return c;
}();

}  // namespace

BOOST_AUTO_TEST_SUITE(binding)

BOOST_AUTO_TEST_CASE(binds_smollm2_in_place) {
    auto const file = tinfer::gguf::File::open(tt::model_path());
    auto const model = tinfer::model::Llama<presets::smollm2_135m>::bind(file);
    auto const& w = model.weights();
    BOOST_TEST((w.token_embedding.type == tinfer::DType::q8_0));
    BOOST_TEST(w.token_embedding.rows == 49152);
    BOOST_TEST(w.token_embedding.cols == 576);
    // Tied embeddings: logits use token_embd, and every matrix points into the mapping.
    BOOST_TEST(w.output.data == w.token_embedding.data);
    auto const mapping = file.bytes();
    auto const inside = [&](void const* p) {
        auto const* b = static_cast<std::byte const*>(p);
        return b >= mapping.data() && b < mapping.data() + mapping.size();
    };
    for (auto const& layer : w.layers) {
        BOOST_TEST(inside(layer.q.data));
        BOOST_TEST(inside(layer.down.data));
        BOOST_TEST(inside(layer.ffn_norm.data()));
        BOOST_TEST((layer.down.rows == 576 && layer.down.cols == 1536));
        BOOST_TEST((layer.k.rows == 192 && layer.k.cols == 576));
    }
}

BOOST_AUTO_TEST_CASE(every_hyperparameter_matches_smollm2) {
    auto const file = tinfer::gguf::File::open(tt::model_path());
    for (auto const& p : tinfer::model::compare_hyperparameters(file, presets::smollm2_135m)) {
        BOOST_TEST(p.matches,
                   p.key << ": file has " << p.file_value << ", config has " << p.config_value);
    }
    BOOST_TEST(mismatch_message(file, presets::smollm2_135m) == "");
}

BOOST_AUTO_TEST_CASE(mismatches_name_field_and_both_values) {
    auto const file = tinfer::gguf::File::open(tt::model_path());
    ModelConfig c = presets::smollm2_135m;
    c.kv_heads = 9;
    BOOST_TEST(mismatch_message(file, c) ==
               "llama.attention.head_count_kv: file has 3, config has 9");
    c = presets::smollm2_135m;
    c.layers = 29;
    BOOST_TEST(mismatch_message(file, c) == "llama.block_count: file has 30, config has 29");
    c = presets::smollm2_135m;
    c.rope_base = 10000.0;
    BOOST_TEST(mismatch_message(file, c) ==
               "llama.rope.freq_base: file has 100000, config has 10000");
    c = presets::smollm2_135m;
    c.norm_eps = 1e-6;
    BOOST_TEST(mismatch_message(file, c) ==
               "llama.attention.layer_norm_rms_epsilon: file has 1e-05, config has 1e-06");
    // The weight type is not the shape's business: every matrix is bound with its own type.
    c = presets::smollm2_135m;
    c.weights = tinfer::DType::q8_0;
    BOOST_TEST(mismatch_message(file, c) == "");
    // Architectural parts are compared too, named by the tensor or key that shows them.
    c = presets::smollm2_135m;
    c.arch.qk_norm = true;
    BOOST_TEST(mismatch_message(file, c) ==
               "blk.0.attn_q_norm.weight (qk_norm): file has false, config has true");
    c = presets::smollm2_135m;
    c.arch.lm_head = tinfer::LmHead::separate;
    BOOST_TEST(mismatch_message(file, c) ==
               "output.weight (lm_head): file has tied, config has separate");
    c = presets::smollm2_135m;
    c.arch.activation = tinfer::GatedActivation::gelu_tanh;
    BOOST_TEST(mismatch_message(file, c) ==
               "activation (llama): file has silu, config has gelu_tanh");
    BOOST_TEST(mismatch_message(file, presets::gemma3_270m) ==
               "general.architecture: file has \"llama\", config has \"gemma3\"");
    c = presets::smollm2_135m;
    c.ffn = 2048;
    c.max_context = 2048;
    BOOST_TEST(mismatch_message(file, c) ==
               "llama.feed_forward_length: file has 1536, config has 2048; "
               "llama.context_length: file has 8192, config has 2048");
}

BOOST_AUTO_TEST_CASE(bind_refuses_a_wrong_config) {
    auto const file = tinfer::gguf::File::open(tt::model_path());
    BOOST_CHECK_EXCEPTION(
        tinfer::model::Llama<smollm2_four_kv_heads>::bind(file), tinfer::ConfigMismatch,
        [](tinfer::ConfigMismatch const& e) {
            std::string const what = e.what();
            BOOST_TEST_MESSAGE(what);
            return what.find("llama.attention.head_count: file has 9, config has 8") !=
                       std::string::npos &&
                   what.find("llama.attention.head_count_kv: file has 3, config has 4") !=
                       std::string::npos;
        });
}

BOOST_AUTO_TEST_CASE(with_preset_picks_the_matching_shape) {
    auto const file = tinfer::gguf::File::open(tt::model_path());
    auto const chosen =
        tinfer::model::with_preset<presets::llama2_7b, presets::smollm2_135m, presets::qwen25_05b>(
            file, []<ModelConfig Cfg>() { return Cfg; });
    BOOST_TEST((chosen == presets::smollm2_135m));

    BOOST_CHECK_EXCEPTION((tinfer::model::with_preset<presets::llama2_7b, presets::mistral_7b>(
                              file, []<ModelConfig>() { return 0; })),
                          tinfer::Error, [](tinfer::Error const& e) {
                              std::string const what = e.what();
                              BOOST_TEST_MESSAGE(what);
                              return what.find(
                                         "constexpr tinfer::ModelConfig my_model{.layers = "
                                         "30, .hidden = 576, .heads = 9, .kv_heads = 3") !=
                                         std::string::npos &&
                                     what.find("layers=32, hidden=4096") != std::string::npos &&
                                     what.find("sliding_window=4096") != std::string::npos;
                          });
}

BOOST_AUTO_TEST_SUITE_END()
