#!/usr/bin/env bash
# One round, raftlock only: 64 uncontended clients spread over the three agents, then all at
# the leader (lockbench -opt leader_only=1), with the agents' CPU (from /proc, warm-up and the
# one-client phase included) divided by the 64-client operations, and so are their read and
# write system calls (/proc/PID/io); and lockbench's own server CPU per op, read over the
# 64-client phase alone. Prints each way and the ratios spread / at the leader.
# Run it several times, alternating builds, to compare them.
# usage: [PEERBENCH_PORT_OFFSET=N] spread-vs-leader.sh RAFTLOCK_BIN OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; out=$2; mkdir -p "$out"
B=${PEERBENCH_BIN:-/tmp/peerbench/bin}
off=${PEERBENCH_PORT_OFFSET:-0}
eps=http://127.0.0.1:$((7001 + off)),http://127.0.0.1:$((7002 + off)),http://127.0.0.1:$((7003 + off))
ticks() { local s=0; for f in "$1"/n?.pid; do read -r -a st <"/proc/$(cat "$f")/stat"; s=$((s + st[13] + st[14])); done; echo $s; }
# the agents' read and write system calls, summed: "READS WRITES"
syscalls() { cat "$1"/n?.pid | sed 's|.*|/proc/&/io|' | xargs awk '$1=="syscr:"{r+=$2} $1=="syscw:"{w+=$2} END{print r, w}'; }
for way in spread leader; do
  root=$(mktemp -d)
  "$here/raftlock-procs.sh" start "$bin" "$root" --log-store wal || { echo "raftlock did not start"; exit 1; }
  opt=(); [[ $way == leader ]] && opt=(-opt leader_only=1)
  c0=$(ticks "$root"); read -r r0 w0 < <(syscalls "$root")
  "$B/lockbench" -backend http -label "raftlock-$way" -endpoints "$eps" -duration 8s -warmup 1s \
    -uncontended 1,64 -contended "" -sessions 0 -out "$out" "${opt[@]}" >"$out/raftlock-$way.out" 2>&1
  echo $(( $(ticks "$root") - c0 )) >"$out/raftlock-$way.ticks"
  read -r r1 w1 < <(syscalls "$root"); echo $((r1 - r0)) $((w1 - w0)) >"$out/raftlock-$way.syscalls"
  "$here/raftlock-procs.sh" stop "$root"; rm -rf "$root"
done
python3 - "$out" "$(getconf CLK_TCK)" <<'PY'
import json, sys, os
t, hz = sys.argv[1], int(sys.argv[2])
r = {}
for w in ["spread", "leader"]:
    d = json.load(open(os.path.join(t, f"results-raftlock-{w}.json")))
    u1 = [x for x in d["uncontended"] if x["clients"] == 1][0]
    u64 = [x for x in d["uncontended"] if x["clients"] == 64][0]
    cpu = int(open(os.path.join(t, f"raftlock-{w}.ticks")).read()) / hz
    reads, writes = map(int, open(os.path.join(t, f"raftlock-{w}.syscalls")).read().split())
    ops = u64["ops"]
    r[w] = (u1["acquire_latency"]["p50_ms"], u64["ops_per_s"], cpu * 1e6 / ops, u64["cpu"]["server_cpu_us_per_op"])
    print(f"{w:7s} u1 p50 {r[w][0]:.2f} ms | u64 {r[w][1]:6.0f} ops/s | servers' CPU {cpu:.1f} s, {r[w][2]:.0f} us/op; in the 64-client phase {r[w][3]:.0f} us/op | system calls per op: {reads/ops:.1f} reads, {writes/ops:.1f} writes")
print(f"spread / at the leader: ops {r['spread'][1]/r['leader'][1]:.2f} | CPU per op {r['spread'][2]/r['leader'][2]:.2f}, in the 64-client phase {r['spread'][3]/r['leader'][3]:.2f} | u1 p50 {r['spread'][0]-r['leader'][0]:+.2f} ms")
PY
