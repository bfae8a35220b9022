#!/usr/bin/env bash
# Build and run the libFuzzer harness over the C kernels (fuzz/fuzz_kernels.c).
#
#   fuzz/run_kernels.sh [SECONDS] [more libFuzzer flags]    (default: 60 s)
#
# Needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-dev).
# The build is in build/fuzz/; the corpus grows in build/fuzz/corpus_kernels/ (kept between runs), seeded by
# the committed fuzz/corpus/kernels/ (read only: libFuzzer writes into its first directory); a crash is written to
# build/fuzz/crash-*: copy it into fuzz/regressions/kernels/ and fix the kernel.
# First every file of fuzz/regressions/kernels/ is run once (the regression test).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
CC=${CC:-clang}
out=build/fuzz
mkdir -p "$out/corpus_kernels"
# the kernels as the package builds them (-ffp-contract=off), plus sanitizers
"$CC" -g -O1 -std=c11 -ffp-contract=off -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Icsrc/kernels fuzz/fuzz_kernels.c $(find csrc/kernels -name '*.c' | sort) -lm -lpthread \
    -o "$out/fuzz_kernels"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
regressions=(fuzz/regressions/kernels/*)
if [ -e "${regressions[0]}" ]; then
    echo "+ regressions: ${#regressions[@]} inputs"
    "$out/fuzz_kernels" "${regressions[@]}"
fi
echo "+ fuzzing the kernels for $secs s"
"$out/fuzz_kernels" -max_total_time="$secs" -max_len=8192 -len_control=0 -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$out/" -print_final_stats=1 "$@" "$out/corpus_kernels" fuzz/corpus/kernels
