#!/usr/bin/env bash
# Refresh a committed seed corpus (fuzz/corpus/kernels/ or fuzz/corpus/python/), from
# which fuzz/run_kernels.sh and fuzz/run_python.sh start (so CI's short runs start from
# the coverage already reached, as OSS-Fuzz projects do):
#
#   fuzz/refresh_corpus.sh kernels|python [SECONDS] [PYTHON]
#                                      (defaults: 900 s, .venv/bin/python)
#
# Runs the fuzzer for SECONDS through its run_*.sh from a clean build/fuzz/corpus_*/
# (new inputs land there), then puts in place of the committed corpus a small set of
# files of both that reaches every edge they reach: libFuzzer's merge into an empty
# directory, -set_cover_merge=1 -use_counters=0 (a greedy set cover of the edges, not
# of their hit counts, which a run finds again at once: -merge=1 kept 3685 and 2462
# files, this about 500 and 200, and a run first executes every seed, at 60 per second
# for the kernels). Commit the result; rerun when a fuzzer changes how it reads its
# input, or when the registry (tests/entry_points.py) gains entries, to reach them too
# (the others' seeds stay put: docs/reliability.md). A finding stops the script: handle
# it first (fuzz/run_*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
which=${1:?kernels or python}
secs=${2:-900}
py=${3:-.venv/bin/python}
case "$py" in /*) ;; *) py="$root/$py" ;; esac
out=$root/build/fuzz
seeds=$root/fuzz/corpus/$which
new=$out/corpus_${which}_merged
rm -rf "$out/corpus_$which" "$new"
mkdir -p "$seeds" "$new"
case "$which" in
kernels)
    bash fuzz/run_kernels.sh "$secs"
    echo "+ merging fuzz/corpus/kernels and build/fuzz/corpus_kernels"
    "$out/fuzz_kernels" -set_cover_merge=1 -use_counters=0 -max_len=8192 -timeout=20 -rss_limit_mb=4096 \
        "$new" "$seeds" "$out/corpus_kernels"
    ;;
python)
    bash fuzz/run_python.sh "$secs" "$py"
    echo "+ merging fuzz/corpus/python and build/fuzz/corpus_python"
    # the environment of fuzz/run_python.sh, on the extension it built
    (cd "$out/python_ext"
     LD_PRELOAD="$("$py" -c 'import atheris, os; print(os.path.join(atheris.path(), "asan_with_fuzzer.so"))')" \
     ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1" PYTHONPATH=$(pwd) \
         "$py" fuzz/fuzz_python.py -set_cover_merge=1 -use_counters=0 -max_len=512 -timeout=30 -rss_limit_mb=8192 \
         -malloc_limit_mb=2000000000 "$new" "$seeds" "$out/corpus_python")
    ;;
*)
    echo "refresh_corpus.sh: kernels or python, not $which" >&2
    exit 2
    ;;
esac
rm -rf "$seeds"
mv "$new" "$seeds"
echo "+ fuzz/corpus/$which: $(ls "$seeds" | wc -l) files, $(cat "$seeds"/* | wc -c) bytes"
