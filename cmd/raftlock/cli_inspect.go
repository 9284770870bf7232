package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

// inspectRetry bounds how long an inspection command keeps trying other endpoints.
const inspectRetry = 5 * time.Second

type inspectFlags struct {
	clientFlags
	outputFlag
	stale bool
}

func (f *inspectFlags) register(cmd *cobra.Command) {
	f.clientFlags.register(cmd, inspectRetry)
	f.outputFlag.register(cmd)
	cmd.Flags().BoolVar(&f.stale, "stale", false, "answer from the node asked, without contacting the leader")
}

func (f *inspectFlags) readOpts() []client.ReadOption {
	if f.stale {
		return []client.ReadOption{client.Stale()}
	}
	return nil
}

// inspectCmd builds an inspection command around run, which gets a connected client.
func inspectCmd(cmd *cobra.Command, f *inspectFlags,
	run func(ctx context.Context, c *client.Client, w io.Writer, args []string) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := f.validate(); err != nil {
			return err
		}
		c, err := f.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		return run(cmd.Context(), c, cmd.OutOrStdout(), args)
	}
	f.register(cmd)
	return cmd
}

func newLocksCmd() *cobra.Command {
	cmd := locksListCmd()
	cmd.AddCommand(newLocksReleaseCmd())
	return cmd
}

// newLocksReleaseCmd is an operator's forced release of one grant of a lock.
func newLocksReleaseCmd() *cobra.Command {
	var f clientFlags
	var o outputFlag
	var force bool
	var token uint64
	cmd := &cobra.Command{
		Use:   "release --force NAME [--fencing-token T]",
		Short: "Take a lock from a stuck holder (an operator's forced release)",
		Long: `Take a lock from its holder, whoever that is: an operator's forced release
(POST /v1/locks/{name}/release with "force": true).

It ends the session that holds the grant, as "raftlock sessions destroy" does, and holds back
every lock that session held for the session's TTL plus its lock-delay: the holder's client
stops believing it holds them (its lease runs out, or its next renewal is refused) before
anyone else is granted one, and the next holder's fencing token is higher than the old one.

--fencing-token names the grant (every grant of a semaphore or of a shared lock has its own token);
without it the lock must have exactly one holder. Under --acl it needs operator:write; the
audit log records it.`,
		Example: `  raftlock locks release --force jobs/nightly
  raftlock locks release --force workers --fencing-token 1234`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if !force {
				return &exitError{code: exitFailure, msg: "locks release takes a lock from its holder, whoever that is: say so with --force " +
					"(a holder releases its own lock through its client, or ends with its session)"}
			}
			c, err := f.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, name := cmd.Context(), args[0]
			if token == 0 {
				l, err := c.GetLock(ctx, name)
				if err != nil {
					return failure("reading lock", err)
				}
				grants := lockGrants(*l)
				switch {
				case !l.Held:
					return &exitError{code: exitFailure, msg: fmt.Sprintf("lock %q is not held", name)}
				case len(grants) > 1:
					return &exitError{code: exitFailure, msg: fmt.Sprintf("lock %q has %d holders: name one with --fencing-token (see raftlock lock-info %s)", name, len(grants), name)}
				}
				token = grants[0].Token
			}
			res, err := c.Raw().ForceRelease(ctx, name, token)
			if err != nil {
				return failure("releasing lock "+name, err)
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released lock %s (token %d): ended session %s; held back for %s: %s\n",
				name, token, orDash(res.EndedSession), orDash(res.AvailableIn), orDash(strings.Join(res.HeldBack, ",")))
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "take the grant from its holder (required)")
	cmd.Flags().Uint64Var(&token, "fencing-token", 0, "the fencing token of the grant to take (default: the lock's only holder's)")
	f.register(cmd, inspectRetry)
	o.register(cmd)
	return cmd
}

