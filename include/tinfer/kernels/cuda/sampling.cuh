#pragma once
// Sampling on the device, with the host sampler's semantics (kernels/sampling.hpp): temperature
// (0: greedy, ties to the lowest id), then top-k, top-p over the top-k survivors, min-p against
// the best token's weight, and an inverse-CDF draw in token-id order with the same Philox
// numbers (philox_draw at (seed, request id, step), uniform_double of its first two words), so
// the same seed draws the same token on both backends.
//
// Ranking is by logit, ties to the lower id: a stable segmented radix sort (CUB) of each row's
// logits, descending, with token ids as values, gives exactly the host's ranking. In ranked
// order the weights exp((logit - max) / T) never increase, so every filter keeps a prefix of the
// ranking: top-k a fixed length, top-p the shortest prefix whose mass reaches the target (a
// block-wide scan), min-p the prefix of weights >= min_p. The kept tokens are then marked and a
// second scan in token-id order finds the drawn one.
//
// Greedy rows alone (sample_greedy) need no ranking: an argmax reduction per row (one pass over
// the logits, the lowest id of the largest logit, the same refusals) instead of the sort.
//
// Penalties and logit bias are not applied here: they change logits before this step (the
// host's apply_penalties_and_bias), and the logits passed in are the processed ones.
//
// Weights come from sampling_weight (core/sampling_exp.hpp), the host sampler's own function
// (bitwise equal on both backends). A row the host would refuse is refused here too: a NaN or +inf
// logit, or every logit -inf, writes an error code instead of a token (sampled_token_error), and
// check_sampled_tokens throws the host's exact error for it once the tokens are on the host.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <tinfer/core/philox.hpp>
#include <tinfer/core/sampling_exp.hpp>
#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>
#include <tinfer/kernels/sampling.hpp>

