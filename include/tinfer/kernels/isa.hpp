#pragma once
// Which instruction set the hand-vectorized kernels (the int8 strips, kernels/int8_dot.hpp, and
// the activation quantizer, kernels/int8_activations.hpp) run, chosen once at start-up from
// what the CPU reports, so that one binary runs the best version a machine has.
//
// Every x86 build compiles the AVX2 and AVX-512 versions (in target regions,
// core/simd_intrinsics.hpp, whatever the build's -march) at and above the build's floor: the
// set the compiler was told every CPU has (-march). Below the floor nothing is compiled, since
// the rest of the binary already requires it. TINFER_NATIVE=ON (-march=native) therefore runs
// exactly what this machine runs; TINFER_NATIVE=OFF builds for the x86-64 baseline and still
// takes AVX-512 VNNI or AVX2 where the CPU has them. TINFER_ISA=portable|avx2|avx512 in the
// environment caps the choice (comparisons, and tests of a lower path), never above the CPU.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/simd_intrinsics.hpp>

#if TINFER_X86_TARGETS
#include <cpuid.h>
#endif
#if TINFER_AMX_TARGETS
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tinfer::kernels {

// native: the version chosen at start-up (running_isa()); the others name one version, for tests
// and benchmarks. Kernels without an AVX2 version take their portable one there.
enum class Isa { native, avx512, avx2, portable };

constexpr char const* name_of(Isa isa) {
    switch (isa) {
        case Isa::native:
            return "native";
        case Isa::avx512:
            return "avx512";
        case Isa::avx2:
            return "avx2";
        case Isa::portable:
            return "portable";
    }
    return "?";
}

constexpr std::optional<Isa> parse_isa(std::string_view name) {
    for (Isa const isa : {Isa::avx512, Isa::avx2, Isa::portable})
        if (name == name_of(isa)) return isa;
    return std::nullopt;
}

// Higher is wider: avx512 (F, BW, VL, VNNI) > avx2 (with FMA and F16C) > portable.
constexpr int isa_rank(Isa isa) {
    return isa == Isa::avx512 ? 2 : isa == Isa::avx2 ? 1 : 0;
}

// The widest set the compiler may assume everywhere (its -march).
inline constexpr Isa isa_floor =
#if TINFER_X86_TARGETS && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)
    Isa::avx512;
#elif TINFER_X86_TARGETS && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    Isa::avx2;
#else
    Isa::portable;
#endif

// The widest version compiled in (the emulated test supplies AVX-512 through SIMDe).
inline constexpr Isa isa_ceiling = TINFER_X86_TARGETS ? Isa::avx512 : Isa::portable;

// Whether the binary holds version `isa`.
constexpr bool isa_compiled(Isa isa) {
    return isa_rank(isa) >= isa_rank(isa_floor) && isa_rank(isa) <= isa_rank(isa_ceiling);
}

#if TINFER_X86_TARGETS && !defined(TINFER_EMULATED_AVX512)
// Which register states the OS saves (XCR0's low half); ask only where CPUID.1 reports OSXSAVE.
inline unsigned saved_register_states() {
    unsigned low = 0, high = 0;
    __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return low;
}
#endif

// What this CPU (and its operating system, which must save the wider registers) can execute.
inline Isa detected_isa() {
#if defined(TINFER_EMULATED_AVX512)
    return Isa::avx512;  // tests/kernels/int8_avx512_emulated_test.cpp: SIMDe runs it anywhere
#elif TINFER_X86_TARGETS
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::portable;
    bool const fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!(fma && osxsave && avx && f16c)) return Isa::portable;
    unsigned const xcr0_low = saved_register_states();
    if ((xcr0_low & 0x6) != 0x6) return Isa::portable;  // SSE and AVX state
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::portable;
    bool const avx2 = b >> 5 & 1;
    if (!avx2) return Isa::portable;
    bool const avx512 = (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1) && (c >> 11 & 1);
    bool const zmm_state = (xcr0_low & 0xe0) == 0xe0;  // opmask, upper ZMM halves, ZMM16-31
    return avx512 && zmm_state ? Isa::avx512 : Isa::avx2;
#else
    return Isa::portable;
#endif
}

