package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/spf13/cobra"
)

// newSnapshotCmd groups the backup commands.
func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, inspect and restore backups of the cluster's state",
		Long: `Save the cluster's whole state (sessions, locks and their queues, lock-delays, ACL tokens
and policies) into a file, check such a file offline, or replace a running cluster's state
with one. Under --acl, save and restore need the management policy: the file holds every
session id and every token's secret hash, so keep it as safe as the management token.`,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotInspectCmd(), newSnapshotRestoreCmd())
	return cmd
}

func newSnapshotSaveCmd() *cobra.Command {
	var f inspectFlags
	cmd := inspectCmd(&cobra.Command{
		Use:   "save FILE",
		Short: "Save a backup of the cluster's state into FILE",
		Long: `Save the leader's state, holding everything acknowledged before the command ran, into FILE
(mode 0600). The file is written beside FILE first and checked (checksum, and every record
as a node would restore it) before it takes FILE's name, so FILE is only ever a whole,
valid backup.`,
		Example: `  raftlock snapshot save /backups/raftlock-$(date +%F).snap`,
		Args:    cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		path := args[0]
		tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".part-*")
		if err != nil {
			return failure("creating the file", err)
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if err := c.Raw().SaveSnapshot(ctx, tmp, f.readOpts()...); err != nil {
			return snapshotFailure("saving the snapshot", err)
		}
		if err := tmp.Sync(); err != nil {
			return failure("writing the file", err)
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return failure("reading the file back", err)
		}
		sum, err := backup.Inspect(tmp)
		if err != nil {
			return failure("checking the saved snapshot", err)
		}
		if err := tmp.Close(); err != nil {
			return failure("writing the file", err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return failure("naming the file", err)
		}
		if f.json() {
			return writeJSON(w, inspectOutput(path, sum, true))
		}
		_, err = fmt.Fprintf(w, "saved %s: index %d, term %d, %d sessions, %d locks, %d bytes, sha256 %s\n",
			path, sum.Header.Index, sum.Header.Term, sum.State.Sessions, sum.State.Locks, sum.Header.Size, sum.SHA256)
		return err
	})
	return cmd
}

// snapshotInfo is the JSON output of snapshot inspect (and save).
type snapshotInfo struct {
	File            string    `json:"file"`
	ChecksumOK      bool      `json:"checksum_ok"`
	SHA256          string    `json:"sha256"`
	Index           uint64    `json:"index"`
	Term            uint64    `json:"term"`
	Created         time.Time `json:"created"`
	Node            string    `json:"node"`
	RaftlockVersion string    `json:"raftlock_version"`
	Format          int       `json:"format"`
	StateFormat     int       `json:"state_format"`
	Size            int64     `json:"size"`
	Sessions        int       `json:"sessions"`
	Locks           int       `json:"locks"`
	HeldLocks       int       `json:"held_locks"`
	Waiters         int       `json:"waiters"`
	DelayedLocks    int       `json:"delayed_locks"`
	ACLBootstrapped bool      `json:"acl_bootstrapped"`
	ACLTokens       int       `json:"acl_tokens"`
	ACLPolicies     int       `json:"acl_policies"`
	Features        []string  `json:"features"`
	MaxIndex        uint64    `json:"max_index"`
	Error           string    `json:"error,omitempty"`
}

func inspectOutput(path string, s backup.Summary, ok bool) snapshotInfo {
	out := snapshotInfo{File: path, ChecksumOK: s.ChecksumOK, SHA256: s.SHA256, Index: s.Header.Index, Term: s.Header.Term,
		Created: s.Header.Created, Node: s.Header.Node, RaftlockVersion: s.Header.RaftlockVersion, Format: s.Header.Version,
		Size: s.Header.Size, Features: []string{}}
	if ok {
		st := s.State
		out.StateFormat, out.Sessions, out.Locks, out.HeldLocks, out.Waiters, out.DelayedLocks = st.Version, st.Sessions, st.Locks, st.Held, st.Waiters, st.Delayed
		out.ACLBootstrapped, out.ACLTokens, out.ACLPolicies, out.MaxIndex = st.ACLBootstrapped, st.ACLTokens, st.ACLPolicies, st.MaxIndex
		out.Features = featureStrings(st.Features)
	}
	return out
}

func newSnapshotInspectCmd() *cobra.Command {
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a backup file and say what it holds (needs no cluster)",
		Long: `Read a backup file completely and check it as a node would before restoring it: its
header, its SHA-256 checksum, and every record of the state. Print where in the log it was
taken (index, term), who wrote it, and what it holds. Exits 1 if anything is wrong.`,
		Example: `  raftlock snapshot inspect /backups/raftlock-2026-12-05.snap
  raftlock snapshot inspect backup.snap -o json | jq .checksum_ok`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return failure("opening the file", err)
			}
			defer f.Close()
			sum, ierr := backup.Inspect(f)
			out := inspectOutput(args[0], sum, ierr == nil)
			if ierr != nil {
				out.Error = ierr.Error()
			}
			w := cmd.OutOrStdout()
			if o.json() {
				if err := writeJSON(w, out); err != nil {
					return err
				}
			} else if sum.Header.Format != "" {
				if err := printSnapshotInfo(w, out); err != nil {
					return err
				}
			}
			if ierr != nil {
				return failure("the file is not a valid backup", ierr)
			}
			return nil
		},
	}
	o.register(cmd)
	return cmd
}

