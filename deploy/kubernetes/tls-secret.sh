#!/bin/sh
# Makes the CA and certificates of the Kubernetes cluster and prints the Secret raftlock-tls
# that statefulset.yaml mounts:
#
#   deploy/kubernetes/tls-secret.sh ./raftlock-certs NAMESPACE [REPLICAS] | kubectl -n NAMESPACE apply -f -
#
# Into DIR: ca.pem and ca-key.pem (keep the key there, never in the cluster), a node certificate
# per pod raftlock-0 .. raftlock-(REPLICAS-1), and client.pem / client-key.pem for programs and
# the CLI. Files that exist are kept, so running it again with a larger REPLICAS adds the new
# pods' certificates to the same CA. A node certificate names every address clients reach the
# pod at: its own Service, the client Service, and localhost for the probes.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 DIR NAMESPACE [REPLICAS]" >&2; exit 2; }
dir=$1 ns=$2 replicas=${3:-3}
raftlock=${RAFTLOCK:-raftlock}

[ -f "$dir/ca.pem" ] || "$raftlock" tls ca create --dir "$dir" >&2
files="--from-file=ca.pem=$dir/ca.pem"
i=0
while [ "$i" -lt "$replicas" ]; do
	pod=raftlock-$i
	[ -f "$dir/$pod.pem" ] || "$raftlock" tls cert create --dir "$dir" --node "$pod" \
		--dns "$pod" --dns "$pod.$ns.svc" --dns "$pod.$ns.svc.cluster.local" \
		--dns raftlock --dns "raftlock.$ns.svc" --dns "raftlock.$ns.svc.cluster.local" \
		--dns localhost --ip 127.0.0.1 >&2
	files="$files --from-file=$pod.pem=$dir/$pod.pem --from-file=$pod-key.pem=$dir/$pod-key.pem"
	i=$((i + 1))
done
[ -f "$dir/client.pem" ] || "$raftlock" tls cert create --dir "$dir" --client >&2
# shellcheck disable=SC2086 # $files is a list of flags
kubectl create secret generic raftlock-tls --namespace "$ns" $files --dry-run=client -o yaml
