#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# log_json_test: tributaryd and tributary-manager with --log-format json write
# only JSON objects to their log (one per line, each with time, host, pid,
# level, subsystem and message), from start-up to shutdown; their stdout
# lines ("... listening on HOST:PORT") are unchanged; a line about a job (the
# daemon holding a static job at INFO) carries its id as "job".
# Usage: log_json_test.sh TRIBUTARYD TRIBUTARY_MANAGER TOPOLOGY
set -euo pipefail
daemon=$1 manager=$2 topology=$3
work=$(mktemp -d /tmp/tributary-logjson.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

run() {  # NAME ARGS...: start, wait for its listening line, SIGTERM, wait for exit
  local name=$1
  shift
  "$@" > "$work/$name.out" 2> "$work/$name.log" &
  local pid=$!
  pids+=("$pid")
  for ((i = 0; i < 300; ++i)); do
    grep -qs "listening on" "$work/$name.out" && break
    sleep 0.1
  done
  grep -q "listening on" "$work/$name.out" || { cat "$work/$name.log" >&2; echo "FAIL $name did not start" >&2; exit 1; }
  kill -TERM "$pid"
  wait "$pid" || true
}
cat > "$work/jobs.yaml" << 'YAML'
jobs:
  - {id: 4242, key: 0x1234, fan_in: 2, slot_count: 4, payload_bytes: 1024}
YAML
run daemon "$daemon" --config "$work/jobs.yaml" --listen-address 127.0.0.1 --port 0 \
  --log-format json --log-level info
run manager "$manager" --listen 127.0.0.1:0 --topology "$topology" --state-file "$work/state" \
  --log-format json
python3 - "$work/daemon.log" "$work/manager.log" << 'PY'
import json, sys
keys = {"time", "host", "pid", "level", "subsystem", "message"}
held = False
for path in sys.argv[1:]:
    lines = open(path).read().splitlines()
    assert lines, path + ": no log lines"
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError:
            sys.exit("%s:%d is not one JSON object: %r" % (path, n, line))
        missing = keys - obj.keys()
        assert not missing, "%s:%d lacks %s: %s" % (path, n, missing, line)
        if "holding job 4242" in obj["message"]:
            assert obj.get("job") == 4242, "%s:%d: no \"job\": 4242: %s" % (path, n, line)
            held = True
    print("%s: %d JSON lines" % (path.rsplit("/", 1)[1], len(lines)))
assert held, "the daemon never logged holding job 4242"
PY
