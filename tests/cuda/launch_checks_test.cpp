// The launch rules that need the CUDA runtime library but no GPU (built by the host compiler,
// linked with cudart; on a machine without a driver every runtime call fails, which is enough to
// leave an error pending): an error pending before a launch is named as earlier work's, not the
// new kernel's (kernels/cuda/check.cuh); per-device setup runs once on each device, not once per
// process; a refusal the attention kernels recorded becomes the error naming the sequence
// (kernels/cuda/kernel_status.hpp).
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/kernel_status.hpp>

namespace tk = tinfer::kernels::cuda;

namespace {

bool contains(std::string const& text, std::string const& part) {
    return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_checks)

// An invalid device id fails on every machine (cudaErrorInvalidDevice with a GPU,
// cudaErrorInsufficientDriver without a driver) and leaves that error pending; the next launch
// must not take the blame.
BOOST_AUTO_TEST_CASE(an_error_pending_before_a_launch_is_named_earlier) {
    cudaError_t const failed = cudaSetDevice(-1);
    BOOST_REQUIRE(failed != cudaSuccess);
    try {
        tk::check_before_launch("rope_table_kernel");
        BOOST_FAIL("a pending error passed check_before_launch");
    } catch (tk::CudaError const& error) {
        std::string const what = error.what();
        BOOST_TEST(error.code == failed);
        BOOST_TEST(contains(what, "an earlier CUDA call or kernel failed"), what);
        BOOST_TEST(contains(what, "before launching rope_table_kernel"), what);
        BOOST_TEST(contains(what, "launch_checks_test.cpp"), what);  // the launch site
    }
    // The pending error was taken: with a driver nothing is left for the launch to report (without
    // one, every call keeps failing with the driver's error).
    if (cudaPeekAtLastError() == cudaSuccess) BOOST_CHECK_NO_THROW(tk::check_launch("rope"));
}

// A synchronisation or copy that reports a kernel's execution failure did not cause it.
BOOST_AUTO_TEST_CASE(execution_failures_are_reported_as_an_earlier_kernels) {
    for (cudaError_t const failure : {cudaErrorIllegalAddress, cudaErrorLaunchFailure,
                                      cudaErrorAssert, cudaErrorMisalignedAddress}) {
        BOOST_TEST(tk::is_earlier_kernel_failure(failure));
        try {
            tk::check(failure, "cudaStreamSynchronize");
            BOOST_FAIL("check passed a failure");
        } catch (tk::CudaError const& error) {
            BOOST_TEST(contains(error.what(), "a kernel queued earlier failed"), error.what());
        }
    }
    // A configuration error is the call's own.
    BOOST_TEST(!tk::is_earlier_kernel_failure(cudaErrorInvalidConfiguration));
    try {
        tk::check(cudaErrorInvalidValue, "cudaMemcpyAsync");
    } catch (tk::CudaError const& error) {
        BOOST_TEST(!contains(error.what(), "earlier"), error.what());
    }
}

// Function attributes belong to a device's context: a second device gets its own setup, a device
// already set up does not repeat it, and a setup that threw is tried again.
BOOST_AUTO_TEST_CASE(per_device_setup_runs_once_on_each_device) {
    tk::PerDeviceOnce once;
    std::vector<int> ran;
    auto const setup_on = [&](int device) { once(device, [&] { ran.push_back(device); }); };
    setup_on(0);
    setup_on(0);
    setup_on(1);
    setup_on(3);
    setup_on(1);
    setup_on(0);
    BOOST_TEST(ran == (std::vector<int>{0, 1, 3}), boost::test_tools::per_element());

    BOOST_CHECK_THROW(once(2, [] { throw std::runtime_error("no memory"); }), std::runtime_error);
    setup_on(2);
    BOOST_TEST(ran == (std::vector<int>{0, 1, 3, 2}), boost::test_tools::per_element());
    BOOST_CHECK_THROW(once(-1, [] {}), tinfer::Error);
}

// What decode and prefill attention record for a length only the device saw becomes an error
// naming the sequence, its length and the launch's limit; nothing recorded, nothing thrown.
BOOST_AUTO_TEST_CASE(a_recorded_refusal_throws_naming_the_sequence) {
    BOOST_CHECK_NO_THROW(tk::throw_if_refused({}));
    struct Case {
        tk::KernelStatusCode code;
        std::vector<std::string> words;
    };
    for (Case const& c : {
             Case{tk::KernelStatusCode::context_beyond_max_context_length,
                  {"decode_attention", "sequence 5", "context length 4097",
                   "max_context_length 4096"}},
             Case{tk::KernelStatusCode::queries_beyond_max_queries,
                  {"prefill_attention", "sequence 5", "4097 queries", "max_queries 4096"}},
             Case{tk::KernelStatusCode::context_shorter_than_queries,
                  {"prefill_attention", "sequence 5", "context length 4097", "4096 queries"}},
             Case{tk::KernelStatusCode::empty_context, {"decode_attention", "sequence 5"}},
         }) {
        tk::KernelStatus const status{
            .code = static_cast<int>(c.code), .seq = 5, .value = 4097, .limit = 4096};
        try {
            tk::throw_if_refused(status);
            BOOST_FAIL("a refusal did not throw");
        } catch (tinfer::Error const& error) {
            for (std::string const& word : c.words)
                BOOST_TEST(contains(error.what(), word), error.what() << " lacks " << word);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