namespace tinfer::kernels::cuda {

// One sequence's settings, as the kernel reads them.
struct DeviceSamplingParams {
    float temperature = 1;  // 0: greedy
    int top_k = 0;          // 0: off
    float top_p = 1;        // 1: off
    float min_p = 0;        // 0: off
    std::uint64_t seed = 0;
    std::uint64_t request_id = 0;
    std::uint32_t step = 0;
};

// The filter settings of a host SamplingParams (validated) at a stream position.
inline DeviceSamplingParams device_sampling_params(SamplingParams const& params, std::int32_t vocab,
                                                   std::uint64_t request_id, std::uint32_t step) {
    validate(params, vocab);
    return {.temperature = params.temperature,
            .top_k = params.top_k,
            .top_p = params.top_p,
            .min_p = params.min_p,
            .seed = params.seed,
            .request_id = request_id,
            .step = step};
}

inline constexpr int sampling_threads = 512;

namespace sampling_detail {

inline constexpr float positive_infinity = std::numeric_limits<float>::infinity();
inline constexpr float negative_infinity = -std::numeric_limits<float>::infinity();

__global__ void segment_setup_kernel(int* ids, int* offsets, int seqs, int vocab) {
    std::size_t const total = static_cast<std::size_t>(seqs) * vocab;
    std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += stride)
        ids[i] = static_cast<int>(i % static_cast<std::size_t>(vocab));
    for (std::size_t s = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         s <= static_cast<std::size_t>(seqs); s += stride)
        offsets[s] = static_cast<int>(s * static_cast<std::size_t>(vocab));
}

// The first index in [0, n) (in chunks of sampling_threads) whose inclusive running sum of
// value(i) satisfies reached(sum); n when none does. Every thread gets the answer.
template <class Value, class Reached>
__device__ int first_prefix_reaching(int n, Value value, Reached reached) {
    using Scan = cub::BlockScan<double, sampling_threads>;
    __shared__ typename Scan::TempStorage scan_storage;
    __shared__ int found;
    if (threadIdx.x == 0) found = n;
    double carry = 0;
    for (int chunk = 0; chunk < n; chunk += sampling_threads) {
        int const i = chunk + static_cast<int>(threadIdx.x);
        double const mine = i < n ? value(i) : 0.0;
        double inclusive;
        double chunk_total;
        __syncthreads();  // scan storage reuse, and `found` initialised
        Scan(scan_storage).InclusiveSum(mine, inclusive, chunk_total);
        if (i < n && reached(carry + inclusive)) atomicMin(&found, i);
        carry += chunk_total;
        __syncthreads();
        if (found < n) break;
    }
    __syncthreads();
    int const result = found;
    __syncthreads();
    return result;
}

template <class Value>
__device__ double block_sum(int n, Value value) {
    using Reduce = cub::BlockReduce<double, sampling_threads>;
    __shared__ typename Reduce::TempStorage reduce_storage;
    __shared__ double total;
    double mine = 0;
    for (int i = static_cast<int>(threadIdx.x); i < n; i += sampling_threads) mine += value(i);
    double const sum = Reduce(reduce_storage).Sum(mine);
    if (threadIdx.x == 0) total = sum;
    __syncthreads();
    double const result = total;
    __syncthreads();
    return result;
}

// The first index in [0, n) with predicate(i) true, n when none: for predicates that hold on a
// suffix (weights below a threshold in ranked order).
template <class Predicate>
__device__ int first_index(int n, Predicate predicate) {
    __shared__ int found;
    if (threadIdx.x == 0) found = n;
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < n; i += sampling_threads)
        if (predicate(i)) {
            atomicMin(&found, i);
            break;
        }
    __syncthreads();
    int const result = found;
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(sampling_threads)
    sample_kernel(float const* __restrict__ logits, float const* __restrict__ ranked_logits,
                  int const* __restrict__ ranked_ids, std::uint8_t* __restrict__ kept,
                  DeviceSamplingParams const* __restrict__ all_params, int vocab,
                  std::int32_t* __restrict__ tokens) {
    int const seq = static_cast<int>(blockIdx.x);
    std::size_t const row = static_cast<std::size_t>(seq) * vocab;
    DeviceSamplingParams const params = all_params[seq];
    float const* const row_logits = logits + row;
    float const* const ranked = ranked_logits + row;
    int const* const ids = ranked_ids + row;
    std::uint8_t* const marks = kept + row;
    // The host refuses a NaN or +inf logit (naming the lowest such token) and a row of -inf
    // only: the same here, before the ranking (which orders NaN by its bits) is trusted.
    int const nonfinite = first_index(vocab, [&](int i) {
        float const logit = row_logits[i];
        return logit != logit || logit == positive_infinity;
    });
    if (nonfinite < vocab) {
        if (threadIdx.x == 0) tokens[seq] = nonfinite_logit_code(nonfinite);
        return;
    }
    float const max_logit = ranked[0];
    if (max_logit == negative_infinity) {
        if (threadIdx.x == 0) tokens[seq] = all_logits_masked;
        return;
    }
    std::int32_t const best = ids[0];
    if (params.temperature == 0) {
        if (threadIdx.x == 0) tokens[seq] = best;
        return;
    }
    // The host's function itself, so both passes below see the host's floats.
    auto const weight = [&](float logit) {
        return sampling_weight(logit, max_logit, params.temperature);
    };

    // Candidates: every token of positive weight (a ranked prefix).
    int count = first_index(vocab, [&](int i) { return !(weight(ranked[i]) > 0); });
    if (params.top_k > 0 && params.top_k < count) count = params.top_k;
    if (params.top_p < 1) {
        double const total =
            block_sum(count, [&](int i) { return static_cast<double>(weight(ranked[i])); });
        double const target = static_cast<double>(params.top_p) * total;
        int const last = first_prefix_reaching(
            count, [&](int i) { return static_cast<double>(weight(ranked[i])); },
            [&](double mass) { return mass >= target; });
        if (last < count) count = last + 1;
    }
    if (params.min_p > 0)
        count = first_index(count, [&](int i) { return !(weight(ranked[i]) >= params.min_p); });

    for (int i = static_cast<int>(threadIdx.x); i < vocab; i += sampling_threads) marks[i] = 0;
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < count; i += sampling_threads) marks[ids[i]] = 1;
    __syncthreads();

