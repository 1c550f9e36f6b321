#include <sstream>

#include <boost/test/unit_test.hpp>
#include <tinfer/presets/presets.hpp>

using namespace tinfer;

namespace {
// A shape used as a template argument: the point of ModelConfig being structural.
template <ModelConfig C>
requires ModelShape<C>
constexpr int group_of() {
    return C.group_size();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(presets_are_template_arguments) {
    static_assert(group_of<presets::smollm2_135m>() == 3);
    static_assert(group_of<presets::llama2_7b>() == 1);
    static_assert(group_of<presets::llama2_70b>() == 8);
    BOOST_TEST(group_of<presets::mistral_7b>() == 4);
    BOOST_TEST(presets::mistral_7b.sliding_window == 4096);
}

BOOST_AUTO_TEST_CASE(a_users_own_shape_checks_like_a_preset) {
    constexpr ModelConfig mine{.layers = 2,
                               .hidden = 64,
                               .heads = 4,
                               .kv_heads = 1,
                               .head_dim = 16,
                               .ffn = 128,
                               .vocab = 100,
                               .max_context = 256};
    static_assert(ModelShape<mine>);
    BOOST_TEST(mine.group_size() == 4);  // MQA
    BOOST_TEST(mine.q_width() == 64);
    BOOST_TEST(mine.kv_width() == 16);
}

BOOST_AUTO_TEST_CASE(equality_and_printing) {
    auto c = presets::smollm2_135m;
    BOOST_TEST((c == presets::smollm2_135m));
    c.kv_heads = 9;
    BOOST_TEST(!(c == presets::smollm2_135m));
    std::ostringstream out;
    out << presets::smollm2_135m;
    BOOST_TEST(out.str().find("heads=9, kv_heads=3, head_dim=64") != std::string::npos);
    BOOST_TEST(out.str().find("weights=q4_1") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
