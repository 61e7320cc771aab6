#!/usr/bin/env bash
# The modules that start processes or wait on timeouts, REPS times in a row each, beside a CPU hog
# (stress-ng on one core), as make test runs them: .dev_scripts/stress_test.sh [REPS] [test files...]
# One line per run in work_dirs/stress/summary.txt; each run's log beside it. Needs stress-ng.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${1:-10}
shift || true
FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=(tests/utils/test_download.py tests/engine/test_reliability.py
                                 tests/backbones/test_bad_inputs.py tests/engine/test_exact_resume.py)
command -v stress-ng >/dev/null || { echo "stress_test.sh: needs stress-ng (apt-get install stress-ng)" >&2; exit 2; }
OUT=$ROOT/work_dirs/stress
mkdir -p "$OUT"
cd "$ROOT"
stress-ng --cpu 1 >/dev/null 2>&1 &
HOG=$!
trap 'kill $HOG 2>/dev/null' EXIT
failed=0
for file in "${FILES[@]}"; do
  name=$(basename "$file" .py)
  for i in $(seq 1 "$REPS"); do
    start=$(date +%s)
    VATTN_FULL_STACK=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
      .venv/bin/python -m pytest "$file" -q -p no:cacheprovider -n 2 --dist loadgroup \
      > "$OUT/$name.$i.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    echo "$name run $i: exit $rc after $(($(date +%s) - start)) s" | tee -a "$OUT/summary.txt"
  done
done
echo "$failed failed run(s)" | tee -a "$OUT/summary.txt"
[ "$failed" -eq 0 ]
