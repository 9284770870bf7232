package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/raftlock/raftlock/cluster"
)

// errUnknownForward is the outcome of a forward that failed after it may have reached the leader.
var errUnknownForward = fmt.Errorf("%w: the connection to the leader failed mid-request", cluster.ErrUnknownOutcome)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
