// int8_linear_bench: the int8 strip kernels (kernels/int8_dot.hpp through kernels::linear_int8)
// on their own, one row per weight type with an int8 dot product:
//   decode   1 token against enough copies of one matrix to stream them from memory (more than
//            four times the last-level cache), as a decode step reads a model's weights:
//            GB/s = strip bytes read / time (the strips are the GGUF's bytes, so this is the
//            file's weight bytes per second), with the read bandwidth this program measures;
//   prefill  `--tokens` tokens against one matrix: int8 GMAC/s = rows x cols x tokens / time,
//            as the model runs it (panels on AVX-512 from 8 tokens, kernels/int8_panels.hpp)
//            and on the strips alone.
// Both single-threaded by default (`-t`). The matrix is Gemma 3 270M's FFN down shape by
// default (640 x 2048; K-quants need rows of whole 256-element super-blocks); its values are
// random with sane scales (no subnormals or NaNs to slow the float arithmetic).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include <tinfer/core/half.hpp>
#include <tinfer/core/huge_pages.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "support/roofline.hpp"

namespace {

namespace k = tinfer::kernels;
using tinfer::DType;

struct Options {
    int rows = 640;
    int cols = 2048;
    int tokens = 512;
    int threads = 1;
    int repetitions = 5;
    double stream_mib = 192;  // decode: strip bytes streamed per pass (copies of the matrix)
    std::vector<std::string> types{"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"};
};

// One GGUF block of random quants with its f16 scales set to small normal values.
template <DType T>
void random_block(std::mt19937_64& rng, tinfer::quant::BlockOfT<T>& block) {
    std::uniform_int_distribution<int> byte(0, 255);
    auto* bytes = reinterpret_cast<std::uint8_t*>(&block);
    for (std::size_t i = 0; i < sizeof block; ++i) bytes[i] = static_cast<std::uint8_t>(byte(rng));
    block.d = tinfer::float_to_f16_bits(1e-3f);
    if constexpr (requires { block.dmin; }) block.dmin = tinfer::float_to_f16_bits(1e-3f);
    if constexpr (requires { block.m; }) block.m = tinfer::float_to_f16_bits(-1e-2f);
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median seconds of `runs` calls, and the share of a core (per thread) the process had while
// they ran: on a shared machine the figures are comparable per CPU-second only.
template <class F>
std::pair<double, double> timed(int runs, int threads, F&& f) {
    double const cpu = process_cpu_seconds();
    auto const start = std::chrono::steady_clock::now();
    double const median = tinfer::bench::median_seconds(runs, f);
    double const wall = tinfer::bench::seconds_since(start);
    return {median, (process_cpu_seconds() - cpu) / wall / threads};
}

template <DType T>
void run(Options const& o, double read_gbps) {
    using Block = tinfer::quant::BlockOfT<T>;
    int const rows = o.rows, cols = o.cols;
    if (cols % Block::elements != 0) {
        std::printf("| %-5s | cols %d is not a multiple of %d |\n", std::string(name_of(T)).c_str(),
                    cols, Block::elements);
        return;
    }
    std::mt19937_64 rng(42);
    std::size_t const blocks = static_cast<std::size_t>(rows) * cols / Block::elements;
    std::vector<Block> gguf(blocks);
    for (Block& b : gguf) random_block<T>(rng, b);
    k::WeightMatrix const file{T, rows, cols, reinterpret_cast<std::byte const*>(gguf.data())};

    std::size_t const strip_bytes = k::int8_strip_matrix_bytes(T, rows, cols);
    std::size_t const stride = (strip_bytes + 63) / 64 * 64;
    int const copies =
        std::max(1, static_cast<int>(o.stream_mib * (1 << 20) / static_cast<double>(stride)));
    // The strips on the memory the model keeps them in (core/huge_pages.hpp).
    tinfer::HugePageBuffer const storage =
        tinfer::allocate_huge_pages(stride * static_cast<std::size_t>(copies));
    k::WeightMatrix const first = k::repack_int8_strips(file, storage.get());
    for (int c = 1; c < copies; ++c)
        std::memcpy(storage.get() + stride * static_cast<std::size_t>(c), storage.get(),
                    strip_bytes);

    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(o.tokens) * cols);
    for (float& v : x) v = value(rng);
    std::size_t const row_bytes = k::int8_row_bytes(cols);
    tinfer::HugePageBuffer const quantized =
        tinfer::allocate_huge_pages(row_bytes * static_cast<std::size_t>(o.tokens));
    for (int t = 0; t < o.tokens; ++t)
        k::quantize_row_int8(x.data() + static_cast<std::size_t>(t) * cols, cols,
                             quantized.get() + row_bytes * static_cast<std::size_t>(t));
    k::Int8Rows const activations{quantized.get(), row_bytes};
    std::vector<float> y(static_cast<std::size_t>(o.tokens) * rows);

    auto const decode_pass = [&] {
        for (int c = 0; c < copies; ++c) {
            k::WeightMatrix w = first;
            w.data = storage.get() + stride * static_cast<std::size_t>(c);
            k::linear_int8<T>(w, activations, 1, y.data(), o.threads);
        }
    };
    decode_pass();  // warm-up: page faults, thread start
    auto const [decode_pass_seconds, decode_share] = timed(o.repetitions, o.threads, decode_pass);
    double const decode_seconds = decode_pass_seconds / copies;
    auto const prefill = [&] {
        k::linear_int8<T>(first, activations, o.tokens, y.data(), o.threads);
    };
    prefill();
    auto const [prefill_seconds, prefill_share] = timed(o.repetitions, o.threads, prefill);
    // The same product on the strips alone (no scratch: kernels/linear.hpp), for the panels' gain.
    auto const prefill_strips = [&] {
#pragma omp parallel num_threads(o.threads)
        k::linear_team<T>(first, activations, o.tokens, y.data(), static_cast<std::size_t>(rows),
                          k::Store::assign, nullptr);
    };
    prefill_strips();
    double const strips_seconds = timed(o.repetitions, o.threads, prefill_strips).first;

    double const macs = static_cast<double>(rows) * cols;
    double const gbps = static_cast<double>(strip_bytes) / decode_seconds / 1e9;
    double const file_bits = 8.0 * sizeof(Block) / Block::elements;
    double const strip_bits = 8.0 * static_cast<double>(strip_bytes) / macs;
    std::printf(
        "| %-5s | %5.3f | %5.3f | %7.2f | %4.0f%% | %7.2f | %8.2f | %8.2f | %.2f / %.2f |\n",
        std::string(name_of(T)).c_str(), file_bits, strip_bits, gbps,
        read_gbps > 0 ? 100 * gbps / read_gbps : 0.0, macs / decode_seconds / 1e9,
        macs * o.tokens / prefill_seconds / 1e9, macs * o.tokens / strips_seconds / 1e9,
        decode_share, prefill_share);
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"The int8 strip kernels per weight type: decode GB/s and prefill GMAC/s"};
    app.add_option("--rows", o.rows, "Output features")->capture_default_str();
    app.add_option("--cols", o.cols, "Input features (a multiple of 256 for K-quants)")
        ->capture_default_str();
    app.add_option("-p,--tokens", o.tokens, "Prefill tokens")->capture_default_str();
    app.add_option("-t,--threads", o.threads)->capture_default_str();
    app.add_option("-r,--repetitions", o.repetitions)->capture_default_str();
    app.add_option("--stream-mib", o.stream_mib, "Decode: MiB of strips streamed per pass")
        ->capture_default_str();
    app.add_option("--types", o.types, "Weight types")->delimiter(',')->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    double const read_gbps = tinfer::bench::measured_read_gbps(o.threads);
    std::printf(
        "int8 strips, %d x %d, %d thread(s), decode 1 token over %.0f MiB of strips, prefill %d "
        "tokens; read bandwidth %.1f GB/s\n\n",
        o.rows, o.cols, o.threads, o.stream_mib, o.tokens, read_gbps);
    std::printf(
        "| type | file bits/weight | strip bits/weight | decode GB/s | of read BW | decode GMAC/s "
        "| prefill GMAC/s | on the strips alone | core share (decode / prefill) "
        "|\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    try {
        for (std::string const& name : o.types) {
            DType type{};
            bool found = false;
            for (DType const t : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0,
                                  DType::q4_k, DType::q5_k, DType::q6_k}) {
                if (name == name_of(t)) {
                    type = t;
                    found = true;
                }
            }
            if (!found) {
                std::fprintf(stderr, "int8_linear_bench: no int8 strip kernel for %s\n",
                             name.c_str());
                return 1;
            }
            k::dispatch_int8_weight_type(type, [&]<DType T>() { run<T>(o, read_gbps); });
        }
    } catch (std::exception const& e) {
        std::fprintf(stderr, "int8_linear_bench: %s\n", e.what());
        return 1;
    }
}
