#!/bin/sh
# One-shot setup of the compose cluster (compose.yaml, service `init`): a CA, a node certificate
# per node, a client certificate, and an empty agent config file that acl-bootstrap.sh fills in.
# Kept across runs: files that exist are not made again, so `docker compose up` may run it
# every time. The CA's key stays in $ADMIN, which no agent mounts.
set -eu
ETC=${ETC:-/etc/raftlock}        # mounted read-only by every agent
ADMIN=${ADMIN:-/admin}           # CA key and management token: setup jobs only
NODES=${NODES:-"n1 n2 n3 n4 n5"} # n4 and n5: the `scale` profile
OWNER=${OWNER:-65532:65532}      # the image's user

mkdir -p "$ETC/tls" "$ADMIN"
chmod 0700 "$ADMIN"
[ -f "$ADMIN/ca.pem" ] || raftlock tls ca create --dir "$ADMIN"
cp "$ADMIN/ca.pem" "$ETC/tls/ca.pem"
# sign makes a certificate signed by the CA of $ADMIN into $ETC/tls.
sign() { raftlock tls cert create --dir "$ETC/tls" --ca-cert "$ADMIN/ca.pem" --ca-key "$ADMIN/ca-key.pem" "$@"; }
for n in $NODES; do
	# Clients reach a node by its service name inside the network, and by localhost through the
	# published port on the host.
	[ -f "$ETC/tls/$n.pem" ] || sign --node "$n" --dns "$n" --dns localhost --ip 127.0.0.1
done
[ -f "$ETC/tls/client.pem" ] || sign --client
[ -f "$ETC/agent.yaml" ] || echo "# agent-token: written here by acl-bootstrap.sh" >"$ETC/agent.yaml"
if [ "$(id -u)" = 0 ]; then
	chown -R "$OWNER" "$ETC"
fi
echo "init: certificates for $NODES and a client in $ETC/tls"
