package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// DevTokenFile is the name, in a dev cluster's data dir, of the file (mode 0600) that holds the
// management token of a cluster started with DevOptions.ACL.
const DevTokenFile = "management-token"

// TokenFile returns the file that holds the management token of a cluster started with
// DevOptions.ACL; ok is false without ACLs.
func (d *Dev) TokenFile() (path string, ok bool) {
	if !d.opts.ACL {
		return "", false
	}
	return filepath.Join(d.opts.DataDir, DevTokenFile), true
}

// ManagementToken returns the secret of the cluster's management token; "" without ACLs.
func (d *Dev) ManagementToken() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.token
}

// readDevToken returns the secret stored in the dev data dir, or "" when there is none.
func readDevToken(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, DevTokenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("agent: dev token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// bootstrapACL makes sure the cluster has a management token whose secret is in the token
// file: it bootstraps a new cluster once and writes the file, and checks the stored secret of
// a cluster started before.
func (d *Dev) bootstrapACL(ctx context.Context) error {
	path := filepath.Join(d.opts.DataDir, DevTokenFile)
	for {
		i, err := d.WaitLeader(ctx)
		if err != nil {
			return err
		}
		a := d.Agent(i)
		if a == nil {
			continue
		}
		node := a.Node()
		if node.FSM().ACLBootstrapped() {
			if d.token == "" {
				return fmt.Errorf("agent: dev: the cluster in %s was bootstrapped, but %s is missing: start with a new data dir", d.opts.DataDir, path)
			}
			if _, _, ok := node.FSM().ResolveSecret(fsm.HashSecret(d.token)); !ok {
				return fmt.Errorf("agent: dev: the token in %s is not one of the cluster's (deleted?): start with a new data dir", path)
			}
			return nil
		}
		tok, err := node.ACLBootstrap(ctx)
		if errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrACLBootstrapped) {
			// Leadership moved, or a bootstrap whose answer was lost went through: look again.
			select {
			case <-ctx.Done():
				return fmt.Errorf("agent: dev: ACL bootstrap: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: dev: ACL bootstrap: %w", err)
		}
		if err := writeSecretFile(path, tok.SecretID); err != nil {
			return fmt.Errorf("agent: dev: the management token was made but not stored: %w", err)
		}
		d.setToken(tok.SecretID)
		return nil
	}
}

// setToken records the management token and makes it the agent token of nodes restarted later.
func (d *Dev) setToken(secret string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.token = secret
	for i := range d.configs {
		d.configs[i].AgentToken = secret
	}
}

// writeSecretFile writes secret to path, readable by its owner only, replacing it atomically
// and durably: the bootstrap it records cannot be done again, so a power cut must not take it.
func writeSecretFile(path, secret string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Chmod(0o600) // an old .tmp keeps its mode through OpenFile
	if err == nil {
		_, err = f.WriteString(secret + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
