// When "no CUDA device" is a skip and when it is a failure (kernels/cuda/device_probe.hpp), on
// the CPU: a machine without a GPU skips whatever CUDA says; a machine that shows a GPU (a
// /dev/nvidiaN node or nvidia-smi listing one) fails whenever CUDA cannot use it.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/cuda/device_probe.hpp>

namespace tk = tinfer::kernels::cuda;

BOOST_AUTO_TEST_CASE(devices_found_are_used) {
    for (bool const visible : {false, true}) {
        auto const decision = tk::decide_device_count(tk::CudaDeviceQuery::ok, 2, visible);
        BOOST_TEST(decision.devices == 2);
        BOOST_TEST(decision.failure.empty());
    }
}

BOOST_AUTO_TEST_CASE(no_gpu_on_the_machine_skips) {
    for (auto const query : {tk::CudaDeviceQuery::ok, tk::CudaDeviceQuery::no_device_or_driver}) {
        auto const decision = tk::decide_device_count(query, 0, false, "cudaErrorNoDevice");
        BOOST_TEST(decision.devices == 0);
        BOOST_TEST(decision.failure.empty());
    }
}

BOOST_AUTO_TEST_CASE(a_gpu_cuda_cannot_use_fails) {
    for (auto const query : {tk::CudaDeviceQuery::ok, tk::CudaDeviceQuery::no_device_or_driver,
                             tk::CudaDeviceQuery::other_error}) {
        auto const decision =
            tk::decide_device_count(query, 0, true, "cudaErrorInsufficientDriver");
        BOOST_TEST(decision.devices == 0);
        BOOST_TEST(!decision.failure.empty());
        BOOST_TEST(decision.failure.find("shows a GPU") != std::string::npos, decision.failure);
    }
    auto const named = tk::decide_device_count(tk::CudaDeviceQuery::no_device_or_driver, 0, true,
                                               "cudaErrorInsufficientDriver");
    BOOST_TEST(named.failure.find("cudaErrorInsufficientDriver") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(other_cuda_errors_fail_even_without_a_visible_gpu) {
    auto const decision = tk::decide_device_count(tk::CudaDeviceQuery::other_error, 0, false,
                                                  "cudaErrorInitializationError");
    BOOST_TEST(!decision.failure.empty());
    BOOST_TEST(decision.failure.find("cudaErrorInitializationError") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(gpu_nodes_are_told_from_driver_nodes) {
    auto const dir = std::filesystem::temp_directory_path() /
                     ("tinfer_probe_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    auto const touch = [&](char const* name) { std::ofstream(dir / name) << ""; };
    BOOST_TEST(!tk::gpu_device_node_in(dir));
    touch("nvidiactl");  // a loaded driver makes these even without a GPU
    touch("nvidia-uvm");
    touch("nvidia-uvm-tools");
    touch("nvidia-caps");
    BOOST_TEST(!tk::gpu_device_node_in(dir));
    touch("nvidia3");
    BOOST_TEST(tk::gpu_device_node_in(dir));
    std::filesystem::remove_all(dir);
    BOOST_TEST(!tk::gpu_device_node_in(dir / "missing"));  // no directory: no GPU, no throw
}

BOOST_AUTO_TEST_CASE(nvidia_smi_listing_is_read) {
    BOOST_TEST(tk::command_lists_gpu("echo 'GPU 0: NVIDIA H200 (UUID: GPU-1234)'"));
    BOOST_TEST(!tk::command_lists_gpu("echo 'No devices were found'"));
    BOOST_TEST(!tk::command_lists_gpu("exit 9"));  // nvidia-smi missing or failing
}