func locksListCmd() *cobra.Command {
	var f inspectFlags
	var prefix string
	cmd := inspectCmd(&cobra.Command{
		Use:   "locks [--prefix P]",
		Short: "List held or awaited locks",
		Example: `  raftlock locks
  raftlock locks --prefix jobs/ -o json`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		locks, err := c.Raw().Locks(ctx, prefix, f.readOpts()...)
		if err != nil {
			return failure("listing locks", err)
		}
		if f.json() {
			return writeJSON(w, api.LockList{Locks: nonNil(locks)})
		}
		return writeLocksTable(w, locks, time.Now())
	})
	cmd.Flags().StringVar(&prefix, "prefix", "", "only locks whose name starts with this")
	return cmd
}

// writeLocksTable prints one row per grant: a semaphore's permits and a lock's shared holds
// each get their own, with the lock's limit, the grant's mode and how long it has been held
// (AGE); a free lock (awaited or delayed) gets one row without a holder. LONGEST WAIT is how
// long the first of the queue has waited.
func writeLocksTable(w io.Writer, locks []api.Lock, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHELD\tSESSION\tTOKEN\tMODE\tLIMIT\tAGE\tWAITERS\tLONGEST WAIT\tVALUE\tMODIFY INDEX")
	for _, l := range locks {
		limit := "-"
		if l.Limit > 0 {
			limit = strconv.Itoa(l.Limit)
		}
		longest := "-"
		if len(l.Queue) > 0 {
			longest = ageText(l.Queue[0].Since, now)
		}
		for _, h := range lockGrants(l) {
			fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", l.Name, l.Held, orDash(h.Session),
				tokenText(h.Token), orDash(h.Mode), limit, ageText(h.Since, now), l.Waiters, longest, orDash(h.Value), l.ModifyIndex)
		}
	}
	return tw.Flush()
}

// ageText is how long ago since (an API time, RFC 3339) was, to the second; "-" when unknown.
func ageText(since string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, since)
	if since == "" || err != nil {
		return "-"
	}
	return max(now.Sub(t), 0).Round(time.Second).String()
}

// sinceText is a time of the API with its age: "2026-12-06T23:04:05Z (5m2s ago)", or "-".
func sinceText(since string, now time.Time) string {
	if since == "" {
		return "-"
	}
	return since + " (" + ageText(since, now) + " ago)"
}

// lockGrants returns a lock's grants, oldest first: its holders when the answer lists them (a
// semaphore, a lock held shared), else the one exclusive grant its top-level fields describe,
// or for a free lock one grant with nothing in it.
func lockGrants(l api.Lock) []api.LockHolder {
	if len(l.Holders) > 0 {
		return l.Holders
	}
	if !l.Held {
		return []api.LockHolder{{}}
	}
	return []api.LockHolder{{Session: l.Session, Token: l.Token, Value: l.Value, Mode: api.ModeExclusive, Since: l.Since}}
}

func newLockInfoCmd() *cobra.Command {
	var f inspectFlags
	cmd := inspectCmd(&cobra.Command{
		Use:   "lock-info NAME",
		Short: "Show a lock's holder, token, value, since when it is held, and its queue in order (and a semaphore's or shared lock's holders)",
		Example: `  raftlock lock-info jobs/nightly
  raftlock lock-info services/scheduler -o json | jq -r .value   # the elected leader's value`,
		Args: cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		l, err := c.GetLock(ctx, args[0], f.readOpts()...)
		if err != nil {
			return failure("reading lock", err)
		}
		if f.json() {
			return writeJSON(w, l)
		}
		holder := "-"
		if l.Held {
			holder = l.Session
			if s, err := c.Raw().GetSession(ctx, l.Session, f.readOpts()...); err == nil && s.Name != "" {
				holder += " (" + s.Name + ")"
			}
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "name:\t%s\n", l.Name)
		fmt.Fprintf(tw, "held:\t%t\n", l.Held)
		fmt.Fprintf(tw, "holder:\t%s\n", holder)
		fmt.Fprintf(tw, "token:\t%s\n", tokenText(l.Token))
		fmt.Fprintf(tw, "value:\t%s\n", orDash(l.Value))
		now := time.Now()
		fmt.Fprintf(tw, "since:\t%s\n", sinceText(l.Since, now))
		fmt.Fprintf(tw, "waiters:\t%d\n", l.Waiters)
		fmt.Fprintf(tw, "modify index:\t%d\n", l.ModifyIndex)
		if l.Limit > 0 {
			fmt.Fprintf(tw, "limit:\t%d\n", l.Limit)
		}
		for _, h := range l.Holders { // a semaphore's, or shared holds
			fmt.Fprintf(tw, "holders:\t%s token %s %s value %s since %s\n", orDash(h.Session), tokenText(h.Token), orDash(h.Mode),
				orDash(h.Value), sinceText(h.Since, now))
		}
		for i, q := range l.Queue { // in order: the first is granted first
			who := orDash(q.Session)
			if q.Name != "" {
				who += " (" + q.Name + ")"
			}
			fmt.Fprintf(tw, "queue:\t%d. %s %s waiting since %s\n", i+1, who, orDash(q.Mode), sinceText(q.Since, now))
		}
		return tw.Flush()
	})
	cmd.ValidArgsFunction = completeLockNames(&f.clientFlags, cobra.ShellCompDirectiveNoFileComp)
	return cmd
}

