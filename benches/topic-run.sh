# Sourced by the scripts that rerun one harness topic with fresh groups (cpu-per-run.sh,
# paused-resume.sh): `topic_run_setup TOPIC DLQ_SUFFIX` sets `root`, `bootstrap` (the running
# broker), `dlq` (TOPIC.DLQ_SUFFIX, created if missing) and `log` (a temporary file removed on
# exit).
topic_run_setup() {
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  bootstrap=$(cd "$root" && cargo xtask kafka status 2>/dev/null | sed -n 's/.*bootstrap=\([^ ]*\).*/\1/p')
  : "${bootstrap:?no broker running (cargo xtask kafka start)}"
  dlq="$1.$2"
  (cd "$root" && cargo xtask kafka tool topics --bootstrap-server '{bootstrap}' --create --if-not-exists \
    --topic "$dlq" --partitions 1 --replication-factor 1 >/dev/null)
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
}
