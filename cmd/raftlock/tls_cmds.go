package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/tlsutil"
)

// File names the tls commands write, documented in their help.
const (
	caCertName = "ca.pem"
	caKeyName  = "ca-key.pem"
)

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create a CA and node or client certificates for trying TLS out",
		Long: `Create a certificate authority and certificates signed by it (ECDSA P-256, standard
library only), as PEM files an agent takes with --tls-cert-file, --tls-key-file and
--tls-ca-file, and the client commands with --ca-file, --cert-file and --key-file.

  raftlock tls ca create --dir certs
  raftlock tls cert create --dir certs --node n1 --ip 127.0.0.1 --dns localhost
  raftlock tls cert create --dir certs --client

For production, an organisation's own CA (or cfssl, step-ca, Vault) does the same job: a
node certificate must allow both server and client authentication and name the addresses
clients reach the node at; a client certificate allows client authentication.`,
	}
	ca := &cobra.Command{Use: "ca", Short: "Manage the certificate authority"}
	ca.AddCommand(newTLSCACreateCmd())
	cert := &cobra.Command{Use: "cert", Short: "Manage node and client certificates"}
	cert.AddCommand(newTLSCertCreateCmd())
	cmd.AddCommand(ca, cert)
	return cmd
}

func newTLSCACreateCmd() *cobra.Command {
	var dir, name string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a CA: writes " + caCertName + " and " + caKeyName,
		Long: `Create a self-signed certificate authority and write, into --dir:

  ` + caCertName + `      the CA certificate: give it to every agent (--tls-ca-file) and client (--ca-file)
  ` + caKeyName + `  its private key (mode 0600): keep it where certificates are made, never on nodes

Existing files are kept unless --force is given.`,
		Example: `  raftlock tls ca create --dir certs`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := tlsutil.NewCA(name, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			key, err := ca.KeyPEM()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			certFile, keyFile := filepath.Join(dir, caCertName), filepath.Join(dir, caKeyName)
			if err := tlsutil.WriteFiles(certFile, ca.CertPEM(), keyFile, key, force); err != nil {
				return existing(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (valid until %s)\n", certFile, keyFile, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "directory to write the files into (created, mode 0700, if missing)")
	cmd.Flags().StringVar(&name, "name", "raftlock CA", "the CA's common name")
	cmd.Flags().IntVar(&days, "days", 5*365, "validity in days")
	cmd.Flags().BoolVar(&force, "force", false, "replace existing files")
	return cmd
}

func newTLSCertCreateCmd() *cobra.Command {
	var dir, node, caCert, caKey string
	var ips, dnsNames []string
	var client, force bool
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a node (or, with --client, a client) certificate signed by the CA",
		Long: `Create a key and a certificate signed by the CA of --dir (or --ca-cert/--ca-key), and
write, into --dir:

  <node>.pem      the certificate: an agent's --tls-cert-file (or a client's --cert-file)
  <node>-key.pem  its private key (mode 0600): --tls-key-file (or --key-file)

where <node> is --node ("client" by default with --client).

A node certificate allows server and client authentication: nodes accept only such
certificates of the CA from each other (Raft, forwarding, join). Give every address clients
reach the node at with --ip and --dns, since clients check them (nodes between themselves
check the CA and the usage only). A client certificate (--client) allows client
authentication only: it is what an API client presents to agents started with
--tls-verify-clients, and nodes refuse it for Raft.

Existing files are kept unless --force is given (e.g. to rotate a certificate: then send
the agent SIGHUP).`,
		Example: `  raftlock tls cert create --dir certs --node n1 --ip 127.0.0.1 --dns localhost
  raftlock tls cert create --dir certs --node n2 --ip 10.0.0.2 --dns raftlock-2.internal
  raftlock tls cert create --dir certs --client            # client.pem, client-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				if !client {
					return &exitError{code: exitFailure, msg: "--node is required (the node's id; the files are named after it)"}
				}
				node = "client"
			}
			if strings.ContainsAny(node, `/\`) || node == "." || node == ".." {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("--node %q must be a plain name", node)}
			}
			req := tlsutil.CertRequest{Name: node, DNSNames: dnsNames, Client: client, ValidFor: time.Duration(days) * 24 * time.Hour}
			for _, s := range ips {
				ip := net.ParseIP(s)
				if ip == nil {
					return &exitError{code: exitFailure, msg: fmt.Sprintf("--ip %q is not an IP address", s)}
				}
				req.IPs = append(req.IPs, ip)
			}
			if !client && len(req.IPs) == 0 && len(req.DNSNames) == 0 {
				return &exitError{code: exitFailure, msg: "a node certificate needs --ip or --dns: the addresses clients reach the node at"}
			}
			if caCert == "" {
				caCert = filepath.Join(dir, caCertName)
			}
			if caKey == "" {
				caKey = filepath.Join(dir, caKeyName)
			}
			ca, err := tlsutil.LoadCA(caCert, caKey)
			if err != nil {
				return err
			}
			certPEM, keyPEM, err := ca.Issue(req)
			if err != nil {
				return err
			}
			certFile, keyFile := filepath.Join(dir, node+".pem"), filepath.Join(dir, node+"-key.pem")
			if err := tlsutil.WriteFiles(certFile, certPEM, keyFile, keyPEM, force); err != nil {
				return existing(err)
			}
			kind := "node"
			if client {
				kind = "client"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s certificate %s and key %s\n", kind, certFile, keyFile)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", ".", "directory holding the CA files and receiving the new ones")
	fl.StringVar(&node, "node", "", "the certificate's name: the node's id, or a client's name with --client; names the files")
	fl.StringSliceVar(&ips, "ip", nil, "IP address the holder is reached at (repeat or comma-separate)")
	fl.StringSliceVar(&dnsNames, "dns", nil, "DNS name the holder is reached at (repeat or comma-separate)")
	fl.BoolVar(&client, "client", false, "a client certificate (client authentication only) instead of a node certificate")
	fl.StringVar(&caCert, "ca-cert", "", "CA certificate (default <dir>/"+caCertName+")")
	fl.StringVar(&caKey, "ca-key", "", "CA private key (default <dir>/"+caKeyName+")")
	fl.IntVar(&days, "days", 365, "validity in days (at most the CA's)")
	fl.BoolVar(&force, "force", false, "replace existing files")
	return cmd
}

// existing explains a refusal to replace a file.
func existing(err error) error {
	if errors.Is(err, fs.ErrExist) {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%v (give --force to replace it)", err)}
	}
	return err
}
