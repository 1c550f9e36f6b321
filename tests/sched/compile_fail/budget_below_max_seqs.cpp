// Must not compile: 8 running sequences cannot all decode within a 4-token step.
#include <tinfer/sched/batching.hpp>

int main() {
    tinfer::sched::ContinuousBatching<8, 4> batching;
    (void)batching;
}
