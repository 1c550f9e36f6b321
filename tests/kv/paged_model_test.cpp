// The real model (SmolLM2-135M-Instruct) over the paged KV cache:
//  - with fp32 blocks of 8, 16 and 32 tokens, prefill and 16 teacher-forced decode steps of
//    the golden prompts (all four at 16, the three short ones at 8 and 32) give bitwise the
//    logits of the contiguous cache (the paged view only
//    gathers the same floats, and the kernels are batch- and chunk-invariant by design);
//  - a prompt prefilled in uneven chunks that straddle block boundaries equals one-shot prefill,
//    bitwise (the kernels claim chunk invariance; this checks it on the paged cache);
//  - requests sharing a prefix decode the same greedy tokens (and bitwise the same logits) with
//    the prefix cache on as with it off, while actually skipping the cached tokens;
//  - forked samples of one prompt decode bitwise as independently prefilled sequences do, while
//    sharing the prompt's blocks (copy-on-write on the partly filled last block);
//  - fp8 and int8 codecs keep the top-1 token of the fp32 cache at nearly every position.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
namespace kv = tinfer::kv;
constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;
constexpr int vocab = smollm2.vocab;
constexpr int decode_steps = 16;  // the golden file's decode steps that carry logits
constexpr int threads = 2;
// Logit tolerance of the golden test: a fraction of the position's largest |logit|.
constexpr double logit_rtol = 1e-3;

