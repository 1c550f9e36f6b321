#pragma once
// The model's weights in the layout the int8-activation kernels read (kernels/int8_dot.hpp):
// every matrix of the layers and the output projection whose own type has an int8 dot product
// (kernels::has_int8_dot, decided per matrix from WeightMatrix::type) repacked once into 16-row
// strips, in one allocation of about the file's size on huge pages (core/huge_pages.hpp). Built
// by Llama::prepare (an engine with int8 activations calls it when it is built) or else the
// first time a forward pass runs with kernels::Int8Activations (about 0.1 s for SmolLM2-135M);
// a model only ever run in float32 keeps viewing the file alone.
//
// After a matrix is repacked, its pages of the file's mapping are dropped (MADV_DONTNEED on the
// read-only private mapping: read again from the file if the float path ever needs them), so
// resident memory stays about one copy of the weights. Memory that is not the file's mapping
// (a caller's buffer, tensor-parallel shards) is left alone.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/huge_pages.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::model {

template <ModelConfig Cfg>
requires ModelShape<Cfg>
class Int8Weights {
  public:
    // Repacks the int8-capable matrices of `source` (its other tensors are viewed as they are).
    explicit Int8Weights(ModelWeights<Cfg> const& source) : weights_(source) {
        std::size_t total = 0;
        for_each_matrix(weights_, [&](kernels::WeightMatrix& w) { total += padded_bytes(w); });
        storage_ = allocate_huge_pages(total);
        std::byte* next = storage_.get();
        for_each_matrix(weights_, [&](kernels::WeightMatrix& w) {
            kernels::WeightMatrix const original = w;
            w = kernels::repack_int8_strips(original, next);
            next += padded_bytes(original);
            release_pages(original);
        });
    }

    ModelWeights<Cfg> const& weights() const { return weights_; }

  private:
    template <class Visit>
    static void for_each_matrix(ModelWeights<Cfg>& w, Visit&& visit) {
        for (LayerWeights& layer : w.layers) {
            for (kernels::WeightMatrix* m : {&layer.q, &layer.k, &layer.v, &layer.output,
                                             &layer.gate, &layer.up, &layer.down}) {
                if (kernels::has_int8_dot(m->type)) visit(*m);
            }
        }
        if (kernels::has_int8_dot(w.output.type)) visit(w.output);
    }

    static std::size_t padded_bytes(kernels::WeightMatrix const& w) {
        return (kernels::int8_strip_matrix_bytes(w.type, w.rows, w.cols) + 63) / 64 * 64;
    }

    // Drops the whole pages of the original matrix if they belong to the file's mapping.
    void release_pages(kernels::WeightMatrix const& w) const {
        auto const page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        auto const begin = reinterpret_cast<std::uintptr_t>(w.data);
        std::uintptr_t const end = begin + kernels::dispatch_weight_type(w.type, [&]<DType T>() {
                                               return kernels::row_bytes<T>(w.cols);
                                           }) * static_cast<std::size_t>(w.rows);
        auto const mapping = reinterpret_cast<std::uintptr_t>(weights_.file_mapping.data());
        if (weights_.file_mapping.empty() || begin < mapping ||
            end > mapping + weights_.file_mapping.size())
            return;
        std::uintptr_t const first = (begin + page - 1) / page * page, last = end / page * page;
        if (last > first) {
            // Advice only: a refusal changes nothing but the resident size.
            (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
        }
    }

    ModelWeights<Cfg> weights_;
    HugePageBuffer storage_;
};

// Int8Weights built on first use, once, whichever thread asks first; shared by copies of a model.
template <ModelConfig Cfg>
requires ModelShape<Cfg>
class LazyInt8Weights {
  public:
    ModelWeights<Cfg> const& get(ModelWeights<Cfg> const& source) const {
        std::call_once(state_->once,
                       [&] { state_->weights = std::make_unique<Int8Weights<Cfg>>(source); });
        return state_->weights->weights();
    }

  private:
    struct State {
        std::once_flag once;
        std::unique_ptr<Int8Weights<Cfg>> weights;
    };
    std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tinfer::model
