// Package deploy holds no code: its directories are the packaged deployments of raftlock (a
// Dockerfile, a compose file, a systemd unit, Kubernetes manifests), and its tests check them
// against the raftlock binary built as the Dockerfile builds it.
package deploy
