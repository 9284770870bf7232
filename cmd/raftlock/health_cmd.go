package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/tlsutil"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// healthSettings are the agent settings the health command reads, under the agent's own flag
// names, so that it finds the agent of its container or unit through the same RAFTLOCK_*
// environment (or --config file) the agent was started with.
func healthSettings() []struct{ name, def, usage string } {
	return []struct{ name, def, usage string }{
		{"http-addr", "127.0.0.1:7001", "the agent's --http-addr; a wildcard host is probed on 127.0.0.1"},
		{"advertise-http", "", "the agent's --advertise-http: with TLS, its host is the name checked in the agent's certificate"},
		{"tls-cert-file", "", "the agent's --tls-cert-file; with it the probe uses HTTPS and presents this certificate"},
		{"tls-key-file", "", "the agent's --tls-key-file"},
		{"tls-ca-file", "", "the agent's --tls-ca-file, which the agent's certificate is checked against"},
	}
}

func newHealthCmd() *cobra.Command {
	var ready bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [--ready]",
		Short: "Exit 0 if the local agent serves (/v1/health) or, with --ready, is ready (/v1/ready)",
		Long: `Ask one agent whether it serves (GET /v1/health) or, with --ready, whether it knows a leader
and has applied the log up to the commit index it knows (GET /v1/ready), and exit 0 if it
answers 200, 1 otherwise. It is the health check of containers that have no curl.

It finds the agent as the agent itself reads its settings: the flags below, else the
variables RAFTLOCK_HTTP_ADDR, RAFTLOCK_ADVERTISE_HTTP, RAFTLOCK_TLS_CERT_FILE,
RAFTLOCK_TLS_KEY_FILE and RAFTLOCK_TLS_CA_FILE, else the same keys in the --config file
(RAFTLOCK_CONFIG). So run in the agent's environment it needs no flag. When none of those names
the agent's address, it asks the first endpoint of --endpoints or RAFTLOCK_ENDPOINTS, like
every other command (over https with RAFTLOCK_CA_FILE, RAFTLOCK_CERT_FILE and
RAFTLOCK_KEY_FILE), and only then 127.0.0.1:7001. With TLS it speaks
HTTPS to the agent, checks the agent's certificate against the CA for the host of
--advertise-http, and presents the agent's own certificate (which --tls-verify-clients
accepts). Neither endpoint needs an ACL token.`,
		Example: `  raftlock health --ready                       # in the agent's container or unit
  raftlock health --http-addr 127.0.0.1:7001    # liveness of a local agent without TLS`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := healthViper(cmd)
			if err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			path := "/v1/health"
			if ready {
				path = "/v1/ready"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			agentSet := cmd.Flags().Changed("http-addr") || os.Getenv("RAFTLOCK_HTTP_ADDR") != "" || v.InConfig("http-addr")
			status, err := probe(ctx, v, path, agentSet)
			if err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), status)
			return err
		},
	}
	cmd.Flags().String("config", "", "the agent's config file, read for the settings below (or $RAFTLOCK_CONFIG)")
	cmd.Flags().String("endpoints", "", "when no agent address is set (--http-addr, $RAFTLOCK_HTTP_ADDR, the config file): ask the first of these endpoints, as the other commands read them (default $"+endpointsEnv+")")
	for _, s := range healthSettings() {
		cmd.Flags().String(s.name, s.def, s.usage+" (or $RAFTLOCK_"+envName(s.name)+")")
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "ask /v1/ready (knows a leader, log applied) instead of /v1/health (serves)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// envName is the RAFTLOCK_* suffix of a flag name, as the agent derives it.
func envName(flag string) string { return strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }

// healthViper resolves the settings as the agent does: a flag given on the command line, then
// the RAFTLOCK_* variable, then the config file, then the flag's default.
func healthViper(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("RAFTLOCK")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, err
	}
	if file := v.GetString("config"); file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
	}
	return v, nil
}

// probe GETs path from the agent v describes and returns the answer's status line if it is
// 200, or an error that says what came back instead.
func probe(ctx context.Context, v *viper.Viper, path string, agentSet bool) (string, error) {
	if ep := firstEndpoint(v); ep != "" && !agentSet {
		return probeEndpoint(ctx, v, ep, path)
	}
	host, port, err := net.SplitHostPort(v.GetString("http-addr"))
	if err != nil {
		return "", fmt.Errorf("--http-addr %q: %w", v.GetString("http-addr"), err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme, transport := "http", http.DefaultTransport.(*http.Transport).Clone()
	if v.GetString("tls-cert-file") != "" {
		cfg, err := healthTLS(v)
		if err != nil {
			return "", err
		}
		scheme, transport.TLSClientConfig = "https", cfg
	}
	return get(ctx, transport, scheme+"://"+net.JoinHostPort(host, port)+path)
}

// firstEndpoint is the first of --endpoints, else of $RAFTLOCK_ENDPOINTS, as the other client
// commands read them; "" when neither is set.
func firstEndpoint(v *viper.Viper) string {
	list := v.GetString("endpoints")
	if list == "" {
		list = os.Getenv(endpointsEnv)
	}
	first, _, _ := strings.Cut(list, ",")
	return strings.TrimRight(strings.TrimSpace(first), "/")
}

// probeEndpoint GETs path from an endpoint of the client commands (http:// or https://; no
// scheme is http, or https with a TLS setting). With https it trusts the agent's CA and shows
// the agent's certificate when --tls-cert-file is given (the agent's environment), else the
// client commands' RAFTLOCK_CA_FILE, RAFTLOCK_CERT_FILE and RAFTLOCK_KEY_FILE.
func probeEndpoint(ctx context.Context, v *viper.Viper, ep, path string) (string, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	var clientTLS clientFlags
	cfg, err := clientTLS.tlsConfig()
	if err != nil {
		return "", err
	}
	if v.GetString("tls-cert-file") != "" {
		if cfg, err = healthTLS(v); err != nil {
			return "", err
		}
	}
	if !strings.Contains(ep, "://") {
		if cfg != nil {
			ep = "https://" + ep
		} else {
			ep = "http://" + ep
		}
	}
	transport.TLSClientConfig = cfg
	return get(ctx, transport, ep+path)
}

// get GETs url and returns the answer's status line if it is 200, or an error that says what
// came back instead.
func get(ctx context.Context, transport *http.Transport, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return "", err // names the URL
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line := fmt.Sprintf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", line)
	}
	return line, nil
}

// healthTLS is the probe's TLS configuration: the agent's CA, the agent's own certificate as a
// client certificate, and the advertised host as the name to check.
func healthTLS(v *viper.Viper) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(v.GetString("tls-cert-file"), v.GetString("tls-key-file"))
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if ca := v.GetString("tls-ca-file"); ca != "" {
		pool, err := tlsutil.LoadCAPool(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if adv := v.GetString("advertise-http"); adv != "" {
		if h, _, err := net.SplitHostPort(adv); err == nil && h != "" {
			// The probe dials the local address, but the certificate names where others
			// reach the agent.
			cfg.ServerName = h
		}
	}
	return cfg, nil
}
