package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/tlsutil"
	"github.com/spf13/cobra"
)

// Exit codes of the client commands, documented in their help.
const (
	exitFailure    = 1   // raftlock itself failed: cluster unreachable, bad arguments, interrupted
	exitLockLost   = 3   // the lock (or leadership) was lost while the command ran
	exitLockHeld   = 75  // the lock is held by someone else (EX_TEMPFAIL: try again later)
	exitCannotExec = 126 // the command was found but could not be started
	exitNotFound   = 127 // the command was not found
)

// defaultEndpoints are those of the `raftlock dev` cluster.
const defaultEndpoints = "http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003"

// endpointsEnv names the environment variable read when --endpoints is not given.
const endpointsEnv = "RAFTLOCK_ENDPOINTS"

// tokenEnv names the environment variable read when --token is not given.
const tokenEnv = "RAFTLOCK_TOKEN"

// fencingTokenEnv names the variable that carries a command's fencing token (lock, elect).
const fencingTokenEnv = "RAFTLOCK_FENCING_TOKEN"

// aclToken returns --token, else $RAFTLOCK_TOKEN, unless that only repeats the fencing token
// of a lock or elect that runs this process: on a cluster without ACLs they give the command
// its fencing token in RAFTLOCK_TOKEN too (deprecated, kept because it was documented), which
// is no ACL token to send.
func aclToken(flag string) string {
	if flag != "" {
		return flag
	}
	t := os.Getenv(tokenEnv)
	if t != "" && t == os.Getenv(fencingTokenEnv) {
		return ""
	}
	return t
}

// exitCodesHelp is appended to the help of the commands that run a child; held says whether
// the command gives up on a lock held by someone else (lock does, elect waits to be elected).
func exitCodesHelp(held bool) string {
	help := `
Exit codes:
  0-255  the command's own exit code, passed through (128+N if it was killed by signal N)
  1      raftlock failed before or around running the command (cluster unreachable,
         bad arguments, interrupted while waiting)
  3      the lock was lost while the command ran; the command got SIGTERM, then SIGKILL
         after the grace period`
	if held {
		help += `
  75     the lock is held by another session and --wait was 0 or elapsed (EX_TEMPFAIL)`
	}
	return help + `
  126    the command cannot be executed (checked before anything is asked of the cluster)
  127    the command was not found (checked before anything is asked of the cluster)`
}

// addClientCommands registers the client-side commands (lock, elect, inspection).
func addClientCommands(root *cobra.Command) {
	root.AddCommand(
		newLockCmd(),
		newElectCmd(),
		newLocksCmd(),
		newLockInfoCmd(),
		newWatchCmd(),
		newSessionsCmd(),
		newMembersCmd(),
		newStatusCmd(),
		newACLCmd(),
	)
}

// Environment variables read when the TLS flags of the client commands are not given.
const (
	caFileEnv   = "RAFTLOCK_CA_FILE"
	certFileEnv = "RAFTLOCK_CERT_FILE"
	keyFileEnv  = "RAFTLOCK_KEY_FILE"
)

// clientFlags are the connection flags every client command has.
type clientFlags struct {
	endpoints string
	timeout   time.Duration
	retry     time.Duration
	token     string

	caFile, certFile, keyFile string
}

// register adds the flags; retry is the default of --retry-timeout.
func (f *clientFlags) register(cmd *cobra.Command, retry time.Duration) {
	cmd.Flags().StringVar(&f.endpoints, "endpoints", "",
		"comma-separated endpoints of the cluster, http:// or https:// (default $"+endpointsEnv+", else "+defaultEndpoints+
			"); with a TLS flag below, the defaults and endpoints without a scheme use https")
	cmd.Flags().DurationVar(&f.timeout, "request-timeout", client.DefaultRequestTimeout,
		"timeout of one request to one endpoint")
	cmd.Flags().DurationVar(&f.retry, "retry-timeout", retry,
		"how long a request keeps trying other endpoints while the cluster is unreachable or has no leader")
	cmd.Flags().StringVar(&f.token, "token", "", "ACL token secret sent with every request (default $"+tokenEnv+")")
	f.registerTLS(cmd)
}

// registerTLS adds the TLS flags only.
func (f *clientFlags) registerTLS(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.caFile, "ca-file", "",
		"CA bundle (PEM) to verify https endpoints against, instead of the system's (default $"+caFileEnv+")")
	cmd.Flags().StringVar(&f.certFile, "cert-file", "",
		"client certificate (PEM) for clusters started with --tls-verify-clients (default $"+certFileEnv+")")
	cmd.Flags().StringVar(&f.keyFile, "key-file", "", "the private key of --cert-file (PEM) (default $"+keyFileEnv+")")
}

// orEnv returns v, or the environment variable env when v is empty.
func orEnv(v, env string) string {
	if v == "" {
		return os.Getenv(env)
	}
	return v
}