    auto const kept_weight = [&](int token) {
        return marks[token] ? static_cast<double>(weight(row_logits[token])) : 0.0;
    };
    double const total = block_sum(vocab, kept_weight);
    PhiloxCounter const bits = philox_draw({.seed = params.seed,
                                            .request_id = params.request_id,
                                            .step = params.step,
                                            .draw_index = 0});
    double const target = uniform_double(bits.words[0], bits.words[1]) * total;
    int const chosen =
        first_prefix_reaching(vocab, kept_weight, [&](double mass) { return mass > target; });
    // u * total can round up to total itself; the best token is always kept.
    if (threadIdx.x == 0) tokens[seq] = chosen < vocab ? chosen : best;
}

// What one thread has seen of a row for greedy: the largest finite-or-minus-infinity logit with
// the lowest id holding it, and the lowest id of a NaN or +inf logit (the host refuses the row,
// naming that token).
struct ArgmaxCandidate {
    float logit;
    int token;      // of `logit`; vocab when none seen
    int nonfinite;  // lowest NaN / +inf id; vocab when none
};

struct ArgmaxMerge {
    __device__ ArgmaxCandidate operator()(ArgmaxCandidate const& a,
                                          ArgmaxCandidate const& b) const {
        bool const a_wins = a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
        ArgmaxCandidate merged = a_wins ? a : b;
        merged.nonfinite = a.nonfinite < b.nonfinite ? a.nonfinite : b.nonfinite;
        return merged;
    }
};

__global__ void __launch_bounds__(sampling_threads)
    argmax_kernel(float const* __restrict__ logits, int vocab, std::int32_t* __restrict__ tokens) {
    int const seq = static_cast<int>(blockIdx.x);
    float const* const row = logits + static_cast<std::size_t>(seq) * vocab;
    // Each thread's ids increase, so a strict > keeps its lowest id of a tie.
    ArgmaxCandidate mine{negative_infinity, vocab, vocab};
    for (int i = static_cast<int>(threadIdx.x); i < vocab; i += sampling_threads) {
        float const logit = row[i];
        if (logit != logit || logit == positive_infinity) {
            if (i < mine.nonfinite) mine.nonfinite = i;
        } else if (logit > mine.logit || mine.token == vocab) {
            mine.logit = logit;
            mine.token = i;
        }
    }
    using Reduce = cub::BlockReduce<ArgmaxCandidate, sampling_threads>;
    __shared__ typename Reduce::TempStorage storage;
    ArgmaxCandidate const best = Reduce(storage).Reduce(mine, ArgmaxMerge{});
    if (threadIdx.x != 0) return;
    if (best.nonfinite < vocab) {
        tokens[seq] = nonfinite_logit_code(best.nonfinite);
    } else if (best.token == vocab || best.logit == negative_infinity) {
        tokens[seq] = all_logits_masked;
    } else {
        tokens[seq] = best.token;
    }
}

}  // namespace sampling_detail

// Greedy tokens of `seqs` rows of `vocab` logits (device memory): each row's lowest id of its
// largest logit, or the error code of a row the host would refuse (check_sampled_tokens). What
// sample() at temperature 0 draws, by one argmax reduction per row instead of a ranking; needs
// no workspace.
inline void sample_greedy(float const* logits, int seqs, int vocab, std::int32_t* tokens,
                          cudaStream_t stream = nullptr) {
    if (seqs <= 0) return;
    check_before_launch("argmax_kernel");
    sampling_detail::argmax_kernel<<<seqs, sampling_threads, 0, stream>>>(logits, vocab, tokens);
    check_launch("argmax_kernel");
}

