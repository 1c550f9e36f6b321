// Must not compile: PreemptBySwap needs a capacity that reports a host pool (SwapCapacity).
#include <tinfer/sched/scheduler.hpp>

using namespace tinfer::sched;

struct DeviceOnly {
    int free_blocks() const { return 0; }
    int blocks_needed(RequestId, int) const { return 0; }
    int reclaimable_blocks(RequestId) const { return 0; }
};

int main() {
    Scheduler<ContinuousBatching<8, 64>, WholePrompt, PreemptBySwap, Fcfs> scheduler;
    DeviceOnly const kv;
    (void)scheduler.schedule(kv);
}
