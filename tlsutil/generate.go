package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"time"
)

// Default validity of generated certificates.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// CA is a certificate authority able to issue node and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed ECDSA P-256 CA named name, valid for validFor (0: the default).
func NewCA(name string, validFor time.Duration) (*CA, error) {
	if validFor <= 0 {
		validFor = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: generating the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"raftlock"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA certificate and its ECDSA key from PEM files (as written by WriteFiles).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: reading the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: reading the CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tlsutil: %s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: parsing %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("tlsutil: %s is not a CA certificate", certFile)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("tlsutil: %s holds no PEM key", keyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: parsing %s: %w", keyFile, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("tlsutil: %s is not the ECDSA key of %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertRequest describes a certificate to issue.
type CertRequest struct {
	// Name is the subject's common name: a node id, or a client's name.
	Name string
	// DNSNames and IPs are the names the holder is reached at (a node's advertised addresses).
	DNSNames []string
	IPs      []net.IP
	// Client makes a client-only certificate (client authentication); otherwise a node
	// certificate (server and client authentication), which is what nodes require of each other.
	Client bool
	// ValidFor is the validity; 0 means DefaultCertValidity (capped at the CA's own end).
	ValidFor time.Duration
}

// Issue creates a key and a certificate for req signed by ca, both PEM-encoded.
func (ca *CA) Issue(req CertRequest) (certPEM, keyPEM []byte, err error) {
	if req.Name == "" {
		return nil, nil, errors.New("tlsutil: a certificate needs a name")
	}
	if req.ValidFor <= 0 {
		req.ValidFor = DefaultCertValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: generating a key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	notAfter := now.Add(req.ValidFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if req.Client {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: req.Name, Organization: []string{"raftlock"}},
		NotBefore:      now.Add(-time.Minute),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usages,
		DNSNames:       req.DNSNames,
		IPAddresses:    req.IPs,
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: signing the certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// CertPEM returns the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA key, PEM-encoded (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKey(ca.Key) }

// WriteFiles writes a certificate (mode 0644) and its key (mode 0600). It refuses to replace
// existing files (an error wrapping fs.ErrExist) unless overwrite is set.
func WriteFiles(certFile string, certPEM []byte, keyFile string, keyPEM []byte, overwrite bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("tlsutil: %s: %w", f, fs.ErrExist)
			}
		}
	}
	// The key first: a certificate without its key is useless, a key without a certificate is
	// just overwritten next time.
	if err := writeFile(keyFile, keyPEM, flags, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, certPEM, flags, 0o644)
}

func writeFile(name string, data []byte, flags int, mode os.FileMode) error {
	f, err := os.OpenFile(name, flags, mode)
	if err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("tlsutil: writing %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tlsutil: writing %s: %w", name, err)
	}
	return nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tlsutil: serial number: %w", err)
	}
	return n, nil
}

// keyID is the subject key identifier: a hash of the public key.
func keyID(pub *ecdsa.PublicKey) []byte {
	b, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:20]
}
