#include <string>

#include <boost/test/unit_test.hpp>
#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>

using namespace tinfer;

BOOST_AUTO_TEST_SUITE(dispatch_to_compile_time)

BOOST_AUTO_TEST_CASE(runtime_value_selects_its_instantiation) {
    for (int runtime : {64, 128, 256}) {
        int const seen = dispatch<64, 128, 256>(runtime, []<int V>() { return V; });
        BOOST_TEST(seen == runtime);
    }
}

BOOST_AUTO_TEST_CASE(unlisted_value_names_the_allowed_ones) {
    try {
        dispatch<DType::f32, DType::bf16>(DType::int4, []<DType T>() {});
        BOOST_FAIL("dispatch accepted a value it has no instantiation for");
    } catch (Error const& e) {
        std::string const what = e.what();
        BOOST_TEST(what.find("f32, bf16") != std::string::npos, what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