func newSessionsCmd() *cobra.Command {
	var f inspectFlags
	cmd := sessionsListCmd(&f)
	cmd.AddCommand(newSessionsDestroyCmd())
	return cmd
}

// newSessionsDestroyCmd ends a session at once, as its owner or an operator would end a stuck
// holder's: its locks go to their next waiters without lock-delay, and its waits end.
func newSessionsDestroyCmd() *cobra.Command {
	var f clientFlags
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "destroy ID",
		Short: "End a session now, releasing every lock it holds (no lock-delay) and ending its waits",
		Long: `End a session now (DELETE /v1/sessions/{id}). Its locks go to their next waiters at once,
without lock-delay; the holder's client learns it at its next renewal, so until then it may
still act on a lock it no longer holds: resources that check fencing tokens
refuse it once the next holder's token is checked. To take one lock from a stuck holder so
that nobody else is granted it before the holder's client has stopped, use
"raftlock locks release --force" instead.

Under --acl it needs the token that created the session, or operator:write; the audit log
records it.`,
		Example: `  raftlock sessions destroy 3f2c9a0d4b1e4c8f9a7d6e5f4c3b2a19`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			c, err := f.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.Raw().DestroySession(cmd.Context(), args[0])
			if err != nil {
				return failure("destroying session "+args[0], err)
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), api.DestroyResponse{Released: nonNil(res.Released)})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "destroyed session %s; released: %s\n", args[0], orDash(strings.Join(res.Released, ",")))
			return nil
		},
	}
	f.register(cmd, inspectRetry)
	o.register(cmd)
	return cmd
}

func sessionsListCmd(f *inspectFlags) *cobra.Command {
	var cmd *cobra.Command
	cmd = inspectCmd(&cobra.Command{
		Use:   "sessions",
		Short: "List sessions, the locks they hold and the locks they wait for (and for how long); destroy one",
		Example: `  raftlock sessions -o json
  raftlock sessions destroy ID`,
		Args: cobra.NoArgs,
	}, f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		sessions, err := c.Raw().Sessions(ctx, f.readOpts()...)
		if err != nil {
			return failure("listing sessions", err)
		}
		warnOwnSessionsOnly(ctx, c, cmd.ErrOrStderr())
		if f.json() {
			return writeJSON(w, api.SessionList{Sessions: nonNil(sessions)})
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tTTL\tLOCK DELAY\tCREATED INDEX\tLOCKS\tWAITING")
		now := time.Now()
		for _, s := range sessions {
			waiting := make([]string, len(s.Waiting))
			for i, wt := range s.Waiting {
				waiting[i] = wt.Lock + " (" + ageText(wt.Since, now) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, orDash(s.Name), s.TTL, orDash(s.LockDelay),
				s.CreatedIndex, orDash(strings.Join(s.Locks, ",")), orDash(strings.Join(waiting, ",")))
		}
		return tw.Flush()
	})
	return cmd
}

