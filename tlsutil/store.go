package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Errors of the peer checks, wrapped with the detail.
var (
	// ErrNoCertificate means the peer presented no certificate where one is required.
	ErrNoCertificate = errors.New("tlsutil: the peer presented no certificate")
	// ErrUntrusted means the peer's certificate does not verify against the CA bundle for the
	// use it was presented for.
	ErrUntrusted = errors.New("tlsutil: the peer's certificate is not trusted")
)

// Files names the PEM files of a node's TLS material.
type Files struct {
	// CertFile and KeyFile are this node's certificate (with any intermediates after it) and key.
	CertFile, KeyFile string
	// CAFile is the CA bundle peers' and clients' certificates are verified against.
	CAFile string
}

// material is one consistent reading of the files.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// Store holds a node's certificate, key and CA bundle, re-read by Reload. It is safe for
// concurrent use.
type Store struct {
	files      Files
	minVersion uint16
	log        hclog.Logger

	reload sync.Mutex // serialises Reload
	cur    atomic.Pointer[material]
}

// New loads files; every file must load. minVersion is tls.VersionTLS12 or tls.VersionTLS13
// (0 means 1.2).
func New(files Files, minVersion uint16, log hclog.Logger) (*Store, error) {
	if files.CertFile == "" || files.KeyFile == "" || files.CAFile == "" {
		return nil, errors.New("tlsutil: a certificate, its key and a CA file are all required")
	}
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	if minVersion != tls.VersionTLS12 && minVersion != tls.VersionTLS13 {
		return nil, fmt.Errorf("tlsutil: minimum version %#x is not TLS 1.2 or 1.3", minVersion)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cert, err := LoadKeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return nil, err
	}
	pool, err := LoadCAPool(files.CAFile)
	if err != nil {
		return nil, err
	}
	s := &Store{files: files, minVersion: minVersion, log: log}
	s.cur.Store(&material{cert: cert, pool: pool})
	s.warnUntrusted(cert, pool)
	return s, nil
}

// ParseMinVersion turns "1.2" or "1.3" into the crypto/tls constant.
func ParseMinVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("tlsutil: TLS minimum version %q is not 1.2 or 1.3", v)
}

// LoadKeyPair reads a PEM certificate (chain) and its private key.
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: loading %s and %s: %w", certFile, keyFile, err)
	}
	return &cert, nil // tls.LoadX509KeyPair sets Leaf
}

// LoadCAPool reads a PEM bundle of one or more CA certificates.
func LoadCAPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: loading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsutil: loading CA bundle %s: no PEM certificate in it", caFile)
	}
	return pool, nil
}

// Reload re-reads the files. A certificate and key that fail to load (either file) keep the
// previous pair; a CA bundle that fails keeps the previous bundle; each failure is logged and
// returned. Connections made afterwards use what is loaded; open ones keep theirs.
func (s *Store) Reload() error {
	s.reload.Lock()
	defer s.reload.Unlock()
	old := s.cur.Load()
	next := *old
	var errs []error
	if cert, err := LoadKeyPair(s.files.CertFile, s.files.KeyFile); err != nil {
		s.log.Error("TLS reload: keeping the previous certificate", "error", err)
		errs = append(errs, err)
	} else {
		next.cert = cert
	}
	if pool, err := LoadCAPool(s.files.CAFile); err != nil {
		s.log.Error("TLS reload: keeping the previous CA bundle", "error", err)
		errs = append(errs, err)
	} else {
		next.pool = pool
	}
	s.cur.Store(&next)
	s.warnUntrusted(next.cert, next.pool)
	if leaf := next.cert.Leaf; leaf != nil {
		s.log.Info("TLS files reloaded", "subject", leaf.Subject.CommonName, "serial", leaf.SerialNumber.String(),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "errors", len(errs))
	}
	return errors.Join(errs...)
}

// warnUntrusted logs when this node's own certificate would not pass its peers' check.
func (s *Store) warnUntrusted(cert *tls.Certificate, pool *x509.CertPool) {
	if err := verifyNodeChain(cert.Certificate, pool); err != nil {
		s.log.Warn("this node's certificate is not a node certificate of the CA bundle: other nodes will refuse it", "error", err)
	}
}

// Certificate returns the certificate in use.
func (s *Store) Certificate() *tls.Certificate { return s.cur.Load().cert }

// MinVersion returns the lowest TLS version the configurations accept.
func (s *Store) MinVersion() uint16 { return s.minVersion }

// nodeUsages are the usages a node certificate must allow: it serves and it dials.
var nodeUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// verifyNodeChain checks that the certificate chain raw (leaf first) is a node certificate of
// pool (see verifyNode).
func verifyNodeChain(raw [][]byte, pool *x509.CertPool) error {
	if len(raw) == 0 {
		return ErrNoCertificate
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUntrusted, err)
		}
		certs[i] = c
	}
	return verifyNode(certs, pool)
}

