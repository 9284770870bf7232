#!/usr/bin/env bash
# Linearizable reads, one sitting: etcd 3 members vs raftlock as 3 agent processes (wal), each
# read through the leader and through a follower; prints each system's p50 and its
# follower/leader ratio. The lock workloads are not run (procs-vs-etcd.sh measures those).
# usage: [READS="1,64"] [PEERBENCH_OPTS=...] [PEERBENCH_PORT_OFFSET=N] reads-vs-etcd.sh RAFTLOCK_BIN OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$1; out=$2; mkdir -p "$out"
B=${PEERBENCH_BIN:-/tmp/peerbench/bin}
args=(-duration 8s -warmup 1s -uncontended "" -contended "" -sessions 0 -reads "${READS:-1,64}" -read-at leader,follower -out "$out")
read -r -a extra <<<"${PEERBENCH_OPTS:-}"
args+=("${extra[@]}")
off=${PEERBENCH_PORT_OFFSET:-0}  # moves every port up, see raftlock-procs.sh
etcd_eps=127.0.0.1:$((2379 + off)),127.0.0.1:$((22379 + off)),127.0.0.1:$((32379 + off))
rl_eps=http://127.0.0.1:$((7001 + off)),http://127.0.0.1:$((7002 + off)),http://127.0.0.1:$((7003 + off))
"$here/etcd-cluster.sh" start >"$out/etcd.log" 2>&1 || { echo "etcd did not start"; exit 1; }
"$B/lockbench" -backend etcd -label etcd-reads -endpoints "$etcd_eps" "${args[@]}" >"$out/etcd-reads.out" 2>&1
"$here/etcd-cluster.sh" stop >>"$out/etcd.log" 2>&1
root=$(mktemp -d)
"$here/raftlock-procs.sh" start "$bin" "$root" --log-store wal || { echo "raftlock did not start"; exit 1; }
"$B/lockbench" -backend http -label raftlock-reads -endpoints "$rl_eps" "${args[@]}" >"$out/raftlock-reads.out" 2>&1
# how the followers answered their reads, for the record
for i in 1 2 3; do curl -sf 127.0.0.1:$((7000 + off + i))/metrics | grep -E '^raftlock_(http_(forwarded|follower_reads|read_index)|read_indexes)' | sed "s/^/n$i /"; done >"$out/raftlock-reads.metrics" 2>/dev/null
"$here/raftlock-procs.sh" stop "$root"; rm -rf "$root"
python3 - "$out" <<'PY'
import json, sys, os
t = sys.argv[1]
for l in ["etcd-reads", "raftlock-reads"]:
    r = json.load(open(os.path.join(t, f"results-{l}.json")))
    by = {(x["clients"], x["at"]): x for x in r.get("reads") or []}
    for c in sorted({k[0] for k in by}):
        ld, fo = by.get((c, "leader")), by.get((c, "follower"))
        if not ld or not fo:
            print(f"{l:15s} c{c}: missing a run"); continue
        lp, fp = ld["read_latency"]["p50_ms"], fo["read_latency"]["p50_ms"]
        print(f"{l:15s} c{c:<3d} leader p50 {lp:.3f} ms {ld['ops_per_s']:7.0f}/s | follower p50 {fp:.3f} ms {fo['ops_per_s']:7.0f}/s | follower/leader p50 {fp/lp:.2f}x err {ld['errors']+fo['errors']}")
PY
