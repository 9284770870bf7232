package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/raftlock/raftlock/tlsutil"
)

// DevTLSFiles are the PEM files of a development cluster started with DevOptions.TLS.
type DevTLSFiles struct {
	// Dir holds them all.
	Dir string
	// CAFile is the CA certificate; CAKeyFile its key.
	CAFile, CAKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate of the CA, for curl and the CLI.
	ClientCertFile, ClientKeyFile string
}

// NodeFiles returns node id's certificate and key files.
func (f DevTLSFiles) NodeFiles(id string) (certFile, keyFile string) {
	return filepath.Join(f.Dir, id+".pem"), filepath.Join(f.Dir, id+"-key.pem")
}

// ClientConfig returns a TLS client configuration that trusts the dev CA and presents the
// dev client certificate.
func (f DevTLSFiles) ClientConfig() (*tls.Config, error) {
	pool, err := tlsutil.LoadCAPool(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("agent: dev TLS: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("agent: dev TLS client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// writeDevTLS writes, into dir, a CA and certificates for the nodes and a client, keeping the
// files already there (a dev cluster restarted on the same data dir keeps its CA).
func writeDevTLS(dir string, ids []string) (DevTLSFiles, error) {
	f := DevTLSFiles{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		CAKeyFile:      filepath.Join(dir, "ca-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("agent: dev TLS: %w", err)
	}
	ca, err := tlsutil.LoadCA(f.CAFile, f.CAKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = tlsutil.NewCA("raftlock dev CA", 0); err == nil {
			var key []byte
			if key, err = ca.KeyPEM(); err == nil {
				err = tlsutil.WriteFiles(f.CAFile, ca.CertPEM(), f.CAKeyFile, key, false)
			}
		}
	}
	if err != nil {
		return f, fmt.Errorf("agent: dev TLS: %w", err)
	}
	issue := func(certFile, keyFile string, req tlsutil.CertRequest) error {
		if _, err := os.Stat(certFile); err == nil {
			return nil
		}
		cert, key, err := ca.Issue(req)
		if err != nil {
			return err
		}
		return tlsutil.WriteFiles(certFile, cert, keyFile, key, true)
	}
	for _, id := range ids {
		c, k := f.NodeFiles(id)
		if err := issue(c, k, tlsutil.CertRequest{Name: id, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}); err != nil {
			return f, fmt.Errorf("agent: dev TLS: %w", err)
		}
	}
	if err := issue(f.ClientCertFile, f.ClientKeyFile, tlsutil.CertRequest{Name: "dev-client", Client: true}); err != nil {
		return f, fmt.Errorf("agent: dev TLS: %w", err)
	}
	return f, nil
}
