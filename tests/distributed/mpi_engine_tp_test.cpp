// The Engine holding a tensor-parallel model (3 ranks): every rank runs its own Engine in
// lockstep on a small synthetic model, fed the same requests, under continuous batching with
// chunked prefill, the prefix cache and preemption forced by a small KV budget, greedy and
// seeded sampled requests together. Checked: every rank streams the same tokens (they sample
// from the same all-reduced logits), and the tokens equal one process's (TP 1, run on every
// rank) except at reported near-ties, where TP 1's own top-2 log-probability margin is within
// what the reordered all-reduce sums can move it.
//
// Then the same load in lockstep (distributed/lockstep.hpp), as serve --tp runs it: only rank
// 0 submits, the other ranks follow its steps; rank 0's tokens must equal those of the TP 3 run
// above bitwise (the same batches, so the same sums), and every follower's stream equals rank
// 0's (Lockstep::follow throws otherwise). A last lockstep run has a prompt-lookup speculative
// request and an abort: the speculative request's greedy tokens equal TP 1's non-speculative
// ones (up to a near-tie), the aborted request ends `aborted` on rank 0 and its blocks come back
// on every rank.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <tinfer/distributed/lockstep.hpp>
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/synthetic_model.hpp>
#include <tinfer/model/parallel.hpp>

#include "lockstep_load.hpp"
#include "mpi_testing.hpp"

using namespace tinfer;
namespace s = tinfer::sched;

namespace {

constexpr int ranks = 3;
constexpr ModelConfig tiny{.layers = 2,
                           .hidden = 96,
                           .heads = 6,
                           .kv_heads = 3,
                           .head_dim = 16,
                           .ffn = 192,
                           .vocab = 64,
                           .max_context = 256,
                           .rope_base = 10000.0,
                           .norm_eps = 1e-5,
                           .arch = {.lm_head = LmHead::separate}};
using Serving = s::Scheduler<s::ContinuousBatching<4, 64>, s::ChunkedPrefill<16>,
                             s::PreemptByRecompute, s::Fcfs>;
using Single = Engine<model::Llama<tiny>, Serving>;
using Parallel = model::TensorParallel<ranks, distributed::MpiCommunicator>;
using Sharded = Engine<model::Llama<tiny, Parallel>, Serving>;

using testing::mpi::lockstep_load;
using testing::mpi::serve_load;
using testing::mpi::Stream;

}  // namespace

