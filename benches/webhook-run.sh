#!/usr/bin/env bash
# The product on its webhook path, backlog form: `orderly consume --http` (release build, default
# flags plus the ones given) against the demo's endpoint `orderly-webhook` (a process of its own),
# on a topic seeded with RECORDS records in SESSIONS sessions. Prints the endpoint's count, span
# and rate, and the CPU time and peak RSS of both processes. With SESSIONS 1 and TRANSIENT_PCT 0,
# span / records is the round trip of one record (admitted, sent, answered, the next one started).
#
#   cargo build --release -p orderly-cli -p orderly-testkit --bin orderly --bin orderly-webhook
#   cargo xtask kafka start
#   benches/webhook-run.sh RECORDS SESSIONS [consume flags...]     e.g. 20000 1, or 200000 1000 --http-batch-max 64
#
# TRANSIENT_PCT (default 10): records the endpoint answers 503 once. Prints figures; it is not a
# test.
set -euo pipefail
records=${1:?records}
sessions=${2:?sessions}
shift 2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bootstrap=$(cargo xtask kafka status 2>/dev/null | sed -n 's/.*bootstrap=\([^ ]*\).*/\1/p')
: "${bootstrap:?no broker running (cargo xtask kafka start)}"
bin=${CARGO_TARGET_DIR:-$root/target}/release
topic=webhook-run-$(date +%s%N)
for t in "$topic" "$topic.dlq"; do
  cargo xtask kafka tool topics --bootstrap-server '{bootstrap}' --create --topic "$t" \
    --partitions 12 --replication-factor 1 >/dev/null
done
"$bin/orderly" seed --bootstrap "$bootstrap" --topic "$topic" --records "$records" --sessions "$sessions" >/dev/null 2>&1

err=$(mktemp)
rep=$(mktemp)
coproc HOOK { exec "$bin/orderly-webhook" --transient-pct "${TRANSIENT_PCT:-10}"; }
hook=$HOOK_PID
read -r url <&"${HOOK[0]}"
addr=${url#http://}
addr=${addr%%/*}
"$bin/orderly" consume --bootstrap "$bootstrap" --group "$topic-g" --topic "$topic" \
  --dlq-topic "$topic.dlq" --http "$url" --admin-addr off "$@" 2>"$err" &
consumer=$!
trap 'kill "$consumer" "$hook" 2>/dev/null || true; rm -f "$err" "$rep"' EXIT

# The endpoint's report (JSON, the last line of the answer) into $rep.
report() {
  exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}"
  printf 'GET /report HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n' >&3
  tail -1 <&3 >"$rep"
  exec 3<&-
}
terminal() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["done"]+d["permanent"])' "$rep"; }
deadline=$((SECONDS + ${DEADLINE_SECS:-300}))
while :; do
  report
  [ "$(terminal)" -ge "$records" ] && break
  if [ $SECONDS -ge $deadline ] || ! kill -0 "$consumer" 2>/dev/null; then
    echo "not every record reached the endpoint; consumer log:" >&2
    tail -20 "$err" >&2
    exit 1
  fi
  sleep 0.2
done
python3 - "$rep" "$records" "$sessions" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2]); s = d["span_us"] / 1e6
t = d["done"] + d["permanent"]
print(f"records {t}  sessions {sys.argv[3]}  span {s:.3f} s  rate {t / s:,.0f}/s  "
      f"requests {d['requests']}  transient {d['transient']}  violations {d['violations']}  "
      f"round trip per record of one session {s * 1e6 / n * int(sys.argv[3]):.0f} us")
EOF
echo "process         cpu (user+sys)   peak RSS"
for p in "$consumer" "$hook"; do
  read -r ut st <<<"$(awk '{print $14, $15}' "/proc/$p/stat")"
  hz=$(getconf CLK_TCK)
  printf '%-15s %8.2f s        %s\n' "$(cat "/proc/$p/comm")" "$(echo "($ut+$st)/$hz" | bc -l)" \
    "$(awk '/VmHWM/ {print $2, $3}' "/proc/$p/status")"
done
