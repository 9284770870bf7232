package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Recorder collects ops from many goroutines, numbers them in completion order and optionally
// streams each as one JSON line as soon as it completes, so a crashed run still leaves its history.
type Recorder struct {
	start time.Time

	faultIDs atomic.Int64

	mu  sync.Mutex
	ops []Op
	out *bufio.Writer
	err error
}

// NewRecorder starts the run clock. If w is not nil every op is written to it as a JSON line.
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{start: time.Now()}
	if w != nil {
		r.out = bufio.NewWriter(w)
	}
	return r
}

// Now is the current time on the run's monotonic clock, in nanoseconds since the start.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// NewFaultID returns a fresh id to tie a fault's start and stop ops together.
func (r *Recorder) NewFaultID() int { return int(r.faultIDs.Add(1)) }

// Start is the wall-clock time the run clock started, for reports.
func (r *Recorder) Start() time.Time { return r.start }

// Add records a completed op: it assigns the ID, sets Complete to now if it is zero, and returns
// the recorded op.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op.Complete == 0 {
		op.Complete = r.Now()
	}
	if op.Complete < op.Invoke {
		op.Complete = op.Invoke
	}
	op.ID = len(r.ops)
	r.ops = append(r.ops, op)
	if r.out != nil && r.err == nil {
		r.err = writeLine(r.out, op)
		if r.err == nil {
			r.err = r.out.Flush()
		}
	}
	return op
}

// Ops returns a copy of the ops recorded so far, in completion order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Err reports the first error writing the JSON lines, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func writeLine(w io.Writer, op Op) error {
	b, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("history: encode op %d: %w", op.ID, err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("history: write op %d: %w", op.ID, err)
	}
	return nil
}

// WriteJSONL writes ops as JSON lines.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	for _, op := range ops {
		if err := writeLine(bw, op); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("history: flush: %w", err)
	}
	return nil
}

// ReadJSONL reads ops written as JSON lines.
func ReadJSONL(r io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(r)
	for {
		var op Op
		err := dec.Decode(&op)
		if err == io.EOF {
			return ops, nil
		}
		if err != nil {
			return ops, fmt.Errorf("history: decode op after %d ops: %w", len(ops), err)
		}
		ops = append(ops, op)
	}
}

// ReadFile reads a JSON lines history file.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return ReadJSONL(f)
}

// Interval is a fault window: from the start of its start op to the end of its stop op. A fault
// that never stopped lasts until End (the end of the history).
type Interval struct {
	Fault   string
	FaultID int
	Detail  string
	Start   int64
	End     int64
}

// Faults returns the fault intervals of a history, ordered by start.
func Faults(ops []Op) []Interval {
	byID := map[int]*Interval{}
	var end int64
	for _, op := range ops {
		if op.Complete > end {
			end = op.Complete
		}
	}
	for _, op := range ops {
		if op.Kind != Nemesis {
			continue
		}
		iv, ok := byID[op.FaultID]
		if !ok {
			iv = &Interval{Fault: op.Fault, FaultID: op.FaultID, Detail: op.Detail, Start: op.Invoke, End: -1}
			byID[op.FaultID] = iv
		}
		switch op.Action {
		case ActionStart:
			iv.Start = op.Invoke
			iv.Detail = op.Detail
		case ActionStop:
			iv.End = op.Complete
		case ActionEvent:
			if op.Invoke < iv.Start {
				iv.Start = op.Invoke
			}
			if op.Complete > iv.End {
				iv.End = op.Complete
			}
		}
	}
	out := make([]Interval, 0, len(byID))
	for _, iv := range byID {
		if iv.End < 0 {
			iv.End = end
		}
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].FaultID < out[j].FaultID
	})
	return out
}
