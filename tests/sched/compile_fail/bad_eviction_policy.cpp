// Must not compile: an eviction policy without a capacity bound (max_kept) is not an
// EvictionPolicy, since the scheduler could not size a sequence's KV.
#include <span>
#include <vector>

#include <tinfer/sched/scheduler.hpp>

using namespace tinfer::sched;

struct KeepEvens {
    static constexpr bool needs_attention_scores = false;
    static std::vector<int> select_kept(int length, std::span<float const>) {
        std::vector<int> kept;
        for (int slot = 0; slot < length; slot += 2) kept.push_back(slot);
        return kept;
    }
};

int main() {
    Scheduler<ContinuousBatching<8, 64>, WholePrompt, PreemptByRecompute, Fcfs, KeepEvens>
        scheduler;
    (void)scheduler;
}
