// Package backup reads and writes raftlock's backup file, what `raftlock snapshot save`
// writes and `snapshot restore` reads: one JSON header line, the state machine's snapshot, and
// one JSON trailer line with the SHA-256 of everything before it.
//
//	{"format":"raftlock-snapshot","version":1,"index":1234,"term":3,"size":5678,...}\n
//	<size bytes: the state machine's snapshot, which has its own magic, version and CRC>
//	{"sha256":"<64 hex digits>"}\n
//
// The header says where in the log the state was taken (index, term) and how long the body
// is, so a reader needs no lookahead; the trailer lets the whole file be checked offline.
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Format names the file format in every header.
const Format = "raftlock-snapshot"

// Version is the version of the file format this package writes and reads.
const Version = 1

// maxLine bounds the header and trailer lines.
const maxLine = 64 << 10

// Errors of reading a backup file.
var (
	ErrNotBackup    = errors.New("backup: not a raftlock snapshot file")
	ErrVersion      = errors.New("backup: unsupported snapshot file version")
	ErrTruncated    = errors.New("backup: snapshot file truncated")
	ErrChecksum     = errors.New("backup: snapshot file checksum mismatch")
	ErrTrailingData = errors.New("backup: data after the snapshot file's trailer")
)

// Header is the first line of a backup file.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Index and Term are those of the last log entry the state holds.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// Size is the length of the body, the state machine's snapshot, in bytes.
	Size int64 `json:"size"`
	// Node is the id of the node that wrote it, RaftlockVersion that node's version.
	Node            string `json:"node,omitempty"`
	RaftlockVersion string `json:"raftlock_version,omitempty"`
	// Created is when the state was captured.
	Created time.Time `json:"created"`
}

type trailer struct {
	SHA256 string `json:"sha256"`
}

// Write writes a backup file to w: h (Format and Version filled in), then h.Size bytes of
// body, then the trailer. It returns the file's SHA-256 (hex) and fails if body does not hold
// exactly h.Size bytes.
func Write(w io.Writer, h Header, body io.Reader) (string, error) {
	h.Format, h.Version = Format, Version
	line, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("backup: header: %w", err)
	}
	sum := sha256.New()
	out := io.MultiWriter(w, sum)
	if _, err := out.Write(append(line, '\n')); err != nil {
		return "", err
	}
	n, err := io.Copy(out, io.LimitReader(body, h.Size))
	if err != nil {
		return "", err
	}
	if n != h.Size {
		return "", fmt.Errorf("backup: body is %d bytes, header says %d", n, h.Size)
	}
	hexSum := hex.EncodeToString(sum.Sum(nil))
	t, _ := json.Marshal(trailer{SHA256: hexSum})
	if _, err := w.Write(append(t, '\n')); err != nil {
		return "", err
	}
	return hexSum, nil
}

// Reader reads a backup file: the header at once, then the body, then (Verify) the trailer.
type Reader struct {
	h       Header
	br      *bufio.Reader
	sum     hash.Hash
	counted countingReader
	body    io.Reader
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// NewReader reads and checks the header of the backup file r.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	h, line, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	sum.Write(line)
	rd := &Reader{h: h, br: br, sum: sum}
	rd.counted.r = io.LimitReader(br, h.Size)
	rd.body = io.TeeReader(&rd.counted, sum)
	return rd, nil
}

// CheckHeader reads and checks the header of the backup file r, and returns it with a reader
// of the whole file, header included, for a node that passes the file on to another.
func CheckHeader(r io.Reader) (Header, io.Reader, error) {
	br := bufio.NewReaderSize(r, 4<<10)
	h, line, err := readHeader(br)
	if err != nil {
		return Header{}, nil, err
	}
	return h, io.MultiReader(bytes.NewReader(line), br), nil
}

// readHeader reads the header line from br and checks it; it returns the line as read.
func readHeader(br *bufio.Reader) (Header, []byte, error) {
	line, err := readLine(br)
	if err != nil {
		return Header{}, nil, fmt.Errorf("%w: %w", ErrNotBackup, err)
	}
	var h Header
	if err := json.Unmarshal(line, &h); err != nil || h.Format != Format {
		return Header{}, nil, ErrNotBackup
	}
	if h.Version != Version {
		return Header{}, nil, fmt.Errorf("%w %d (this raftlock reads version %d)", ErrVersion, h.Version, Version)
	}
	if h.Size < 0 {
		return Header{}, nil, fmt.Errorf("%w: negative size", ErrNotBackup)
	}
	return h, line, nil
}

// readLine reads one line, its newline included, of at most maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, errors.New("line too long")
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, ErrTruncated
		default:
			return nil, err
		}
	}
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.h }

// Body returns the body: Header().Size bytes of state machine snapshot. Read it before Verify.
func (r *Reader) Body() io.Reader { return r.body }

// Verify reads what is left of the body, then the trailer, and checks the checksum and that
// nothing follows. A body shorter than the header says is ErrTruncated.
func (r *Reader) Verify() error {
	if _, err := io.Copy(io.Discard, r.body); err != nil {
		return err
	}
	if r.counted.n != r.h.Size {
		return fmt.Errorf("%w: body has %d of %d bytes", ErrTruncated, r.counted.n, r.h.Size)
	}
	line, err := readLine(r.br)
	if err != nil {
		return fmt.Errorf("%w: no trailer (%w)", ErrTruncated, err)
	}
	var t trailer
	if err := json.Unmarshal(line, &t); err != nil || len(t.SHA256) != 2*sha256.Size {
		return fmt.Errorf("%w: bad trailer", ErrChecksum)
	}
	if got := hex.EncodeToString(r.sum.Sum(nil)); got != t.SHA256 {
		return fmt.Errorf("%w: the file hashes to %s, its trailer says %s", ErrChecksum, got, t.SHA256)
	}
	if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
		return ErrTrailingData
	}
	return nil
}

// SHA256 returns the checksum of what was read so far (all of it after Verify), in hex.
func (r *Reader) SHA256() string { return hex.EncodeToString(r.sum.Sum(nil)) }

// Summary is what Inspect tells of a backup file.
type Summary struct {
	Header Header
	// SHA256 is the file's checksum (hex); ChecksumOK says it matched the trailer.
	SHA256     string
	ChecksumOK bool
	// State describes the snapshot in the body; valid only with ChecksumOK and a nil error.
	State fsm.SnapshotSummary
}

// Inspect reads a whole backup file and checks it: header, checksum, and the body as a node
// would restore it. The error says what is wrong; the summary holds what could be read.
func Inspect(r io.Reader) (Summary, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Header: rd.Header()}
	body, err := io.ReadAll(rd.Body())
	if err != nil {
		return s, err
	}
	if int64(len(body)) != s.Header.Size {
		return s, fmt.Errorf("%w: body has %d of %d bytes", ErrTruncated, len(body), s.Header.Size)
	}
	err = rd.Verify()
	s.SHA256 = rd.SHA256()
	if err != nil {
		return s, err
	}
	s.ChecksumOK = true
	if s.State, err = fsm.InspectSnapshot(bytes.NewReader(body)); err != nil {
		return s, fmt.Errorf("backup: the snapshot in the file does not read: %w", err)
	}
	return s, nil
}
