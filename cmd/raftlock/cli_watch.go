package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// watchLine is one line of `raftlock watch -o json`: a change of one lock, or a resync.
type watchLine struct {
	Event string     `json:"event"` // "change" or "resync"
	Index uint64     `json:"index"`
	Lock  *api.Lock  `json:"lock,omitempty"`
	Locks []api.Lock `json:"locks,omitempty"`
}

func newWatchCmd() *cobra.Command {
	var f inspectFlags
	var prefixes []string
	var from uint64
	var longPoll bool
	cmd := inspectCmd(&cobra.Command{
		Use:   "watch [--prefix P]... [--index N]",
		Short: "Print every change of the locks under a prefix as it happens",
		Long: `Print every change of the locks whose name starts with --prefix (all locks without it),
one line each, in the order the cluster applied them, until interrupted: first a resync
with the locks held or awaited now, then each change as the lock was right after it ("free"
once released). It goes on through leader changes and failed nodes without missing a
change; when the cluster can no longer tell every change since the last line (a node that
forgot them, or installed a snapshot), it prints a resync again: the locks it lists are all
there are, any other is free. It holds one streamed watch on one node (a follower serves it as
well as the leader), and asks by long poll a cluster that has no streams (or with --long-poll).
--prefix may be given several times: one stream follows them all, each change once.

--index N resumes a watch: it prints the changes after index N (the first number of the
last line a watch printed, or its "index" with -o json), starting with no resync, unless the
cluster no longer remembers every change since N, when it starts with a resync.

With -o json each line is one JSON object: {"event":"change","index":N,"lock":{...}} or
{"event":"resync","index":N,"locks":[...]}, the locks as GET /v1/locks/{name} shows them.`,
		Example: `  raftlock watch --prefix jobs/
  raftlock watch --prefix services/ -o json | jq -c 'select(.event=="change") | .lock'
  raftlock watch --prefix jobs/ --index 1234     # resume after the line of index 1234
  raftlock watch --prefix jobs/ --prefix elections/`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		opts := f.readOpts()
		if longPoll {
			opts = append(opts, client.LongPoll())
		}
		prefix := ""
		if len(prefixes) > 0 {
			prefix = prefixes[0]
		}
		events := c.WatchPrefixFrom(ctx, prefix, from, opts...)
		if len(prefixes) > 1 {
			if longPoll {
				return fmt.Errorf("--long-poll follows one --prefix only")
			}
			events = c.WatchPrefixes(ctx, prefixes, from, opts...)
			prefix = strings.Join(prefixes, `", "`)
		}
		for ev := range events {
			if ev.Err != nil {
				return failure("watching "+strconv.Quote(prefix), ev.Err)
			}
			if err := printWatchEvent(w, ev, prefix, f.json()); err != nil {
				return err
			}
		}
		return nil // interrupted
	})
	cmd.Flags().StringArrayVar(&prefixes, "prefix", nil, "watch the locks whose name starts with this (repeat it to watch several prefixes over one stream)")
	cmd.Flags().BoolVar(&longPoll, "long-poll", false, "watch by long poll (one request per answer) rather than a stream")
	cmd.Flags().Uint64Var(&from, "index", 0, "resume after this index: print the changes after it (0: start with a resync of the prefix as it stands)")
	return cmd
}

// printWatchEvent prints one event: a line of JSON, or lines of text (a resync's header and
// one line per lock it lists).
func printWatchEvent(w io.Writer, ev client.WatchEvent, prefix string, asJSON bool) error {
	if asJSON {
		line := watchLine{Event: "change", Index: ev.Index, Lock: &ev.Lock}
		if ev.Resync {
			line = watchLine{Event: "resync", Index: ev.Index, Locks: nonNil(ev.Locks)}
		}
		b, err := json.Marshal(line)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if !ev.Resync {
		_, err := fmt.Fprintln(w, lockLine(ev.Lock))
		return err
	}
	if _, err := fmt.Fprintf(w, "%d resync: %d locks held or awaited under %q; any other is free\n", ev.Index, len(ev.Locks), prefix); err != nil {
		return err
	}
	for _, l := range ev.Locks {
		if _, err := fmt.Fprintln(w, lockLine(l)); err != nil {
			return err
		}
	}
	return nil
}

// lockLine describes a lock's state on one line, its modify index first.
func lockLine(l api.Lock) string {
	if !l.Held {
		return fmt.Sprintf("%d %s free waiters %d", l.ModifyIndex, l.Name, l.Waiters)
	}
	return fmt.Sprintf("%d %s held by %s token %d waiters %d value %q", l.ModifyIndex, l.Name, orDash(l.Session), l.Token, l.Waiters, l.Value)
}
