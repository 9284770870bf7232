package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
)

// A membership change that Raft refuses as it stands is answered 409 membership_refused,
// saying why, and changes nothing: removing the only voter (before, 503 timeout "outcome
// unknown"), handing leadership to the leader itself (before, 500 internal).
func TestDefiniteMembershipRefusalsAre409(t *testing.T) {
	opts := devOptions(nil)
	opts.Nodes = 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := settle(d); err != nil {
		t.Fatal(err)
	}
	ep := d.Endpoints()[0]
	id := d.Agent(0).Node().ID()
	eb := apiError(t, do(t, http.MethodDelete, ep+"/v1/cluster/members/"+id, nil), http.StatusConflict, api.CodeMembershipRefused)
	if want := "only voter"; !strings.Contains(eb.Error.Message, want) {
		t.Fatalf("removing the only voter: %q does not say %q", eb.Error.Message, want)
	}
	apiError(t, do(t, http.MethodPost, ep+"/v1/cluster/leadership-transfer", api.TransferRequest{ID: id}), http.StatusConflict, api.CodeMembershipRefused)
	var cl api.Cluster
	ok(t, do(t, http.MethodGet, ep+"/v1/cluster", nil), http.StatusOK, &cl)
	if len(cl.Members) != 1 || cl.Leader != id {
		t.Fatalf("after the refusals: %+v", cl)
	}
}
