#!/usr/bin/env bash
# Interleaved A/B of backlog runs of the benchmark's systems and their settings: which of several
# command lines is fastest over the same topic (how the peers' tuned settings were chosen,
# benches/peers/README.md).
#
#   benches/ab-peers.sh RUNS RECORDS SESSIONS FAIL_MOD 'COMMAND A' 'COMMAND B' ...
#
# A COMMAND is a system's command line without the shared arguments, which the script appends
# (`--bootstrap --topic --group --dlq-topic --records --fail-mod --log`). Four words stand for the
# benchmark's systems: `orderly` (target/release/bench-orderly), `product` (the product binary,
# `target/release/orderly run`, given `--transient-pct 100/FAIL_MOD` instead of `--fail-mod` and
# `--log`, and read from its report), `go` (the Go peer) and `pc` (the Parallel Consumer peer); the
# rest of the line is passed on, and leading NAME=VALUE words are its environment, e.g.
#   benches/ab-peers.sh 3 50000 1000 10 'go' 'go -fetch-max-wait 20ms -session-chan 10000'
#   benches/ab-peers.sh 3 200000 10000 0 'pc' 'pc --max-concurrency 1000 --batch-size 50'
#   benches/ab-peers.sh 3 1000000 10000 0 'orderly' 'product' 'product --workers 2'
#   benches/ab-peers.sh 3 200000 10000 0 'go' 'GOGC=400 go'
# The topic (12 partitions, written once by bench-load, as the harness writes a backlog) is
# consumed by every run in a fresh group. Round i runs every command once, the order rotating by
# one each round, so machine noise hits all alike. Prints the load average before every round,
# then per command the median records/s (first handler call to the end of the run, as the harness
# counts), the median user+system CPU seconds, the median CPU the broker used meanwhile (its
# process's user+system time across the run, in 10 ms ticks: what serving the fetches, commits and
# group requests cost it on the same cores) and every run's records/s and completions. The
# runs are not verified (the harness does that); a run with fewer completions than RECORDS is
# marked. Needs the running broker (`cargo xtask kafka start`) and the release build of
# orderly-benches; builds nothing (`XTASK` names another way to run the xtask binary, for
# creating the topic while cargo is busy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: benches/ab-peers.sh RUNS RECORDS SESSIONS FAIL_MOD COMMAND..."
runs=${1:?$usage}
records=${2:?$usage}
sessions=${3:?$usage}
fail_mod=${4:?$usage}
shift 4
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
status=$(cd "$root" && ${XTASK:-cargo xtask} kafka status 2>/dev/null || true)
bootstrap=${ORDERLY_BOOTSTRAP:-$(sed -n 's/.*bootstrap=\([^ ]*\).*/\1/p' <<<"$status")}
: "${bootstrap:?no broker running (cargo xtask kafka start)}"
# The broker's pid, for its CPU per run (`BROKER_PID` names another broker's; without one it reads 0).
broker_pid=${BROKER_PID:-$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' <<<"$status")}
broker_cpu() { [ -r "/proc/${broker_pid:-none}/stat" ] && awk '{print $14 + $15}' "/proc/$broker_pid/stat" || echo 0; }
pc_dir=$root/benches/peers/parallel-consumer/target
expand() {
  # Leading NAME=VALUE words are the command's environment.
  local env=""
  set -- $1
  while [[ ${1:-} == *=* ]]; do env+="$1 "; shift; done
  [ -z "$env" ] || printf 'env %s' "$env"
  case "$*" in
    orderly*) echo "$root/target/release/bench-orderly${*#orderly}" ;;
    product*) echo "$root/target/release/orderly run${*#product}" ;;
    go*) echo "$root/benches/peers/go-seed/target/go-seed${*#go}" ;;
    pc*) echo "java -Xmx2g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp $pc_dir/pc-peer-0.1.0.jar:$pc_dir/lib/* orderly.bench.PcPeer${*#pc}" ;;
    *) echo "$*" ;;
  esac
}
topic=ab-peers-$$-$records-$sessions
tool() { (cd "$root" && ${XTASK:-cargo xtask} kafka tool topics --bootstrap-server "$bootstrap" "$@"); }
tool --create --topic "$topic" --partitions 12 --replication-factor 1 >/dev/null
tool --create --topic "$topic.dlq" --partitions 1 --replication-factor 1 >/dev/null
"$root/target/release/bench-load" --bootstrap "$bootstrap" --topic "$topic" \
  --sessions "$sessions" --records "$records" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"; tool --delete --topic "$topic" >/dev/null 2>&1 || true; tool --delete --topic "$topic.dlq" >/dev/null 2>&1 || true' EXIT
n=$#
for i in $(seq "$runs"); do
  echo "round $i: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for k in $(seq 0 $((n - 1))); do
    j=$(( (k + i - 1) % n + 1 ))
    cmd=$(expand "${!j}")
    sync
    case ${!j} in
      *product*) shared=(--transient-pct $(( fail_mod == 0 ? 0 : 100 / fail_mod ))) ;;
      *) shared=(--fail-mod "$fail_mod" --log "$work/log") ;;
    esac
    rm -f "$work/log"
    b0=$(broker_cpu)
    # shellcheck disable=SC2086 # COMMAND is meant to be split into words
    /usr/bin/time -o "$work/time" -f '%U %S' $cmd --bootstrap "$bootstrap" --topic "$topic" \
      --group "ab-$$-$i-$j" --dlq-topic "$topic.dlq" --records "$records" "${shared[@]}" \
      >"$work/out" 2>"$work/err" \
      || { echo "run failed: ${!j}" >&2; tail -5 "$work/err" >&2; exit 1; }
    b1=$(broker_cpu)
    python3 - "$work/log" "$work/out" "$(tail -1 "$work/time")" "$((b1 - b0))" >>"$work/res.$j" <<'PY'
import os, re, sys
n = 0
rate = 0
if os.path.exists(sys.argv[1]):
    for line in open(sys.argv[1]):
        if line.startswith('#'):
            d = dict(kv.split('=', 1) for kv in line[1:].split() if '=' in kv)
            rate = int(n / ((int(d['end_us']) - int(d['first_us'])) / 1e6))
        else:
            n += 1
else:
    # orderly run's report: records terminal, and the rate from the first record handed to the
    # handler to the end of the run.
    out = open(sys.argv[2]).read()
    n = int(re.search(r'records terminal\s+(\d+)', out).group(1))
    rate = int(float(re.search(r'throughput\s+([\d.]+) records/s from the first record', out).group(1)))
u, s = sys.argv[3].split()
print(rate, float(u) + float(s), n, int(sys.argv[4]) / 100)
PY
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for j in $(seq "$n"); do
  python3 - "${!j}" "$work/res.$j" "$records" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[2])]
rate = [int(r[0]) for r in rows]
cpu = [float(r[1]) for r in rows]
broker = [float(r[3]) for r in rows]
short = [r[2] for r in rows if int(r[2]) < int(sys.argv[3])]
print(f"{sys.argv[1]}\n  median {statistics.median(rate):,.0f} records/s, CPU {statistics.median(cpu):.2f} s, "
      f"broker CPU {statistics.median(broker):.2f} s; runs: "
      f"{', '.join(f'{r:,}' for r in rate)}{'; SHORT RUNS (completions): ' + ', '.join(short) if short else ''}")
PY
done