// Whether the AVX-512 prefill panels may multiply with AMX tiles (kernels/int8_panels.hpp): the
// CPU has AMX-TILE and AMX-INT8, the OS saves their state (XCR0 bits 17 and 18), Linux granted
// this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here, for all its
// threads), and TINFER_AMX is not "0" in the environment. The sums are the same integers the
// VNNI panels make, so the outputs do not change, only the time.
inline bool amx_int8_ready() {
    static bool const ready = [] {
#if TINFER_AMX_TARGETS
        if (char const* env = std::getenv("TINFER_AMX"); env && std::string_view(env) == "0")
            return false;
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;  // OSXSAVE
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        if (!(d >> 24 & 1) || !(d >> 25 & 1)) return false;  // AMX-TILE, AMX-INT8
        if ((saved_register_states() & 0x60000) != 0x60000) return false;  // TILECFG, TILEDATA
        constexpr long request_permission = 0x1023, tile_data = 18;
        return syscall(SYS_arch_prctl, request_permission, tile_data) == 0;
#else
        return false;
#endif
    }();
    return ready;
}

// The choice for a CPU that can run `detected`, capped by a request (TINFER_ISA's value, or
// none) and held within what the binary compiled. `note` receives why a request was not taken.
inline Isa choose_isa(Isa detected, std::optional<std::string_view> request,
                      std::string* note = nullptr) {
    Isa chosen = isa_rank(detected) < isa_rank(isa_ceiling) ? detected : isa_ceiling;
    if (request) {
        std::optional<Isa> const wanted = parse_isa(*request);
        if (!wanted) {
            if (note)
                *note = "TINFER_ISA=" + std::string(*request) +
                        " is not one of avx512, avx2, portable; ignored";
        } else if (isa_rank(*wanted) > isa_rank(chosen)) {
            if (note)
                *note = "TINFER_ISA=" + std::string(*request) + " is past what this CPU runs (" +
                        name_of(chosen) + "); ignored";
        } else {
            chosen = *wanted;
        }
    }
    if (isa_rank(chosen) < isa_rank(isa_floor)) {
        if (note)
            *note = std::string("this binary is compiled for ") + name_of(isa_floor) +
                    " at least (TINFER_NATIVE=ON); " + name_of(chosen) + " is not in it";
        chosen = isa_floor;
    }
    return chosen;
}

// The version the kernels run in this process: chosen at its first call, then fixed.
inline Isa running_isa() {
    static Isa const chosen = [] {
        char const* const request = std::getenv("TINFER_ISA");
        std::string note;
        Isa const isa =
            choose_isa(detected_isa(),
                       request ? std::optional<std::string_view>(request) : std::nullopt, &note);
        if (!note.empty()) std::fprintf(stderr, "[tinfer] %s\n", note.c_str());
        return isa;
    }();
    return chosen;
}

// One line for logs: what runs, what the CPU has, what the binary holds.
inline std::string describe_isa() {
    return std::string(name_of(running_isa())) + " (CPU: " + name_of(detected_isa()) +
           "; compiled: " + name_of(isa_floor) +
           (isa_floor == isa_ceiling ? std::string() : std::string(" to ") + name_of(isa_ceiling)) +
           ")" +
           (running_isa() == Isa::avx512 && amx_int8_ready() ? ", prefill panels on AMX tiles"
                                                             : "");
}

// body.template operator()<I>() with I the compiled version running_isa() names; one call, so
// a kernel dispatches per matrix or per row, never per inner step. Where the floor is the
// ceiling there is one version and no branch.
template <class Body>
decltype(auto) with_running_isa(Body&& body) {
    if constexpr (isa_floor == isa_ceiling) {
        return body.template operator()<isa_floor>();
    } else if constexpr (isa_floor == Isa::avx2) {
        return dispatch<Isa::avx512, Isa::avx2>(running_isa(), body);
    } else {
        return dispatch<Isa::avx512, Isa::avx2, Isa::portable>(running_isa(), body);
    }
}

}  // namespace tinfer::kernels
