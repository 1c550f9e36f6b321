#!/usr/bin/env python3
"""Compile cost per target from scripts/compile_timer.sh's log: seconds of compiling (summed
over the target's translation units), translation units, and object bytes, largest first.

    TINFER_CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/compile_timer.sh \\
                       -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/scripts/compile_timer.sh" \\
        TINFER_BUILD_DIR=/tmp/cost-build scripts/build.sh
    scripts/compile_cost.py /tmp/tinfer-compile-times.log
"""
import collections
import os
import re
import sys


def target_of(object_path):
    match = re.search(r"/CMakeFiles/([^/]+)\.dir/", object_path)
    return match.group(1) if match else os.path.basename(object_path)


def main():
    log = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tinfer-compile-times.log"
    seconds = collections.Counter()
    units = collections.Counter()
    size = collections.Counter()
    for line in open(log):
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            continue
        object_path = parts[1].strip()
        target = target_of(object_path)
        seconds[target] += float(parts[0])
        units[target] += 1
        if os.path.exists(object_path):
            size[target] += os.path.getsize(object_path)
    total = sum(seconds.values())
    print(f"| target | compile s | share | TUs | object KiB |")
    print(f"|---|---:|---:|---:|---:|")
    for target, s in seconds.most_common():
        print(f"| `{target}` | {s:.0f} | {100 * s / total:.1f}% | {units[target]} | "
              f"{size[target] // 1024} |")
    print(f"| **all {len(seconds)} targets** | **{total:.0f}** | 100% | "
          f"{sum(units.values())} | {sum(size.values()) // 1024} |")


if __name__ == "__main__":
    main()
