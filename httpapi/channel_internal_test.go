package httpapi

import (
	"net/http"
	"reflect"
	"testing"
)

// A forwarded request and its answer come through the channel's encoding unchanged, and a
// payload cut short or with bytes after its end is refused, never decoded into something else.
func TestChannelPayloadEncoding(t *testing.T) {
	h := http.Header{"X-Raftlock-Token": {"secret"}, "Content-Type": {"application/json"}, "X-Two": {"a", "b"}}
	body := []byte(`{"session":"s","wait":"1s"}`)
	req := encodeChannelRequest(http.MethodPost, "/v1/locks/a%2Fb/acquire?x=1", h, body)
	method, uri, gotH, gotBody, err := decodeChannelRequest(req)
	if err != nil || method != http.MethodPost || uri != "/v1/locks/a%2Fb/acquire?x=1" || !reflect.DeepEqual(gotH, h) || string(gotBody) != string(body) {
		t.Fatalf("request: %q %q %v %q %v", method, uri, gotH, gotBody, err)
	}
	ans := encodeChannelAnswer(http.StatusConflict, h, body)
	status, gotH, gotBody, err := decodeChannelAnswer(ans)
	if err != nil || status != http.StatusConflict || !reflect.DeepEqual(gotH, h) || string(gotBody) != string(body) {
		t.Fatalf("answer: %d %v %q %v", status, gotH, gotBody, err)
	}
	for i := range len(req) {
		if _, _, _, _, err := decodeChannelRequest(req[:i]); err == nil {
			t.Fatalf("a request cut to %d of %d bytes decoded", i, len(req))
		}
	}
	for i := range len(ans) {
		if _, _, _, err := decodeChannelAnswer(ans[:i]); err == nil {
			t.Fatalf("an answer cut to %d of %d bytes decoded", i, len(ans))
		}
	}
	if _, _, _, _, err := decodeChannelRequest(append(req, 0)); err == nil {
		t.Fatal("a request with a byte after its end decoded")
	}
	if _, _, _, err := decodeChannelAnswer(encodeChannelAnswer(0, nil, nil)); err == nil {
		t.Fatal("an answer without a status decoded")
	}
}