// warnOwnSessionsOnly says on stderr when the list of sessions is only the caller's own: under
// --acl a token without operator:read sees no other, and an empty or short table would
// otherwise read as "no sessions". The cluster's state needs operator:read too, so a 403
// asking for it tells.
func warnOwnSessionsOnly(ctx context.Context, c *client.Client, stderr io.Writer) {
	_, err := c.Raw().Cluster(ctx, client.Stale())
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Code == api.CodeForbidden {
		fmt.Fprintln(stderr, "raftlock: only this token's own sessions are listed: listing every session needs operator:read")
	}
}

// memberStatus is one member's line of `raftlock status`.
type memberStatus struct {
	api.Member
	Health       string `json:"health"` // ready, not ready, unreachable, unknown
	AppliedIndex uint64 `json:"applied_index"`
	Error        string `json:"error,omitempty"`
}

// statusOutput is the JSON output of `raftlock status`.
type statusOutput struct {
	Version     string         `json:"version"`
	Leader      string         `json:"leader"`
	Term        uint64         `json:"term"`
	CommitIndex uint64         `json:"commit_index"`
	Features    []string       `json:"features"`
	Members     []memberStatus `json:"members"`
}

func newStatusCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use:   "status",
		Short: "Show the leader, term, indexes and the health of each member",
		Long: `Show the cluster as the leader sees it (leader, term, commit index), then ask every
member directly for its health, readiness, applied index and version.`,
		Example: `  raftlock status
  raftlock status -o json`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		cl, err := c.Raw().Cluster(ctx, f.readOpts()...)
		if err != nil {
			return failure("reading the cluster", err)
		}
		out := statusOutput{Version: cl.Version, Leader: cl.Leader, Term: cl.Term,
			CommitIndex: cl.CommitIndex, Features: nonNil(cl.Features), Members: probeMembers(ctx, c, cl.Members)}
		if f.json() {
			return writeJSON(w, out)
		}
		fmt.Fprintf(w, "version: %s  leader: %s  term: %d  commit index: %d\nfeatures: %s\n\n",
			out.Version, orDash(out.Leader), out.Term, out.CommitIndex, orDash(strings.Join(out.Features, ",")))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tHTTP ADDR\tRAFT ADDR\tSUFFRAGE\tLEADER\tHEALTH\tAPPLIED INDEX\tVERSION")
		for _, m := range out.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%d\t%s\n", m.ID, m.HTTPAddr, m.RaftAddr, m.Suffrage,
				m.Leader, m.Health, m.AppliedIndex, orDash(m.Version))
		}
		return tw.Flush()
	})
}

// probeMembers asks each member, in parallel, for its readiness and applied index.
func probeMembers(ctx context.Context, c *client.Client, members []api.Member) []memberStatus {
	scheme := "http://"
	if eps := c.Endpoints(); len(eps) > 0 && strings.HasPrefix(eps[0], "https://") {
		scheme = "https://"
	}
	out := make([]memberStatus, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		wg.Add(1)
		go func(ms *memberStatus) {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if ms.HTTPAddr == "" {
				ms.Health, ms.Error = "unknown", "HTTP address not published yet"
				return
			}
			ep := scheme + ms.HTTPAddr
			if err := c.Raw().Health(pctx, ep); err != nil {
				ms.Health, ms.Error = "unreachable", err.Error()
				if ae := (*client.APIError)(nil); errors.As(err, &ae) && ae.Code == api.CodeRemoved {
					ms.Health = "removed"
				}
				return
			}
			ms.Health = "ready"
			if err := c.Raw().Ready(pctx, ep); err != nil {
				ms.Health = "not ready"
			}
			// The member's own word: its applied index, and its version, which the leader's
			// view lacks while the leader runs a version that does not ask members (0.1.0).
			if cl, err := c.Raw().Cluster(pctx, client.AtEndpoint(ep), client.Stale()); err == nil {
				ms.AppliedIndex = cl.AppliedIndex
				if cl.Version != "" {
					ms.Version = cl.Version
				}
			}
		}(&out[i])
	}
	wg.Wait()
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tokenText(t uint64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatUint(t, 10)
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
