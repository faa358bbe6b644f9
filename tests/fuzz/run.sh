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
    "$here/fuzz_request.c" "$top/src/request.c" "$top/src/json_scan.c" \
    "$top/src/buf.c" "$top/src/status.c" "$top/src/util.c" "$top/src/push_guard.c" "$top/src/cron.c" "$top/src/tz.c" -lm \
    -o "$work/fuzz_request"
cd "$work"
./fuzz_request -max_total_time="$seconds" -dict="$here/json.dict" -max_len=4096 \
    -print_final_stats=1 corpus 2>&1 | grep -E "^(#|Done|stat::|==|SUMMARY|INFO: seed)" | tail -n 20
echo "fuzz: no crash in ${seconds}s (work dir $work)"
