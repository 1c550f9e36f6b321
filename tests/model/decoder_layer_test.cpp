// The decoder layer both backends run (model/decoder_layer.hpp: run_decoder_stack over a
// backend's ops; HostOps on the CPU, CudaOps on a GPU), driven by an ops object that records
// what it is asked, so the loop itself is checked on the CPU whatever backend implements the ops:
//  - each layer runs the ops in the layer's order (norm, Q K V, positions, attention, output
//    into the residual, norm, gated FFN, down into the residual), with the plan of the layer's
//    own kind (Gemma 3's sliding and global layers interleaved as the shape says), the layer's
//    weights, and the cache index counted from the range's first layer (a pipeline stage's);
//  - an op that fails ends the layer there and no later layer runs.
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/model/decoder_layer.hpp>
#include <tinfer/model/layer_plan.hpp>
#include <tinfer/model/weights.hpp>

namespace {

using tinfer::LayerKind;
using tinfer::ModelConfig;
using tinfer::model::Activations;
using tinfer::model::LayerWeights;

// Gemma 3's pattern on 7 layers: every 3rd layer global (2, 5), the others sliding.
constexpr ModelConfig hybrid{.layers = 7,
                             .hidden = 64,
                             .heads = 2,
                             .kv_heads = 1,
                             .head_dim = 32,
                             .ffn = 96,
                             .vocab = 16,
                             .max_context = 64,
                             .sliding_window = 8,
                             .arch = {.global_every = 3}};

struct Call {
    std::string op;
    int weights_index;  // which LayerWeights the op was given (-1: none)
    int cache_layer;    // attend's layer argument (-1: not attend)
    LayerKind kind;     // the plan's kind (global for ops that take no plan)
    bool operator==(Call const&) const = default;
};

std::ostream& operator<<(std::ostream& out, Call const& c) {
    return out << c.op << "(w" << c.weights_index << ", cache " << c.cache_layer << ", "
               << (c.kind == LayerKind::sliding ? "sliding" : "global") << ")";
}

// Records every op; `fail_attend_at` makes attend fail at that cache layer.
struct RecordingOps {
    std::vector<LayerWeights> const* weights;
    std::vector<Call> calls;
    int fail_attend_at = -1;
    bool failed_ = false;

    bool failed() const { return failed_; }
    int index_of(LayerWeights const& w) const { return static_cast<int>(&w - weights->data()); }
    int index_of_matrix(tinfer::kernels::WeightMatrix const& m) const {
        for (std::size_t i = 0; i < weights->size(); ++i) {
            LayerWeights const& w = (*weights)[i];
            if (&m == &w.output || &m == &w.down) return static_cast<int>(i);
        }
        return -1;
    }
    void normalize(std::span<float const>) {
        calls.push_back({"normalize", -1, -1, LayerKind::global});
    }
    void project_qkv(LayerWeights const& w) {
        calls.push_back({"project_qkv", index_of(w), -1, LayerKind::global});
    }
    template <class Plan>
    void position_queries_and_keys(LayerWeights const& w) {
        calls.push_back({"position", index_of(w), -1, Plan::kind});
    }
    template <class Plan>
    bool attend(int layer) {
        calls.push_back({"attend", -1, layer, Plan::kind});
        if (layer == fail_attend_at) failed_ = true;
        return !failed_;
    }
    template <class Plan>
    bool add_to_residual(tinfer::kernels::WeightMatrix const& m, Activations input,
                         std::span<float const>) {
        calls.push_back({input == Activations::attended ? "attention_output" : "ffn_down",
                         index_of_matrix(m), -1, Plan::kind});
        return true;
    }
    template <class Plan>
    void gated_ffn(tinfer::kernels::WeightMatrix const&, tinfer::kernels::WeightMatrix const&) {
        calls.push_back({"gated_ffn", -1, -1, Plan::kind});
    }
};

std::vector<Call> expected_layer(int weights_index, int cache_layer, LayerKind kind) {
    return {{"normalize", -1, -1, LayerKind::global},
            {"project_qkv", weights_index, -1, LayerKind::global},
            {"position", weights_index, -1, kind},
            {"attend", -1, cache_layer, kind},
            {"attention_output", weights_index, -1, kind},
            {"normalize", -1, -1, LayerKind::global},
            {"gated_ffn", -1, -1, kind},
            {"ffn_down", weights_index, -1, kind}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(decoder_layer)

BOOST_AUTO_TEST_CASE(each_layer_runs_its_kinds_plan_in_order) {
    std::vector<LayerWeights> const weights(hybrid.layers);
    // A pipeline stage's range: layers 1..5, cached from index 0.
    RecordingOps ops{&weights};
    tinfer::model::run_decoder_stack<hybrid, hybrid>(ops, weights, 1, 6);
    std::vector<Call> expected;
    for (int layer = 1; layer < 6; ++layer) {
        for (Call const& c : expected_layer(layer, layer - 1, hybrid.layer_kind(layer)))
            expected.push_back(c);
    }
    BOOST_TEST(ops.calls == expected, boost::test_tools::per_element());
    // The shape's pattern reached the plans: layers 2 and 5 global, the rest sliding.
    BOOST_TEST((hybrid.layer_kind(2) == LayerKind::global));
    BOOST_TEST((hybrid.layer_kind(4) == LayerKind::sliding));
}

BOOST_AUTO_TEST_CASE(a_failed_op_ends_the_layer_and_the_stack) {
    std::vector<LayerWeights> const weights(hybrid.layers);
    RecordingOps ops{&weights};
    ops.fail_attend_at = 2;
    tinfer::model::run_decoder_stack<hybrid, hybrid>(ops, weights, 0, hybrid.layers);
    std::vector<Call> expected;
    for (int layer = 0; layer < 2; ++layer)
        for (Call const& c : expected_layer(layer, layer, hybrid.layer_kind(layer)))
            expected.push_back(c);
    std::vector<Call> const third = expected_layer(2, 2, hybrid.layer_kind(2));
    expected.insert(expected.end(), third.begin(), third.begin() + 4);  // up to the failed attend
    BOOST_TEST(ops.calls == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
