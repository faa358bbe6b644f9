#!/usr/bin/env bash
# Builds the libFuzzer target over the request parser and validator (with
# ASan and UBSan) and runs it for SECONDS (default 60) over the committed
# corpus. New inputs go to a scratch corpus; a crash leaves crash-* files in
# the scratch dir and fails. Usage: tests/fuzz/run.sh [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
seconds=${1:-60}
work=${FUZZ_WORK_DIR:-$(mktemp -d)}
mkdir -p "$work/corpus"
cp "$here"/corpus/* "$work/corpus/"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$top/src" \
    "$here/fuzz_request.c" "$top/src/protocol/request.c" "$top/src/common/json_scan.c" \
    "$top/src/common/buf.c" "$top/src/common/status.c" "$top/src/common/util.c" "$top/src/common/push_guard.c" "$top/src/sched/cron.c" "$top/src/sched/tz.c" -lm \
    -o "$work/fuzz_request"
cd "$work"
# The whole log stays in the work dir; a crash prints its reason, stack
# and input, the rest only the progress lines.
if ./fuzz_request -max_total_time="$seconds" -dict="$here/json.dict" -max_len=4096 \
    -print_final_stats=1 corpus > fuzz.log 2>&1; then
    grep -E "^(#|Done|stat::|INFO: seed)" fuzz.log | tail -n 8
    echo "fuzz: no crash in ${seconds}s (work dir $work)"
else
    grep -n -m1 -E "ERROR: libFuzzer|ERROR: AddressSanitizer|runtime error|Assertion" fuzz.log | cut -d: -f1 |
        { read -r first || first=1; tail -n +$((first > 5 ? first - 5 : 1)) fuzz.log | head -n 80; }
    echo "fuzz: crashed; inputs: $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | tr '\n' ' ')"
    exit 1
fi
