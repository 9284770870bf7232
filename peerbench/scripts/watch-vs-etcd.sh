#!/usr/bin/env bash
# One run, same harness: N watchers of one prefix on etcd's 3 members (one clientv3 Watch per
# watcher), then on 3 `raftlock agent` processes (one streamed watch, Server-Sent Events, per
# watcher); the same changes (an acquire, a release, ... of one lock under the prefix), one at a
# time. Prints each system's figures and raftlock's ratio to etcd.
# usage: [RAFTLOCK_AGENT_FLAGS="--election-timeout 1s"] watch-vs-etcd.sh RAFTLOCK_BIN OUTDIR [WATCHERS (default 10000)] [CHANGES (default 20)]
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; out=$2; n=${3:-10000}; changes=${4:-20}; mkdir -p "$out"
B=${PEERBENCH_BIN:-/tmp/peerbench/bin}
args=(-uncontended "" -contended "" -sessions 0 -watchers "$n" -watch-changes "$changes" -out "$out")
"$here/etcd-cluster.sh" start >"$out/etcd.log" 2>&1 || { echo "etcd did not start"; exit 1; }
"$B/lockbench" -backend etcd -label etcd-watch "${args[@]}" >"$out/etcd-watch.out" 2>&1
"$here/etcd-cluster.sh" stop >>"$out/etcd.log" 2>&1
root=$(mktemp -d)
# every stream holds a connection and counts as a watch of 127.0.0.1: lift both limits
read -r -a agentflags <<<"${RAFTLOCK_AGENT_FLAGS:-}"
"$here/raftlock-procs.sh" start "$bin" "$root" --max-connections 0 --max-watches-per-address 0 "${agentflags[@]}" || { echo "raftlock did not start"; exit 1; }
"$B/lockbench" -backend http -label raftlock-watch "${args[@]}" >"$out/raftlock-watch.out" 2>&1
"$here/raftlock-procs.sh" stop "$root"; rm -rf "$root"
python3 - "$out" <<'PY'
import json, sys, os
t = sys.argv[1]
def load(l):
    r = json.load(open(os.path.join(t, f"results-{l}.json")))
    if not r.get("watch"):
        sys.exit(f"{l}: no watch figures: {r.get('errors')}")
    return r["watch"]
e = load("etcd-watch")
for l in ["etcd-watch", "raftlock-watch"]:
    w = load(l)
    ratio = lambda k, s: (w[k][s] / e[k][s]) if e[k][s] else float("nan")
    print(f"{l:15s} {w['watchers']} watchers: last told p50 {w['last_told']['p50_ms']:7.1f} ms ({ratio('last_told','p50_ms'):.2f}x etcd)"
          f" p99 {w['last_told']['p99_ms']:7.1f} ms ({ratio('last_told','p99_ms'):.2f}x) | CPU/change {w['server_cpu_s_per_change']:.3f} s"
          f" ({w['server_cpu_s_per_change']/e['server_cpu_s_per_change'] if e['server_cpu_s_per_change'] else float('nan'):.2f}x)"
          f" | RSS/watcher {w['rss_bytes_per_watcher']:6.0f} B ({w['rss_bytes_per_watcher']/e['rss_bytes_per_watcher'] if e['rss_bytes_per_watcher'] else float('nan'):.2f}x)"
          f" | missed {w['missed']} errors {w['errors']}")
PY