// verifyNode checks that certs (leaf first) is a node certificate of pool: signed by it and
// allowing exactly server and client authentication, nothing more. crypto/x509 takes a
// certificate without extended key usages, or with "any", as allowing every usage; such a
// certificate (a CA's, or one made for another purpose by a shared CA) is no node's.
func verifyNode(certs []*x509.Certificate, pool *x509.CertPool) error {
	if len(certs) == 0 {
		return ErrNoCertificate
	}
	if leaf := certs[0]; !exactlyNodeUsages(leaf) {
		return fmt.Errorf("%w: %s: a node certificate allows exactly server and client authentication (extended key usages %v, %d unknown)",
			ErrUntrusted, PeerName(leaf), leaf.ExtKeyUsage, len(leaf.UnknownExtKeyUsage))
	}
	return verifyParsed(certs, pool, nodeUsages, "")
}

// exactlyNodeUsages says whether the certificate's extended key usages are server and client
// authentication, and no other.
func exactlyNodeUsages(c *x509.Certificate) bool {
	if len(c.UnknownExtKeyUsage) > 0 || len(c.ExtKeyUsage) != len(nodeUsages) {
		return false
	}
	server, client := false, false
	for _, u := range c.ExtKeyUsage {
		server = server || u == x509.ExtKeyUsageServerAuth
		client = client || u == x509.ExtKeyUsageClientAuth
	}
	return server && client
}

// maxPeerName bounds how much of a peer certificate's common name goes into an error or a log
// line: the name is the peer's choice, up to tens of kilobytes.
const maxPeerName = 64

// PeerName returns the certificate's common name for a log line or an error: quoted, with
// everything outside printable ASCII escaped, and cut to maxPeerName bytes of the name.
func PeerName(c *x509.Certificate) string {
	name := c.Subject.CommonName
	cut := len(name) > maxPeerName
	if cut {
		name = name[:maxPeerName]
	}
	q := strconv.QuoteToASCII(name)
	if cut {
		q += "..."
	}
	return q
}

func verifyParsed(certs []*x509.Certificate, pool *x509.CertPool, usages []x509.ExtKeyUsage, host string) error {
	if len(certs) == 0 {
		return ErrNoCertificate
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), DNSName: host}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	// KeyUsages accepts a chain that allows any one of them; each usage is required, so check
	// them one at a time.
	for _, u := range usages {
		opts.KeyUsages = []x509.ExtKeyUsage{u}
		if _, err := certs[0].Verify(opts); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUntrusted, PeerName(certs[0]), err)
		}
	}
	return nil
}

func (s *Store) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load().cert, nil
}

func (s *Store) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.cur.Load().cert, nil
}

// verifyPeer checks the other side of a connection against the current CA bundle.
func (s *Store) verifyPeer(cs tls.ConnectionState, usages []x509.ExtKeyUsage) error {
	return verifyParsed(cs.PeerCertificates, s.cur.Load().pool, usages, "")
}

// verifyNodePeer checks that the other side of a connection is a node of the current CA bundle.
func (s *Store) verifyNodePeer(cs tls.ConnectionState) error {
	return verifyNode(cs.PeerCertificates, s.cur.Load().pool)
}

// APIServerConfig returns the HTTPS API's server configuration (HTTP/1.1). With verifyClients,
// a client must present a certificate of the CA allowing client authentication. Without it a
// certificate is asked for but optional and unchecked, so that the API can still tell another
// node's forwarded requests (IsNode) from a client's.
func (s *Store) APIServerConfig(verifyClients bool) *tls.Config {
	c := &tls.Config{
		MinVersion:     s.minVersion,
		GetCertificate: s.getCertificate,
		NextProtos:     []string{"http/1.1"},
		ClientAuth:     tls.RequestClientCert,
	}
	if verifyClients {
		// The CA bundle can change on Reload, so the chain is checked here against the current
		// one rather than by crypto/tls against a pool fixed in the config.
		c.ClientAuth = tls.RequireAnyClientCert
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return s.verifyPeer(cs, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
		}
	}
	return c
}

// ConsoleServerConfig returns the configuration of the console listener (--console-addr):
// HTTPS with this node's certificate, HTTP/1.1, and no client certificate asked for, so that a
// browser reaches it without one (and shows no certificate picker). Nothing there may rely on
// a client certificate: a connection of it never counts as a node's.
func (s *Store) ConsoleServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     s.minVersion,
		GetCertificate: s.getCertificate,
		NextProtos:     []string{"http/1.1"},
		ClientAuth:     tls.NoClientCert,
	}
}

// IsNode reports whether the other side of a connection presented a node certificate of the
// current CA bundle: one that allows exactly server and client authentication, as the
// certificates of `raftlock tls cert create --node` do and client certificates do not.
func (s *Store) IsNode(cs *tls.ConnectionState) bool {
	return cs != nil && s.verifyNodePeer(*cs) == nil
}

// PeerServerConfig returns the configuration for connections other nodes open to this one
// (Raft): the peer must present a node certificate of the CA.
func (s *Store) PeerServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:       s.minVersion,
		GetCertificate:   s.getCertificate,
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: s.verifyNodePeer,
	}
}

// PeerClientConfig returns the configuration for connections this node opens to other nodes
// (Raft, forwarding to the leader, join, leave): it presents this node's certificate and
// requires a node certificate of the CA on the other side. Host names are not checked (see the
// package documentation).
func (s *Store) PeerClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:           s.minVersion,
		GetClientCertificate: s.getClientCertificate,
		// crypto/tls would verify against a pool fixed in the config; VerifyConnection checks the
		// chain against the current bundle instead, which is why its own check is skipped.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   s.verifyNodePeer,
	}
}
