#pragma once
// Step loops that fail instead of hanging. A test that steps a scheduler or an engine until
// something happens (a preemption, a swap-in, going idle) bounds the loop here: when the
// condition still does not hold after `max_steps` steps the test case fails, naming what did
// not happen, rather than spinning until CTest's timeout kills the whole program.
#include <string_view>

#include <boost/test/unit_test.hpp>

namespace tinfer::testing {

// Calls `step()` until `done()` holds, at most `max_steps` times. Fails the test case with
// "<what> did not happen within <max_steps> steps" when it never does. Returns the steps taken.
template <class Done, class Step>
int step_until(Done&& done, Step&& step, int max_steps, std::string_view what) {
    int steps = 0;
    while (!done()) {
        BOOST_REQUIRE_MESSAGE(steps < max_steps,
                              what << " did not happen within " << max_steps << " steps");
        step();
        ++steps;
    }
    return steps;
}

}  // namespace tinfer::testing