// tlsConfig builds the client's TLS configuration from --ca-file, --cert-file and --key-file
// (or their environment variables); nil when none is given, and https endpoints then verify
// against the system's roots.
func (f *clientFlags) tlsConfig() (*tls.Config, error) {
	ca, cert, key := orEnv(f.caFile, caFileEnv), orEnv(f.certFile, certFileEnv), orEnv(f.keyFile, keyFileEnv)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("--cert-file and --key-file go together (also as $%s and $%s)", certFileEnv, keyFileEnv)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := tlsutil.LoadCAPool(ca)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert-file/--key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// options returns the client options of the flags (the token and TLS ones included), retry
// overriding --retry-timeout when >= 0.
func (f *clientFlags) options(retry time.Duration) ([]client.Option, error) {
	if retry < 0 {
		retry = f.retry
	}
	opts := []client.Option{client.WithRequestTimeout(f.timeout), client.WithRetryTimeout(retry)}
	cfg, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	if t := aclToken(f.token); t != "" {
		opts = append(opts, client.WithToken(t))
	}
	return opts, nil
}

// endpointList resolves --endpoints, then $RAFTLOCK_ENDPOINTS, then the dev cluster (over
// https when a TLS flag is given).
func (f *clientFlags) endpointList() []string {
	v := f.endpoints
	if v == "" {
		v = os.Getenv(endpointsEnv)
	}
	if v == "" {
		v = defaultEndpoints
		if orEnv(f.caFile, caFileEnv) != "" || orEnv(f.certFile, certFileEnv) != "" {
			// The dev cluster's, with TLS (raftlock dev --tls).
			v = strings.ReplaceAll(v, "http://", "https://")
		}
	}
	return strings.Split(v, ",")
}

// newClient returns a client configured by the flags.
func (f *clientFlags) newClient() (*client.Client, error) {
	opts, err := f.options(-1)
	if err != nil {
		return nil, &exitError{code: exitFailure, msg: err.Error()}
	}
	c, err := client.New(f.endpointList(), opts...)
	if err != nil {
		return nil, &exitError{code: exitFailure, msg: err.Error()}
	}
	return c, nil
}

// outputFlag is the -o flag of the inspection commands.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

func (o *outputFlag) validate() error {
	if o.format != "table" && o.format != "json" {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("unknown output format %q (want table or json)", o.format)}
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// completeLockNames completes a lock name from the locks currently held or awaited; after
// the name it answers with directive (file names for a command's arguments, or nothing).
func completeLockNames(f *clientFlags, after cobra.ShellCompDirective) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, after
		}
		opts, err := f.options(0)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		c, err := client.New(f.endpointList(), opts...)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		locks, err := c.Raw().Locks(ctx, toComplete, client.Stale())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []cobra.Completion
		for _, l := range locks {
			names = append(names, l.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// failure turns an error of a client call into an exit with code 1 and a plain message, and
// a hint where the error says what to change.
func failure(what string, err error) error {
	msg := fmt.Sprintf("%s: %s", what, errText(err))
	if h := hint(err); h != "" {
		msg += "\nhint: " + h
	}
	return &exitError{code: exitFailure, msg: msg}
}

// hint says what to change for the errors that only a change mends: TLS settings that no
// retry can make work (the client gives up on them at once), and an http:// endpoint whose
// port serves HTTPS (which closes a plain request unanswered).
func hint(err error) string {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var op *net.OpError
	var ue *url.Error
	switch {
	case errors.As(err, &ue) && strings.HasPrefix(ue.URL, "http://") && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		if u, perr := url.Parse(ue.URL); perr == nil && speaksTLS(u.Host) {
			return "http://" + u.Host + " serves HTTPS, which closes plain HTTP requests unanswered: use https://" + u.Host +
				" (with the cluster's CA: --ca-file or $" + caFileEnv + ")"
		}
		return ""
	case errors.As(err, &ua):
		return "the cluster's certificate is not signed by a CA this command trusts: give the cluster's CA with --ca-file (or $" + caFileEnv + ")"
	case errors.As(err, &he):
		return "the cluster's certificate does not name the host of the endpoint: use a host name or address it was issued for"
	case errors.As(err, &op) && op.Op == "remote error" && strings.Contains(op.Err.Error(), "certificate"):
		return "the cluster requires a client certificate it trusts (--tls-verify-clients): give one with --cert-file and --key-file (or $" +
			certFileEnv + " and $" + keyFileEnv + ")"
	case client.TLSPermanent(err):
		return "the TLS handshake failed in a way no retry mends: check --ca-file, --cert-file and --key-file"
	}
	return ""
}

// errText is the message of an error of the client without the "raftlock: " in front, which
// the client's errors carry once and raftlock's own messages carry already.
func errText(err error) string { return strings.TrimPrefix(err.Error(), "raftlock: ") }

// speaksTLS reports whether the server at addr answers a TLS handshake (its certificate is
// not checked: this only tells HTTPS from a closed or broken plain port).
func speaksTLS(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	//nolint:gosec // a probe that sends nothing: whether the port speaks TLS at all
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	err = tc.HandshakeContext(ctx)
	var op *net.OpError
	return err == nil || errors.As(err, &op) && op.Op == "remote error"
}
