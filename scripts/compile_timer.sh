#!/usr/bin/env bash
# A compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER / CMAKE_CUDA_COMPILER_LAUNCHER) that runs the
# compile and appends "<seconds> <object>" to $TINFER_COMPILE_LOG (default
# /tmp/tinfer-compile-times.log), for scripts/compile_cost.py. The object is the argument after
# -o; links and other commands pass through untimed.
set -u
log=${TINFER_COMPILE_LOG:-/tmp/tinfer-compile-times.log}
object=""
previous=""
for argument in "$@"; do
    [ "$previous" = "-o" ] && object=$argument
    previous=$argument
done
start=$EPOCHREALTIME
"$@"
status=$?
end=$EPOCHREALTIME
if [ -n "$object" ] && [ $status -eq 0 ]; then
    [ "${object#/}" = "$object" ] && object=$PWD/$object
    awk -v start="$start" -v end="$end" -v object="$object" \
        'BEGIN { printf "%.2f %s\n", end - start, object }' >> "$log"
fi
exit $status
