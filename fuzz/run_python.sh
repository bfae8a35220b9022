#!/usr/bin/env bash
# Run the atheris harness over the Python entry points (fuzz/fuzz_python.py)
# against a copy of the extension built with clang, AddressSanitizer and
# libFuzzer coverage (-fsanitize=address,fuzzer-no-link), so the fuzzer is
# guided by coverage of the C glue and kernels, not only of Python code.
#
#   fuzz/run_python.sh [SECONDS] [PYTHON] [more libFuzzer flags]
#                                      (defaults: 60 s, .venv/bin/python)
#
# Needs clang and atheris (pip install atheris).  The run starts from the committed
# seed corpus fuzz/corpus/python/ (read only: libFuzzer writes new inputs into its
# first directory only) and the corpus grown in build/fuzz/corpus_python/, where new
# inputs go (fuzz/refresh_corpus.sh folds them into the seeds); a failing input is
# written to build/fuzz/crash-*:
# copy it into fuzz/regressions/python/ (tests/test_fuzz_regressions.py then
# replays it in every test run) and fix the cause.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${1:-60}
py=${2:-.venv/bin/python}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
case "$py" in /*) ;; *) py="$root/$py" ;; esac
"$py" -c "import atheris" 2>/dev/null || "$py" -m pip install -q "atheris>=2.3"   # the "fuzz" extra
"$py" -c "import setuptools" 2>/dev/null || "$py" -m pip install -q "setuptools>=64"

out=$root/build/fuzz
ext=$out/python_ext
rm -rf "$ext"
mkdir -p "$ext" "$out/corpus_python"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$ext"
san="-fsanitize=address,fuzzer-no-link -fno-omit-frame-pointer -g"
echo "+ building the extension with clang $san"
(cd "$ext" && CC=${CC:-clang} CFLAGS="$san" LDSHARED="${CC:-clang} -shared" \
    "$py" setup.py -q build_ext --inplace --build-temp "$ext/build" > "$ext/build.log" 2>&1) \
    || { cat "$ext/build.log"; exit 1; }

# -malloc_limit_mb: allocations that must fail (2**40 elements: MemoryError is
# what is tested) are not out-of-memory findings; ASan returns NULL for them.
# atheris ships libFuzzer + ASan as one preloadable runtime
export LD_PRELOAD="$("$py" -c 'import atheris, os; print(os.path.join(atheris.path(), "asan_with_fuzzer.so"))')"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1"
export PYTHONPATH="$ext"
cd "$ext"
regressions=("$root"/fuzz/regressions/python/*)
if [ -e "${regressions[0]}" ]; then
    echo "+ regressions: ${#regressions[@]} inputs"
    "$py" fuzz/fuzz_python.py "${regressions[@]}"
fi
echo "+ fuzzing the Python entry points for $secs s"
"$py" fuzz/fuzz_python.py -max_total_time="$secs" -max_len=512 -timeout=30 \
    -rss_limit_mb=8192 -malloc_limit_mb=2000000000 -artifact_prefix="$out/" -print_final_stats=1 "$@" "$out/corpus_python" "$root/fuzz/corpus/python"