namespace {

using Tokens = std::vector<std::int32_t>;

std::span<float const> row(std::vector<float> const& logits, std::size_t r) {
    return {logits.data() + r * vocab, static_cast<std::size_t>(vocab)};
}

int argmax(std::span<float const> logits) {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

bool bitwise_equal(std::span<float const> a, std::span<float const> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Logits of a prompt's prefill (every position) followed by `decode_steps` teacher-forced
// decode steps of its greedy continuation: [prompt + decode_steps][vocab].
struct ScoredRun {
    std::vector<float> logits;
    int rows() const { return static_cast<int>(logits.size() / vocab); }
};

struct Fixture {
    tinfer::gguf::File file = tinfer::gguf::File::open(tt::model_path());
    Model model = Model::bind(file);
    std::vector<tt::GoldenPrompt> prompts =
        tt::load_golden_logits(tt::data_dir() / "reference" / "golden_logits.bin");
    std::vector<ScoredRun> contiguous;  // per prompt, on the contiguous fp32 cache

    int longest_prompt() const {
        std::size_t n = 0;
        for (auto const& p : prompts) n = std::max(n, p.prompt.size());
        return static_cast<int>(n);
    }
    std::size_t longest_index() const {
        auto const it = std::max_element(prompts.begin(), prompts.end(), [](auto& a, auto& b) {
            return a.prompt.size() < b.prompt.size();
        });
        return static_cast<std::size_t>(it - prompts.begin());
    }
};

Fixture& fixture() {
    static std::unique_ptr<Fixture> f = std::make_unique<Fixture>();
    return *f;
}

// Runs prefill + decode on any KV store; `prepare(new_length)` makes room first (the paged
// cache's reserve, nothing for the contiguous one).
template <class Cache, class Prepare>
ScoredRun score(Model const& model, tt::GoldenPrompt const& prompt, Cache& cache, int slot,
                Prepare&& prepare) {
    int const n = static_cast<int>(prompt.prompt.size());
    Model::Workspace ws(n, threads);
    ScoredRun run;
    run.logits.resize(static_cast<std::size_t>(n + decode_steps) * vocab);
    tt::poison(std::span<float>(run.logits));
    prepare(n);
    tinfer::SequenceChunk const prefill{slot, 0, prompt.prompt, true};
    model.forward(std::span(&prefill, 1), cache, ws,
                  std::span<float>(run.logits).first(static_cast<std::size_t>(n) * vocab));
    for (int i = 0; i < decode_steps; ++i) {
        prepare(n + i + 1);
        tinfer::SequenceChunk const decode{
            slot, n + i, std::span(&prompt.greedy[static_cast<std::size_t>(i)], 1)};
        model.forward(
            std::span(&decode, 1), cache, ws,
            std::span<float>(run.logits).subspan(static_cast<std::size_t>(n + i) * vocab, vocab));
    }
    return run;
}

template <class Cache>
ScoredRun score_paged(Model const& model, tt::GoldenPrompt const& prompt, Cache& cache) {
    int const max_tokens = static_cast<int>(prompt.prompt.size()) + decode_steps;
    int const seq = cache.admit(max_tokens);
    ScoredRun run = score(model, prompt, cache, seq,
                          [&](int length) { BOOST_REQUIRE(cache.reserve(seq, length)); });
    BOOST_TEST(cache.tokens(seq) == max_tokens);
    cache.release(seq);
    return run;
}

// The contiguous fp32 runs every paged run is compared with, computed once; each is checked
// against the float64 reference so the bitwise comparisons below compare with something right.
std::vector<ScoredRun> const& contiguous_runs() {
    Fixture& f = fixture();
    if (!f.contiguous.empty()) return f.contiguous;
    BOOST_REQUIRE(!f.prompts.empty());
    kv::ContiguousKvCache<smollm2> cache(1, f.longest_prompt() + decode_steps);
    for (tt::GoldenPrompt const& prompt : f.prompts) {
        BOOST_REQUIRE(prompt.decode.size() >= static_cast<std::size_t>(decode_steps));
        cache.clear(0);
        ScoredRun run = score(f.model, prompt, cache, 0, [](int) {});
        int const n = static_cast<int>(prompt.prompt.size());
        for (int r = 0; r < run.rows(); ++r) {
            tt::GoldenPosition const& ref = r < n ? prompt.prefill[static_cast<std::size_t>(r)]
                                                  : prompt.decode[static_cast<std::size_t>(r - n)];
            double worst = 0;
            for (auto const& [id, value] : ref.logits) {
                worst = std::max(
                    worst, std::abs(row(run.logits, r)[static_cast<std::size_t>(id)] - value) /
                               (logit_rtol * ref.max_abs_logit));
            }
            BOOST_REQUIRE_MESSAGE(worst <= 1.0, prompt.name << " row " << r
                                                            << ": contiguous run off the "
                                                               "reference by "
                                                            << worst << " tolerances");
        }
        f.contiguous.push_back(std::move(run));
    }
    return f.contiguous;
}

// A pool with room for `tokens` tokens of the given cache type.
template <class Cache>
Cache cache_for_tokens(int tokens) {
    return Cache(Cache::bytes_per_block * static_cast<std::size_t>(Cache::blocks_for(tokens)));
}

template <int N>
struct BlockSize {
    static constexpr int value = N;
};
using BlockSizes = boost::mpl::list<BlockSize<8>, BlockSize<16>, BlockSize<32>>;

// Greedy generation of `count` tokens after `prompt` on a paged cache, the prompt's first
// `skip` tokens already cached. Returns the tokens and the logits of the first one.
template <class Cache>
std::pair<Tokens, std::vector<float>> generate(Model const& model, Cache& cache, int seq,
                                               Tokens const& prompt, int skip, int count) {
    int const n = static_cast<int>(prompt.size());
    Model::Workspace ws(n, threads);
    std::vector<float> logits(vocab), first_logits;
    tt::poison(std::span<float>(logits));
    BOOST_REQUIRE(cache.reserve(seq, n));
    tinfer::SequenceChunk const prefill{seq, skip,
                                        std::span(prompt).subspan(static_cast<std::size_t>(skip))};
    model.forward(std::span(&prefill, 1), cache, ws, logits);
    first_logits = logits;
    Tokens out{argmax(logits)};
    for (int i = 1; i < count; ++i) {
        BOOST_REQUIRE(cache.reserve(seq, n + i));
        tinfer::SequenceChunk const decode{seq, n + i - 1, std::span(&out.back(), 1)};
        model.forward(std::span(&decode, 1), cache, ws, logits);
        out.push_back(argmax(logits));
    }
    return {out, first_logits};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(paged_model)

BOOST_AUTO_TEST_CASE_TEMPLATE(fp32_paged_equals_contiguous_bitwise, Block, BlockSizes) {
    Fixture& f = fixture();
    auto const& expected = contiguous_runs();
    using Cache = kv::PagedKvCache<smollm2, Block::value, kv::Fp32Codec>;
    // Room for the longest run only: released blocks are reused by the next prompt.
    auto cache = cache_for_tokens<Cache>(f.longest_prompt() + decode_steps);
    for (std::size_t p = 0; p < f.prompts.size(); ++p) {
        // The 410-token prompt (two thirds of the tokens) runs at the default block size only;
        // the other three cross 26 blocks of 8 and 7 of 32.
        if (Block::value != 16 && p == f.longest_index()) continue;
        ScoredRun const paged = score_paged(f.model, f.prompts[p], cache);
        int differing = 0;
        for (int r = 0; r < paged.rows(); ++r)
            differing += bitwise_equal(row(paged.logits, r), row(expected[p].logits, r)) ? 0 : 1;
        BOOST_TEST(differing == 0, f.prompts[p].name << ", block size " << Block::value << ": "
                                                     << differing << " of " << paged.rows()
                                                     << " logit rows differ from the contiguous "
                                                        "cache");
    }
    BOOST_TEST(cache.free_blocks() == cache.total_blocks());
}

// Chunk sizes chosen to start and end inside blocks, span several blocks, and be a single token.
BOOST_AUTO_TEST_CASE(chunked_prefill_equals_one_shot_bitwise) {
    Fixture& f = fixture();
    auto const& expected = contiguous_runs();
    std::size_t const index = f.longest_index();
    Tokens const& prompt = f.prompts[index].prompt;
    using Cache = kv::PagedKvCache<smollm2, 16, kv::Fp32Codec>;
    auto cache = cache_for_tokens<Cache>(static_cast<int>(prompt.size()));
    int const seq = cache.admit(static_cast<int>(prompt.size()));
    Model::Workspace ws(static_cast<int>(prompt.size()), threads);
    std::vector<float> logits;
    std::size_t done = 0;
    int chunks = 0;
    for (std::size_t const size : {5, 1, 13, 40, 3, 17, 100000}) {
        std::size_t const take = std::min(size, prompt.size() - done);
        if (take == 0) break;
        BOOST_REQUIRE(cache.reserve(seq, static_cast<int>(done + take)));
        tinfer::SequenceChunk const chunk{seq, static_cast<int>(done),
                                          std::span(prompt).subspan(done, take), true};
        logits.assign(take * vocab, NAN);
        f.model.forward(std::span(&chunk, 1), cache, ws, logits);
        for (std::size_t i = 0; i < take; ++i) {
            BOOST_TEST(bitwise_equal(row(logits, i), row(expected[index].logits, done + i)),
                       "position " << done + i << " (chunk at " << done << " of " << take
                                   << " tokens) differs from one-shot prefill");
        }
        done += take;
        ++chunks;
    }
    BOOST_TEST(done == prompt.size());
    BOOST_TEST(chunks >= 4, "the prompt should be long enough for several chunks");
}

// Requests = shared prefix + a different suffix each. With the prefix cache on, every request
// after the first prefills only past the cached full blocks, and must still produce the same
// greedy tokens, its first logits bitwise those of a full prefill.
BOOST_AUTO_TEST_CASE(prefix_cache_on_and_off_decode_the_same) {
    Fixture& f = fixture();
    constexpr int block = 16;
    constexpr int generated = 8;
    using Cache = kv::PagedKvCache<smollm2, block, kv::Fp32Codec>;
    // The longest golden prompt is the shared "system prompt"; the other prompts are suffixes.
    Tokens const& prefix = f.prompts[f.longest_index()].prompt;
    std::vector<Tokens> requests;
    for (std::size_t p = 0; p < f.prompts.size(); ++p) {
        if (p == f.longest_index()) continue;
        Tokens r = prefix;
        r.insert(r.end(), f.prompts[p].prompt.begin(), f.prompts[p].prompt.end());
        requests.push_back(std::move(r));
    }
    BOOST_REQUIRE(requests.size() >= 2);
    int longest = 0;
    for (auto const& r : requests) longest = std::max(longest, static_cast<int>(r.size()));
    int const max_tokens = longest + generated;

    auto cache_off = cache_for_tokens<Cache>(max_tokens);
    // Room for one running request plus every request's cached blocks: nothing gets evicted.
    auto cache_on = cache_for_tokens<Cache>(max_tokens * static_cast<int>(requests.size() + 1));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        Tokens const& prompt = requests[i];
        BOOST_TEST_CONTEXT("request " << i) {
            int const off = cache_off.admit(max_tokens);
            auto const [tokens_off, logits_off] =
                generate(f.model, cache_off, off, prompt, 0, generated);
            cache_off.release(off);

            kv::Admission const on = cache_on.admit(prompt, max_tokens);
            // The first request finds nothing; later ones at least the prefix's full blocks.
            int const expected_cached =
                i == 0 ? 0 : static_cast<int>(prefix.size()) / block * block;
            BOOST_TEST(on.cached_tokens >= expected_cached);
            BOOST_TEST(on.cached_tokens < static_cast<int>(prompt.size()));
            auto const [tokens_on, logits_on] =
                generate(f.model, cache_on, on.seq, prompt, on.cached_tokens, generated);
            cache_on.cache_prefix(on.seq, prompt);
            cache_on.release(on.seq);

            BOOST_TEST(tokens_on == tokens_off, boost::test_tools::per_element());
            BOOST_TEST(bitwise_equal(logits_on, logits_off),
                       "first-token logits differ with the prefix cache on");
        }
    }
    auto const& stats = cache_on.prefix_cache().stats();
    BOOST_TEST(stats.hit_requests == static_cast<std::int64_t>(requests.size() - 1));
    BOOST_TEST(cache_off.free_blocks() == cache_off.total_blocks());
}

// n samples of one prompt: prefill once, fork, then decode different forced continuations in one
// batch (so each fork writes its own tokens into the shared, partly filled last block). Each
// must equal an independently prefilled sequence bitwise, and the forks must share the prompt.
BOOST_AUTO_TEST_CASE(forked_samples_decode_as_independent_sequences) {
    Fixture& f = fixture();
    constexpr int block = 16;
    constexpr int samples = 3;
    constexpr int steps = 6;
    using Cache = kv::PagedKvCache<smollm2, block, kv::Fp32Codec>;
    tt::GoldenPrompt const& golden = f.prompts[f.longest_index()];
    Tokens const& prompt = golden.prompt;
    int const n = static_cast<int>(prompt.size());
    BOOST_REQUIRE_MESSAGE(n % block != 0, "the last block must be partly filled to test CoW");
    int const max_tokens = n + steps;
    // Sample s decodes golden.greedy shifted by s: three different continuations.
    auto const forced = [&](int s, int i) {
        return golden.greedy[static_cast<std::size_t>(s + i) % golden.greedy.size()];
    };

    auto run_batch = [&](Cache& cache, std::vector<int> const& seqs) {
        Model::Workspace ws(samples, threads);
        std::vector<std::vector<float>> per_sample(samples);
        std::vector<std::int32_t> step_tokens(samples);
        for (int i = 0; i < steps; ++i) {
            std::vector<tinfer::SequenceChunk> chunks;
            for (int s = 0; s < samples; ++s) {
                BOOST_REQUIRE(cache.reserve(seqs[s], n + i + 1));
                step_tokens[s] = forced(s, i);
                chunks.push_back({seqs[s], n + i, std::span(&step_tokens[s], 1)});
            }
            std::vector<float> logits(samples * static_cast<std::size_t>(vocab), NAN);
            f.model.forward(chunks, cache, ws, logits);
            for (int s = 0; s < samples; ++s) {
                per_sample[s].insert(per_sample[s].end(), logits.begin() + s * vocab,
                                     logits.begin() + (s + 1) * vocab);
            }
        }
        return per_sample;
    };
    auto prefill = [&](Cache& cache, int seq) {
        Model::Workspace ws(n, threads);
        std::vector<float> logits(vocab);
        BOOST_REQUIRE(cache.reserve(seq, n));
        tinfer::SequenceChunk const chunk{seq, 0, prompt};
        f.model.forward(std::span(&chunk, 1), cache, ws, logits);
    };

    auto forked_cache = cache_for_tokens<Cache>(samples * max_tokens);
    std::vector<int> forks{forked_cache.admit(max_tokens)};
    prefill(forked_cache, forks[0]);
    for (int s = 1; s < samples; ++s) forks.push_back(forked_cache.fork(forks[0]));
    int const prompt_blocks = Cache::blocks_for(n);
    BOOST_TEST(forked_cache.used_blocks() == prompt_blocks, "forks must share the prompt");
    auto const forked = run_batch(forked_cache, forks);
    // Each fork now owns a private copy of the last prompt block; the full ones stay shared.
    int const full_shared = n / block;
    BOOST_TEST(forked_cache.used_blocks() ==
               full_shared + samples * (Cache::blocks_for(max_tokens) - full_shared));

    auto independent_cache = cache_for_tokens<Cache>(samples * max_tokens);
    std::vector<int> independent;
    for (int s = 0; s < samples; ++s) {
        independent.push_back(independent_cache.admit(max_tokens));
        prefill(independent_cache, independent.back());
    }
    auto const alone = run_batch(independent_cache, independent);
    for (int s = 0; s < samples; ++s) {
        BOOST_TEST(bitwise_equal(forked[s], alone[s]),
                   "sample " << s << ": forked decode differs from an independent sequence");
    }
    // The samples did decode different tokens, so sharing could have shown.
    BOOST_TEST(!bitwise_equal(forked[0], forked[1]));
}

// Quantized KV against fp32 KV on the longest golden prompt (prefill + 16 teacher-forced decode
// steps, 426 positions): the share of positions whose top-1 token is unchanged. Measured on this
// model (x86-64, -march=native): fp8 e4m3 409/426 (96.0%), fp8 e5m2 399/426 (93.7%), int8 416/426
// (97.7%), int8 K + int4 V 408/426 (95.8%). The run is deterministic, so the thresholds sit about
// three points under those, room for another compiler or ISA to flip a few near-ties, and still
// fail a codec that loses its scale or a rounding bug (which drop agreement far lower).
template <class KCodec, class VCodec>
double top1_agreement(double threshold) {
    Fixture& f = fixture();
    auto const& expected = contiguous_runs();
    std::size_t const index = f.longest_index();
    using Cache = kv::PagedKvCache<smollm2, 16, KCodec, VCodec>;
    auto cache =
        cache_for_tokens<Cache>(static_cast<int>(f.prompts[index].prompt.size()) + decode_steps);
    ScoredRun const quantized = score_paged(f.model, f.prompts[index], cache);
    int agree = 0, bitwise = 0;
    for (int r = 0; r < quantized.rows(); ++r) {
        agree += argmax(row(quantized.logits, r)) == argmax(row(expected[index].logits, r));
        bitwise += bitwise_equal(row(quantized.logits, r), row(expected[index].logits, r));
    }
    double const share = static_cast<double>(agree) / quantized.rows();
    BOOST_TEST_MESSAGE("K " << KCodec::name << ", V " << VCodec::name << ": top-1 agreement "
                            << agree << "/" << quantized.rows());
    // Position 0 attends to itself only, softmax of one score is exactly 1, but V is still
    // quantized, so no row should be bitwise fp32: the codec really is in the path.
    BOOST_TEST(bitwise == 0, bitwise << " rows are bitwise fp32 under a lossy codec");
    BOOST_TEST(share >= threshold, "K " << KCodec::name << ", V " << VCodec::name
                                        << ": top-1 agreement " << share << " below " << threshold);
    return share;
}

BOOST_AUTO_TEST_CASE(quantized_codecs_keep_top1) {
    top1_agreement<kv::Fp8E4M3Codec, kv::Fp8E4M3Codec>(0.93);
    top1_agreement<kv::Fp8E5M2Codec, kv::Fp8E5M2Codec>(0.90);
    top1_agreement<kv::Int8Codec, kv::Int8Codec>(0.95);
    top1_agreement<kv::Int8Codec, kv::Int4Codec>(0.92);
}

BOOST_AUTO_TEST_SUITE_END()
