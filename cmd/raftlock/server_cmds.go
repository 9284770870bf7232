package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/version"
)

// addServerCommands registers agent, dev and health.
func addServerCommands(root *cobra.Command) {
	root.AddCommand(newAgentCmd(), newDevCmd(), newHealthCmd())
}

// newLogger returns the logger of the server commands, which logs the messages a healthy start
// and stop of raft give at debug level (see quietLogger).
func newLogger(w io.Writer, level, format string) hclog.Logger {
	return quietRaftNoise(hclog.New(&hclog.LoggerOptions{
		Name:       "raftlock",
		Level:      hclog.LevelFromString(level),
		JSONFormat: format == "json",
		Output:     w,
	}))
}

func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one raftlock server node",
		Long: `Run one node of a raftlock cluster. Every flag can also be set by the environment
variable RAFTLOCK_<FLAG> (upper case, '-' as '_') or by a key of the same name in the
config file given by --config; a flag on the command line wins, then the environment, then
the file. --initial-cluster bootstraps only when the data directory holds no Raft state, so
the same command restarts a node.

With --tls-cert-file, --tls-key-file and --tls-ca-file the API is served over HTTPS only
(plain HTTP gets no answer), and Raft, forwarding to the leader and --join use mutual TLS:
nodes accept only node certificates of the CA from each other. --tls-verify-clients also
requires API clients to present a certificate of the CA. On SIGHUP the agent re-reads the
three files for new connections; a file that fails to load keeps the old one (logged).
raftlock tls creates a CA and certificates to try this out. A certificate of the CA is a
node's only if its extended key usages are exactly server and client authentication.

What a client can make the node spend before it is authenticated is bounded: connections
(--max-connections), a request's headers (--max-header-bytes, --header-read-timeout, which
also bounds a TLS handshake) and body (--max-body-bytes, --body-read-timeout), and with TLS
the Raft handshakes in progress (--max-raft-handshakes). With --acl a token is judged from the
headers before any body is read, and the connection of a request without a valid token is
closed after the answer. --rate-limit counts requests without a token by client address.
docs/security.md lists the bounds.`,
		Example: `  raftlock agent --id n1 --data-dir /var/lib/raftlock/n1 \
    --http-addr 127.0.0.1:7001 --raft-addr 127.0.0.1:7101 \
    --initial-cluster n1=127.0.0.1:7101,n2=127.0.0.1:7102,n3=127.0.0.1:7103
  raftlock agent --id n4 --data-dir /var/lib/raftlock/n4 --http-addr 127.0.0.1:7004 \
    --raft-addr 127.0.0.1:7104 --join http://127.0.0.1:7001
  raftlock agent --id n1 --data-dir /var/lib/raftlock/n1 \
    --http-addr 127.0.0.1:7001 --raft-addr 127.0.0.1:7101 \
    --initial-cluster n1=127.0.0.1:7101,n2=127.0.0.1:7102,n3=127.0.0.1:7103 \
    --tls-cert-file certs/n1.pem --tls-key-file certs/n1-key.pem --tls-ca-file certs/ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cmd.Flags())
			if err != nil {
				return err
			}
			log := newLogger(cmd.ErrOrStderr(), cfg.LogLevel, cfg.LogFormat)
			return runAgent(cmd.Context(), cfg, log)
		},
	}
	config.AddFlags(cmd.Flags())
	return cmd
}

// runAgent runs one agent until ctx ends (SIGINT/SIGTERM), then shuts it down gracefully.
// SIGHUP re-reads the TLS files.
func runAgent(ctx context.Context, cfg config.Config, log hclog.Logger) error {
	// Caught before the start, so that a SIGHUP during it does not kill the process.
	hup := make(chan os.Signal, 1)
	if sigs := reloadSignals(); len(sigs) > 0 {
		signal.Notify(hup, sigs...)
		defer signal.Stop(hup)
	}
	a, err := agent.Start(ctx, cfg, log, agent.Listeners{})
	if agent.Refused(err) {
		// A restart cannot cure it: its own status, which the shipped units do not restart.
		return &exitError{code: agent.ExitRefused, msg: err.Error()}
	}
	if err != nil {
		return err
	}
	removed := a.Removed()
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			break wait
		case err := <-a.Errors():
			log.Error("http server failed", "error", err)
			break wait
		case <-removed:
			if cfg.WaitWhenRemoved {
				log.Warn("removed from the cluster: staying up, not ready (--wait-when-removed)")
				removed = nil
				continue
			}
			log.Warn("removed from the cluster: stopping (--wait-when-removed keeps it running)")
			break wait
		case <-hup:
			if err := a.Reload(); err != nil {
				log.Error("reload failed; kept what could not be read", "error", err)
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return a.Shutdown(sctx)
}

func newDevCmd() *cobra.Command {
	var dataDir, logLevel, logStore string
	var withTLS, secure bool
	var basePort int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a three-node development cluster in this process",
		Long: `Start three raftlock nodes in one process on 127.0.0.1 (HTTP 7001-7003, Raft
7101-7103), with data in a temporary directory unless --data-dir is given, and print how
to use them. Stop with Ctrl-C. A second dev cluster beside the first takes other ports with
--port-base (e.g. 7011: HTTP 7011-7013, Raft 7111-7113); its banner prints the
RAFTLOCK_ENDPOINTS line that points the CLI at it.

