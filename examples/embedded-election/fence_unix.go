//go:build unix

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"github.com/raftlock/raftlock/client"
)

// appendFenced is the shared file's side of fencing, what client.Fence is for a resource in
// one process: under an exclusive flock, it reads the token of the file's last line and
// appends line only if token is not lower. A leader that was paused past its lease, and wakes
// believing it still leads, carries an older token than its successor's lines and is refused.
func appendFenced(name string, token uint64, line string) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", name, err)
	}
	last, err := lastToken(f)
	if err != nil {
		return err
	}
	if token < last {
		return &client.StaleTokenError{Lock: election, Token: token, Highest: last}
	}
	_, err = f.WriteString(line + "\n")
	return err // closing the file releases the flock
}

// lastToken returns the token of the file's last line, or 0 for an empty file.
func lastToken(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	const tail = 256
	off := max(st.Size()-tail, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return 0, err
	}
	lines := bytes.Split(bytes.TrimSpace(buf), []byte("\n"))
	last := lines[len(lines)-1]
	i := bytes.Index(last, []byte("token="))
	if i < 0 {
		return 0, nil
	}
	field, _, _ := bytes.Cut(last[i+len("token="):], []byte(" "))
	return strconv.ParseUint(string(field), 10, 64)
}