func printSnapshotInfo(w io.Writer, s snapshotInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s\n", s.File)
	if s.Error != "" {
		// What is wrong comes first; what follows is only what could be read.
		fmt.Fprintf(tw, "DAMAGED:\t%s\n", s.Error)
	}
	switch {
	case s.ChecksumOK:
		fmt.Fprintf(tw, "checksum ok:\t%t (sha256 %s)\n", s.ChecksumOK, s.SHA256)
	case s.SHA256 != "":
		fmt.Fprintf(tw, "checksum ok:\tfalse: the file hashes to sha256 %s, not what its trailer says\n", s.SHA256)
	default:
		fmt.Fprintf(tw, "checksum ok:\tfalse: not checked, the file ends before its state does\n")
	}
	fmt.Fprintf(tw, "index:\t%d\n", s.Index)
	fmt.Fprintf(tw, "term:\t%d\n", s.Term)
	fmt.Fprintf(tw, "created:\t%s by %s (raftlock %s)\n", s.Created.Format(time.RFC3339), orDash(s.Node), orDash(s.RaftlockVersion))
	if s.Error == "" {
		fmt.Fprintf(tw, "format:\t%d (state format %d)\n", s.Format, s.StateFormat)
		fmt.Fprintf(tw, "size:\t%d bytes of state\n", s.Size)
		fmt.Fprintf(tw, "sessions:\t%d\n", s.Sessions)
		fmt.Fprintf(tw, "locks:\t%d (%d held, %d waiters, %d delayed)\n", s.Locks, s.HeldLocks, s.Waiters, s.DelayedLocks)
		fmt.Fprintf(tw, "acl:\tbootstrapped %t, %d tokens, %d policies\n", s.ACLBootstrapped, s.ACLTokens, s.ACLPolicies)
		fmt.Fprintf(tw, "features:\t%s\n", orDash(strings.Join(s.Features, ",")))
		fmt.Fprintf(tw, "highest index in it:\t%d\n", s.MaxIndex)
	} else {
		fmt.Fprintf(tw, "format:\t%d (the state in it was not read: the file is damaged)\n", s.Format)
		fmt.Fprintf(tw, "size:\t%d bytes of state, says its header\n", s.Size)
	}
	return tw.Flush()
}