With --tls, the nodes serve the API over HTTPS only, require a client certificate
(--tls-verify-clients) and run Raft over mutual TLS. A CA (ca.pem, ca-key.pem), one
certificate per node (n1.pem, n1-key.pem, ...) and a client certificate (client.pem,
client-key.pem) are written into <data dir>/tls, and the curl and CLI lines to use them
are printed.

--secure is --tls with ACLs on (--acl): the cluster is bootstrapped once and the secret of
its management token is written into <data dir>/management-token (mode 0600). Started
again with the same --data-dir, it keeps its CA, certificates and token. The printed
export lines set RAFTLOCK_ENDPOINTS, the certificate files and RAFTLOCK_TOKEN for the CLI,
and the curl lines use the same variables.`,
		Example: `  raftlock dev
  raftlock dev --port-base 7011        # a second cluster beside the first
  raftlock dev --secure --data-dir ./raftlock-dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(cmd.ErrOrStderr(), logLevel, "text")
			if dataDir != "" {
				// The printed file names then work from any directory.
				abs, err := filepath.Abs(dataDir)
				if err != nil {
					return err
				}
				dataDir = abs
			}
			opts := agent.DevOptions{DataDir: dataDir, LogStore: logStore, BasePort: basePort, Logger: log,
				TLS: withTLS || secure, ACL: secure}
			if opts.TLS {
				opts.Tune = func(c *config.Config) { c.TLSVerifyClients = true }
			}
			dev, err := agent.StartDev(cmd.Context(), opts)
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w (another dev cluster? start this one with --port-base 7011, or 0 for free ports)", err)
			}
			if err != nil {
				return err
			}
			defer dev.Close()
			banner := devBanner(dev.Endpoints())
			if files, ok := dev.TLSFiles(); ok {
				if tokenFile, ok := dev.TokenFile(); ok {
					banner = devSecureBanner(dev.Endpoints(), files, tokenFile)
				} else {
					banner = devTLSBanner(dev.Endpoints(), files)
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), banner)
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the nodes' data here (default: a temporary directory, removed on exit)")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level: trace, debug, info, warn or error")
	cmd.Flags().StringVar(&logStore, "log-store", "", "the nodes' Raft log store of a new data dir: wal or boltdb (default wal)")
	cmd.Flags().BoolVar(&withTLS, "tls", false, "serve HTTPS only with client certificates, Raft over mutual TLS; writes the certificates into <data dir>/tls")
	cmd.Flags().BoolVar(&secure, "secure", false, "--tls and ACLs: bootstraps once and writes the management token into <data dir>/management-token")
	cmd.Flags().IntVar(&basePort, "port-base", 7001, "HTTP port of the first node: the nodes serve HTTP on N to N+2 and Raft on N+100 to N+102 (a second dev cluster: --port-base 7011); 0 picks free ports")
	cmd.Flags().IntVar(&basePort, "base-port", 7001, "the old name of --port-base")
	_ = cmd.Flags().MarkHidden("base-port")
	return cmd
}

