#!/bin/sh
# One-shot ACL setup of the compose cluster (compose.yaml, service `acl`), once all three nodes
# are ready: bootstraps the ACLs and keeps the management token in $ADMIN/management-token, then
# makes a token with the `agent` policy (operator: write) and writes it into $ETC/agent.yaml,
# the config file every agent reads (RAFTLOCK_CONFIG): agents started from then on (and n4, n5
# of the `scale` profile, which --join) have their --agent-token. Kept across runs.
set -eu
ETC=${ETC:-/etc/raftlock}
ADMIN=${ADMIN:-/admin}
OWNER=${OWNER:-65532:65532}
export RAFTLOCK_ENDPOINTS="${RAFTLOCK_ENDPOINTS:-https://n1:7001,https://n2:7001,https://n3:7001}"
export RAFTLOCK_CA_FILE="$ETC/tls/ca.pem" RAFTLOCK_CERT_FILE="$ETC/tls/client.pem" RAFTLOCK_KEY_FILE="$ETC/tls/client-key.pem"

# secret prints the secret_id of the JSON answer on stdin.
secret() { sed -n 's/^ *"secret_id": *"\([^"]*\)".*/\1/p'; }

umask 077
if [ ! -s "$ADMIN/management-token" ]; then
	raftlock acl bootstrap -o json | secret >"$ADMIN/management-token.tmp"
	[ -s "$ADMIN/management-token.tmp" ] || { echo "acl: bootstrap gave no secret" >&2; exit 1; }
	mv "$ADMIN/management-token.tmp" "$ADMIN/management-token"
	echo "acl: bootstrapped; the management token is in $ADMIN/management-token"
fi
RAFTLOCK_TOKEN="$(cat "$ADMIN/management-token")"
export RAFTLOCK_TOKEN
if ! grep -q '^agent-token:' "$ETC/agent.yaml"; then
	raftlock acl policy create agent --operator write --replace >/dev/null
	tok="$(raftlock acl token create --policy agent --description "compose agents" -o json | secret)"
	[ -n "$tok" ] || { echo "acl: token create gave no secret" >&2; exit 1; }
	printf 'agent-token: %s\n' "$tok" >"$ETC/agent.yaml.tmp"
	if [ "$(id -u)" = 0 ]; then
		chown "$OWNER" "$ETC/agent.yaml.tmp"
	fi
	mv "$ETC/agent.yaml.tmp" "$ETC/agent.yaml"
	echo "acl: agent token written into $ETC/agent.yaml"
fi