func newSnapshotRestoreCmd() *cobra.Command {
	var f inspectFlags
	var gap uint64
	var acl string
	cmd := inspectCmd(&cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the cluster's whole state with a backup file",
		Long: `Replace the whole state of the running cluster with the backup FILE: sessions, locks,
queues, lock-delays, ACL tokens and policies become the backup's (the cluster's members and
enabled features stay). The file is checked here first and again by the leader; a bad file
changes nothing.

A restore ends every session, of the backup and of the cluster: their clients cannot be told
what it changed, so their next renewal fails and they stop believing any hold. Every lock
held in the backup or in the cluster before the restore stays unavailable, under a
lock-delay, for its holder's TTL plus its lock-delay from the restore (the longest a client
may still believe it holds it); every lock-delay in the backup runs again in full.

Fencing tokens keep growing: the restored state's log index is the highest index known
(the backup's, any token in it, and the cluster's own) plus --index-gap, so every token
issued afterwards is greater than any issued before, also by the cluster the backup came
from, after the backup, as long as it wrote fewer entries than the gap (a restore that would
leave fewer than 2^62 log indexes above that is refused). Under --acl the
command needs the management policy, and afterwards the tokens are the backup's. A backup
without ACL state (from a cluster that never ran --acl) into a cluster whose ACLs are
bootstrapped is refused unless --acl says keep (the cluster keeps its own tokens and
policies) or replace (the backup's: none, and anyone may bootstrap the ACLs again).`,
		Example: `  raftlock snapshot restore /backups/raftlock-2026-12-05.snap
  raftlock snapshot restore --acl keep /backups/from-a-cluster-without-acl.snap`,
		Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		if acl != "" && acl != "keep" && acl != "replace" {
			return &exitError{code: exitFailure, msg: fmt.Sprintf("--acl %q: want keep or replace", acl)}
		}
		file, err := os.Open(args[0])
		if err != nil {
			return failure("opening the file", err)
		}
		defer file.Close()
		if _, err := backup.Inspect(file); err != nil {
			return failure("the file is not a valid backup; nothing was changed", err)
		}
		r, err := c.Raw().RestoreSnapshot(ctx, file, client.RestoreOptions{IndexGap: &gap, ACL: acl})
		if err != nil {
			return snapshotFailure("restoring the snapshot", err)
		}
		if f.json() {
			return writeJSON(w, r)
		}
		_, err = fmt.Fprintf(w, "restored %s (index %d from %s, %s): %d sessions, %d locks, %d ACL tokens; the cluster's log is now at index %d\n",
			args[0], r.BackupIndex, orDash(r.BackupNode), r.BackupCreated, r.Sessions, r.Locks, r.ACLTokens, r.Index)
		return err
	})
	cmd.Flags().Uint64Var(&gap, "index-gap", cluster.DefaultIndexGap,
		"log entries the restored state's index goes past the highest index known (the fencing tokens the old cluster may have issued after the backup)")
	cmd.Flags().StringVar(&acl, "acl", "",
		"whose ACL state the cluster has afterwards: keep (its own) or replace (the backup's); needed to restore a backup without ACL state into a cluster whose ACLs are bootstrapped")
	return cmd
}

// snapshotFailure is failure for save and restore, with what to do when the leader has no
// backup API: a node of 0.1.0 answers 404 no such route (and a newer node forwards the request
// to the leader, whatever its version).
func snapshotFailure(what string, err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound && strings.HasPrefix(ae.Message, "no such route") {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %s: the leader runs a version without backups "+
			"(0.1.0; raftlock status shows each member's version). Hand leadership to an upgraded member "+
			"(raftlock leader transfer ID) and run this again, or save an upgraded member's own state with "+
			"snapshot save --stale --endpoints URL-of-that-member; to back up a cluster that is all 0.1.0, "+
			"copy the data directory of a stopped member (docs/operations.md, \"Backups of a cluster older than 0.2.0\")", what, errText(err))}
	}
	return failure(what, err)
}

func featureStrings(fs []fsm.Feature) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}