// devBanner is the banner of a plain dev cluster; on other ports than the default it says how
// to point the CLI at them.
func devBanner(endpoints []string) string {
	env := ""
	if strings.Join(endpoints, ",") != defaultEndpoints {
		env = fmt.Sprintf("Point the CLI at this cluster:\n  export %s=%s\n  raftlock status\n\n", endpointsEnv, strings.Join(endpoints, ","))
	}
	return devBannerWith(endpoints, "curl -s", env)
}

// devTLSBanner is the banner of a dev cluster with TLS: the CA and client certificate go into
// the CLI's environment variables, which the curl lines use too.
func devTLSBanner(endpoints []string, f agent.DevTLSFiles) string {
	curl := fmt.Sprintf("curl -s --cacert $%s --cert $%s --key $%s", caFileEnv, certFileEnv, keyFileEnv)
	env := fmt.Sprintf(`The CA and a client certificate are in %s. Set them for curl and the CLI:
  export %s=%s %s=%s %s=%s
  raftlock status

`, f.Dir, caFileEnv, shQuote(f.CAFile), certFileEnv, shQuote(f.ClientCertFile), keyFileEnv, shQuote(f.ClientKeyFile))
	return devBannerWith(endpoints, curl, env)
}

// devSecureBanner is the banner of a dev cluster with TLS and ACLs: the endpoints, certificate
// files and management token go into the CLI's environment variables, which the curl lines
// use too. The secret itself is not printed, only the file that holds it.
func devSecureBanner(endpoints []string, f agent.DevTLSFiles, tokenFile string) string {
	curl := fmt.Sprintf(`curl -s --cacert $%s --cert $%s --key $%s -H "%s: $%s"`,
		caFileEnv, certFileEnv, keyFileEnv, api.HeaderToken, tokenEnv)
	env := fmt.Sprintf(`TLS (client certificates required) and ACLs are on. The CA and a client certificate
are in %s, the management token's secret in %s.
Set them for curl and the CLI:
  export %s=%s
  export %s=%s %s=%s %s=%s
  export %s="$(cat %s)"
  raftlock status
  raftlock acl token list

`, f.Dir, tokenFile,
		endpointsEnv, strings.Join(endpoints, ","),
		caFileEnv, shQuote(f.CAFile), certFileEnv, shQuote(f.ClientCertFile), keyFileEnv, shQuote(f.ClientKeyFile),
		tokenEnv, shQuote(tokenFile))
	return devBannerWith(endpoints, curl, env)
}

// shQuote quotes s for a POSIX shell, unless it needs none.
func shQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@%=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func devBannerWith(endpoints []string, curl, extra string) string {
	ep := endpoints[0]
	var b strings.Builder
	fmt.Fprintf(&b, "raftlock %s dev cluster is up: %s\n\n", version.Version, strings.Join(endpoints, " "))
	b.WriteString(extra)
	fmt.Fprintf(&b, `Try it (any node answers):
  %[2]s -XPOST %[1]s/v1/sessions -d '{"ttl":"30s","name":"me"}'        # -> {"id":"<SID>",...}
  %[2]s -XPOST %[1]s/v1/locks/jobs/nightly/acquire -d '{"session":"<SID>"}' # -> {"token":N,...}
  %[2]s %[1]s/v1/locks/jobs/nightly
  %[2]s -XPOST %[1]s/v1/locks/jobs/nightly/release -d '{"session":"<SID>","token":N}'
  %[2]s -XPUT %[1]s/v1/sessions/<SID>/renew
  %[2]s %[1]s/v1/cluster

Press Ctrl-C to stop.
`, ep, curl)
	return b.String()
}
