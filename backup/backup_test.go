package backup_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
)

// stateBytes returns the snapshot of a small state: one session holding one lock.
func stateBytes(t *testing.T) []byte {
	t.Helper()
	f := fsm.New(nil)
	id := fsm.SessionID{1}
	f.ApplyCommand(1, fsm.Command{Type: fsm.TypeCreateSession, Session: id, TTL: time.Minute})
	f.ApplyCommand(2, fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: "a"})
	var buf bytes.Buffer
	if _, err := f.Capture().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t *testing.T, body []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	h := backup.Header{Index: 2, Term: 1, Size: int64(len(body)), Node: "n1", Created: time.Unix(1, 0).UTC()}
	if _, err := backup.Write(&out, h, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestInspectReadsWhatWriteWrote(t *testing.T) {
	file := writeFile(t, stateBytes(t))
	sum, err := backup.Inspect(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.ChecksumOK || sum.Header.Index != 2 || sum.Header.Node != "n1" || sum.State.Sessions != 1 ||
		sum.State.Held != 1 || sum.State.MaxIndex != 2 || len(sum.SHA256) != 64 {
		t.Fatalf("summary %+v", sum)
	}
}

// Every kind of damage is found: a changed byte anywhere (header, body or checksum), a file
// cut short, data after the end, something else entirely, and a body whose snapshot does not
// read though the file's checksum matches.
func TestInspectFindsDamage(t *testing.T) {
	good := writeFile(t, stateBytes(t))
	nl := bytes.IndexByte(good, '\n')
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	headerEdited := bytes.Replace(good, []byte(`"index":2`), []byte(`"index":3`), 1)
	cases := map[string]struct {
		file []byte
		want error
	}{
		"header edited":    {headerEdited, backup.ErrChecksum},
		"body byte":        {flip(nl + 10), backup.ErrChecksum},
		"checksum byte":    {flip(len(good) - 5), backup.ErrChecksum},
		"cut in the body":  {good[:nl+20], backup.ErrTruncated},
		"no trailer":       {good[:len(good)-80], backup.ErrTruncated},
		"data after":       {append(bytes.Clone(good), 'x'), backup.ErrTrailingData},
		"not a backup":     {[]byte("RLSNAP...\n"), backup.ErrNotBackup},
		"empty":            {nil, backup.ErrNotBackup},
		"newer version":    {bytes.Replace(good, []byte(`"version":1`), []byte(`"version":2`), 1), backup.ErrVersion},
		"body not a state": {writeFile(t, []byte("not a snapshot at all")), fsm.ErrSnapshotMagic},
	}
	for name, c := range cases {
		_, err := backup.Inspect(bytes.NewReader(c.file))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// Write refuses a body that is not as long as the header says.
func TestWriteChecksTheBodysLength(t *testing.T) {
	var out bytes.Buffer
	_, err := backup.Write(&out, backup.Header{Size: 10}, strings.NewReader("short"))
	if err == nil {
		t.Fatal("a short body was written")
	}
}
