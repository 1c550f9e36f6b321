// Must not compile: a queue order without before(a, b) is not a QueueOrder.
#include <tinfer/sched/scheduler.hpp>

using namespace tinfer::sched;

struct ShortestFirst {
    bool less(Request const& a, Request const& b) const {
        return a.prompt_length < b.prompt_length;
    }
};

int main() {
    Scheduler<ContinuousBatching<8, 64>, WholePrompt, PreemptByRecompute, ShortestFirst> scheduler;
    (void)scheduler;
}