// Device scratch for sampling up to `max_seqs` rows of `vocab` logits at a time. Its one-time
// setup runs on the stream it is made with (the caller's, not the legacy default stream), and
// every sample() waits for that setup on whatever stream it is given, so the workspace is safe
// to make on one stream and use on another, non-blocking ones included.
class DeviceSamplingWorkspace {
  public:
    DeviceSamplingWorkspace(int max_seqs, int vocab, cudaStream_t stream = nullptr)
        : max_seqs_(max_seqs),
          vocab_(vocab),
          ids_(elements(max_seqs, vocab)),
          ranked_ids_(elements(max_seqs, vocab)),
          ranked_logits_(elements(max_seqs, vocab)),
          kept_(elements(max_seqs, vocab)),
          offsets_(static_cast<std::size_t>(max_seqs) + 1) {
        if (max_seqs <= 0 || vocab <= 0) throw Error("cuda::DeviceSamplingWorkspace: empty shape");
        std::size_t bytes = 0;
        check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                  nullptr, bytes, static_cast<float const*>(nullptr), static_cast<float*>(nullptr),
                  static_cast<int const*>(nullptr), static_cast<int*>(nullptr),
                  static_cast<int>(elements(max_seqs, vocab)), max_seqs,
                  static_cast<int const*>(nullptr), static_cast<int const*>(nullptr)),
              "cub::DeviceSegmentedRadixSort temp storage size");
        sort_storage_ = DeviceBuffer<std::byte>(bytes);
        constexpr int setup_threads = 256;
        constexpr int setup_blocks = 1024;
        check_before_launch("segment_setup_kernel");
        sampling_detail::segment_setup_kernel<<<setup_blocks, setup_threads, 0, stream>>>(
            ids_.data(), offsets_.data(), max_seqs, vocab);
        check_launch("segment_setup_kernel");
        check(cudaEventCreateWithFlags(&setup_done_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(setup_done_, stream), "cudaEventRecord sampler setup");
    }
    DeviceSamplingWorkspace(DeviceSamplingWorkspace const&) = delete;
    DeviceSamplingWorkspace& operator=(DeviceSamplingWorkspace const&) = delete;
    ~DeviceSamplingWorkspace() {
        if (setup_done_ != nullptr) (void)cudaEventDestroy(setup_done_);  // cannot report here
    }

    int max_seqs() const { return max_seqs_; }
    int vocab() const { return vocab_; }

    // logits: [seqs][vocab] device (processed: penalties and bias applied); params: [seqs] device;
    // tokens: [seqs] device, the drawn tokens, or for a row the host would refuse its error code
    // (pass them to check_sampled_tokens once on the host).
    void sample(float const* logits, DeviceSamplingParams const* params, int seqs,
                std::int32_t* tokens, cudaStream_t stream = nullptr) {
        if (seqs <= 0) return;
        if (seqs > max_seqs_)
            throw Error(
                "cuda::DeviceSamplingWorkspace::sample: more rows than the workspace holds");
        check(cudaStreamWaitEvent(stream, setup_done_, 0), "cudaStreamWaitEvent sampler setup");
        check_before_launch("cub::DeviceSegmentedRadixSort::SortPairsDescending");
        int const items = static_cast<int>(elements(seqs, vocab_));
        std::size_t bytes = sort_storage_.size();
        // Key bits: all 32 (negative logits and -inf included).
        constexpr int begin_bit = 0;
        constexpr int end_bit = 32;
        check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                  sort_storage_.data(), bytes, logits, ranked_logits_.data(), ids_.data(),
                  ranked_ids_.data(), items, seqs, offsets_.data(), offsets_.data() + 1, begin_bit,
                  end_bit, stream),
              "cub::DeviceSegmentedRadixSort::SortPairsDescending");
        check_before_launch("sample_kernel");
        sampling_detail::sample_kernel<<<seqs, sampling_threads, 0, stream>>>(
            logits, ranked_logits_.data(), ranked_ids_.data(), kept_.data(), params, vocab_,
            tokens);
        check_launch("sample_kernel");
    }

  private:
    static std::size_t elements(int seqs, int vocab) {
        return static_cast<std::size_t>(seqs) * static_cast<std::size_t>(vocab);
    }

    int max_seqs_;
    int vocab_;
    DeviceBuffer<int> ids_;              // [max_seqs][vocab]: 0 .. vocab-1 per row
    DeviceBuffer<int> ranked_ids_;       // [max_seqs][vocab]
    DeviceBuffer<float> ranked_logits_;  // [max_seqs][vocab]
    DeviceBuffer<std::uint8_t> kept_;    // [max_seqs][vocab]
    DeviceBuffer<int> offsets_;          // [max_seqs + 1]: row starts
    DeviceBuffer<std::byte> sort_storage_;
    cudaEvent_t setup_done_ = nullptr;  // recorded after the ids and offsets are written
};

}  // namespace tinfer::kernels::cuda