int main(int argc, char** argv) {
    return testing::mpi::run(argc, argv, "mpi_engine_tp_test", [](testing::mpi::Checks& checks) {
        std::uint64_t const seed = testing::mpi::shared_seed();
        distributed::MpiCommunicator mpi;
        if (!checks.expect(mpi.size() == ranks, "needs 3 ranks")) return;
        gguf::SyntheticModel model(tiny, 20261201);
        model.with_tokenizer();
        std::vector<std::byte> const bytes = model.bytes();
        auto const requests = lockstep_load(seed, {.top_logprobs = 2});
        // A budget of 10 blocks of 16 tokens per rank: the load needs more, so the scheduler
        // preempts, identically on every rank.
        EngineOptions const options{.kv_budget_bytes = 10 * Sharded::Cache::bytes_per_block,
                                    .threads = 1};
        EngineOptions const single_options{.kv_budget_bytes = 10 * Single::Cache::bytes_per_block,
                                           .threads = 1};

        Single single(gguf::File::from_bytes(bytes), single_options);
        std::vector<Stream> const expected = serve_load(single, requests, "TP 1");
        Sharded sharded(gguf::File::from_bytes(bytes), options, {}, Parallel(mpi));
        std::vector<Stream> const got = serve_load(sharded, requests, "TP 3");

        checks.expect(sharded.metrics().summary().preemptions > 0,
                      "the small KV budget forced preemptions under TP");
        checks.expect(sharded.metrics().summary().prefix_hit_rate > 0,
                      "the shared prompt prefix was served from the prefix cache under TP");
        checks.expect(sharded.cache().used_blocks() == sharded.cache().prefix_only_blocks(),
                      "every sequence's blocks went back");

        // Every rank streamed the same tokens: compare with rank 0's.
        for (std::size_t i = 0; i < requests.size(); ++i) {
            std::vector<std::int32_t> tokens = got[i].tokens;
            int length = static_cast<int>(tokens.size());
            MPI_Bcast(&length, 1, MPI_INT, 0, mpi.handle());
            std::vector<std::int32_t> rank0(static_cast<std::size_t>(length));
            if (mpi.rank() == 0) rank0 = tokens;
            MPI_Bcast(rank0.data(), length, MPI_INT32_T, 0, mpi.handle());
            checks.expect(rank0 == tokens,
                          "request " + std::to_string(i) + ": this rank's tokens equal rank 0's");
        }

        // Against one process: equal, or different first at a near-tie of TP 1's logits. The
        // all-reduce sums 3 partial products in another order than one dot product does, so a
        // logit moves by a few float ulps of the partial sums; 1e-3 in log-probability is far
        // above that and far below a typical gap of a random model's 64 logits.
        constexpr float near_tie = 1e-3f;
        int equal = 0, near_ties = 0;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            Stream const& a = expected[i];
            Stream const& b = got[i];
            std::size_t k = 0;
            while (k < a.tokens.size() && k < b.tokens.size() && a.tokens[k] == b.tokens[k]) ++k;
            if (k == a.tokens.size() && k == b.tokens.size()) {
                ++equal;
                continue;
            }
            bool const tie = k < a.tokens.size() && a.margins[k] < near_tie;
            near_ties += tie;
            checks.expect(tie, "request " + std::to_string(i) +
                                   ": TP 3 differs from TP 1 at token " + std::to_string(k) +
                                   " where TP 1's top-2 margin is " +
                                   (k < a.margins.size() ? std::to_string(a.margins[k]) : "n/a"));
        }
        if (mpi.rank() == 0)
            std::printf(
                "TP 3 vs TP 1: %d of %zu requests equal, %d differ at a near-tie; %d "
                "preemptions, prefix hit rate %.2f\n",
                equal, requests.size(), near_ties, sharded.metrics().summary().preemptions,
                sharded.metrics().summary().prefix_hit_rate);

        // The same load in lockstep: rank 0 alone submits.
        {
            Sharded stepped(gguf::File::from_bytes(bytes), options, {}, Parallel(mpi));
            distributed::Lockstep lockstep(mpi);
            if (lockstep.leads()) {
                lockstep.lead(stepped);
                std::vector<Stream> const led = serve_load(stepped, requests, "TP 3 in lockstep");
                lockstep.finish();
                for (std::size_t i = 0; i < requests.size(); ++i)
                    checks.expect(led[i].tokens == got[i].tokens,
                                  "request " + std::to_string(i) +
                                      ": in lockstep, rank 0 streams the tokens of the TP 3 run "
                                      "fed on every rank");
            } else {
                std::uint64_t const steps = lockstep.follow(stepped);
                checks.expect(steps > 0, "a follower ran rank 0's steps");
                checks.expect(stepped.live_requests() == 0, "a follower's requests all ended");
            }
            checks.expect(stepped.metrics().summary().preemptions > 0,
                          "in lockstep, every rank preempted (the same plans)");
            checks.expect(stepped.cache().used_blocks() == stepped.cache().prefix_only_blocks(),
                          "in lockstep, every sequence's blocks went back on this rank");
        }

        // Speculation and an abort in lockstep. The speculative prompt repeats a phrase, so
        // prompt lookup finds drafts.
        {
            std::mt19937_64 rng(seed ^ 0x5eed);
            std::vector<std::int32_t> phrase;
            for (int i = 0; i < 6; ++i) phrase.push_back(static_cast<std::int32_t>(rng() % 64));
            GenerationRequest speculative{.max_tokens = 24, .ignore_eos = true, .draft_tokens = 3};
            for (int r = 0; r < 5; ++r)
                speculative.prompt_tokens.insert(speculative.prompt_tokens.end(), phrase.begin(),
                                                 phrase.end());
            speculative.sampling.temperature = 0;
            GenerationRequest plain = speculative;
            plain.draft_tokens = 0;
            plain.sampling.top_logprobs = 2;
            std::vector<Stream> const reference = serve_load(single, {plain}, "TP 1 (speculative)");

            Sharded stepped(gguf::File::from_bytes(bytes), options, {}, Parallel(mpi));
            distributed::Lockstep lockstep(mpi);
            if (lockstep.leads()) {
                lockstep.lead(stepped);
                Stream drafted, aborted;
                stepped.submit(speculative, [&](TokenEvent const& e) {
                    if (e.token >= 0) drafted.tokens.push_back(e.token);
                    if (e.finish) drafted.finish = *e.finish;
                });
                GenerationRequest long_one = requests[2];
                long_one.max_tokens = 60;  // fits the 10-block cache with any prompt (<= 69 tokens)
                auto const doomed = stepped.submit(long_one, [&](TokenEvent const& e) {
                    if (e.token >= 0) aborted.tokens.push_back(e.token);
                    if (e.finish) aborted.finish = *e.finish;
                });
                for (int steps = 0; stepped.step() && steps < 5000; ++steps)
                    if (aborted.tokens.size() == 3) stepped.abort(doomed);
                lockstep.finish();
                checks.expect(aborted.finish == FinishReason::aborted && aborted.tokens.size() < 10,
                              "the request aborted after 3 tokens ended aborted in lockstep");
                checks.expect(stepped.speculation_stats().accepted > 0,
                              "prompt lookup's drafts were accepted under TP");
                std::size_t k = 0;
                Stream const& a = reference[0];
                while (k < a.tokens.size() && k < drafted.tokens.size() &&
                       a.tokens[k] == drafted.tokens[k])
                    ++k;
                bool const same = k == a.tokens.size() && k == drafted.tokens.size();
                checks.expect(same || (k < a.margins.size() && a.margins[k] < near_tie),
                              "the speculative request under TP 3 streams TP 1's greedy tokens "
                              "(first difference at " +
                                  std::to_string(k) + ")");
            } else {
                lockstep.follow(stepped);
            }
            checks.expect(stepped.live_requests() == 0 &&
                              stepped.cache().used_blocks() == stepped.cache().prefix_only_blocks(),
                          "after speculation and an abort in lockstep, every block went back");
        }
    });
}
