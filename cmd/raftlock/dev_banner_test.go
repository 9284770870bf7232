package main

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/agent"
)

func TestDevTLSBannerGivesTheFilesToCurlAndTheCLI(t *testing.T) {
	files := agent.DevTLSFiles{Dir: "/d/tls", CAFile: "/d/tls/ca.pem", ClientCertFile: "/d/tls/client.pem", ClientKeyFile: "/d/tls/client-key.pem"}
	b := devTLSBanner([]string{"https://127.0.0.1:7001"}, files)
	for _, want := range []string{
		"export RAFTLOCK_CA_FILE=/d/tls/ca.pem RAFTLOCK_CERT_FILE=/d/tls/client.pem RAFTLOCK_KEY_FILE=/d/tls/client-key.pem",
		"curl -s --cacert $RAFTLOCK_CA_FILE --cert $RAFTLOCK_CERT_FILE --key $RAFTLOCK_KEY_FILE -XPOST https://127.0.0.1:7001/v1/sessions",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("the banner lacks %q:\n%s", want, b)
		}
	}
	if plain := devBanner([]string{"http://127.0.0.1:7001"}); !strings.Contains(plain, "  curl -s -XPOST http://127.0.0.1:7001/v1/sessions") {
		t.Errorf("the plain banner changed:\n%s", plain)
	}
}
