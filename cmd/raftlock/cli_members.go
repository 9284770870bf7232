package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

// newMembersCmd lists the members, and groups the commands that change them.
func newMembersCmd() *cobra.Command {
	cmd := newMembersListCmd("members")
	cmd.Long = `List the members of the cluster (as "members list" does), or change them. Under --acl,
listing needs operator:read and the changes operator:write.`
	cmd.AddCommand(newMembersListCmd("list"), newMembersAddCmd(), newMembersPromoteCmd(), newMembersRemoveCmd())
	return cmd
}

func newMembersListCmd(use string) *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use:   use,
		Short: "List the members of the cluster: suffrage, leader, version and lag",
		Long: `List the members of the cluster. SUFFRAGE is voter or nonvoter (a non-voter replicates the
log but does not vote). LAG is how many log entries the member was behind the leader when the
leader last asked it (every 2 s), and VERSION what it reported; both are "-" in a stale read
from a follower, which does not ask.`,
		Example: `  raftlock members
  raftlock members list -o json`,
		Args: cobra.NoArgs,
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, _ []string) error {
		cl, err := c.Raw().Cluster(ctx, f.readOpts()...)
		if err != nil {
			return failure("reading the cluster", err)
		}
		if f.json() {
			return writeJSON(w, api.MembersResponse{Members: nonNil(cl.Members)})
		}
		return printMembers(w, cl.Members, "")
	})
}

// printMembers prints the member table, and the warning if any.
func printMembers(w io.Writer, members []api.Member, warning string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHTTP ADDR\tRAFT ADDR\tSUFFRAGE\tLEADER\tVERSION\tLAG")
	for _, m := range members {
		lag := "-"
		if m.Lag != nil {
			lag = strconv.FormatUint(*m.Lag, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", m.ID, orDash(m.HTTPAddr), m.RaftAddr, m.Suffrage, m.Leader, orDash(m.Version), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if warning != "" {
		_, err := fmt.Fprintf(w, "\nwarning: %s\n", warning)
		return err
	}
	return nil
}

// membersResult prints the answer of a membership change.
func membersResult(w io.Writer, f *inspectFlags, r *api.MembersResponse) error {
	if f.json() {
		r.Members = nonNil(r.Members)
		return writeJSON(w, r)
	}
	return printMembers(w, r.Members, r.Warning)
}

func newMembersAddCmd() *cobra.Command {
	var f inspectFlags
	var nonVoter bool
	var wait time.Duration
	cmd := inspectCmd(&cobra.Command{
		Use:   "add ID RAFT_ADDR HTTP_ADDR [--non-voter]",
		Short: "Add a member: a non-voter, promoted to a voter once it has caught up",
		Long: `Add a member with id ID, reachable for Raft at RAFT_ADDR and for the API at HTTP_ADDR
(host:port each). It is added as a non-voter, which replicates the log but does not vote, and
unless --non-voter is given it is then promoted to a voter once it has caught up with the
log (it answers /v1/ready and is within the leader's --trailing-logs): adding an empty or slow
node never counts towards the quorum before it can vote. Start the node first (with --join,
the node does all this itself). The command waits up to --wait for the promotion.

An even number of voters tolerates no more failures than one voter fewer, and every commit
waits for one more node: the answer warns about it.`,
		Example: `  raftlock members add n4 10.0.0.4:7101 10.0.0.4:7001
  raftlock members add n5 10.0.0.5:7101 10.0.0.5:7001 --non-voter`,
		Args: cobra.ExactArgs(3),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		r, err := c.Raw().AddMember(ctx, api.AddMemberRequest{ID: args[0], RaftAddr: args[1], HTTPAddr: args[2], Suffrage: api.SuffrageNonvoter})
		if err != nil {
			return failure("adding the member", err)
		}
		if !nonVoter {
			if r, err = promoteWhenCaughtUp(ctx, c, w, args[0], wait); err != nil {
				return err
			}
		}
		return membersResult(w, &f, r)
	})
	cmd.Flags().BoolVar(&nonVoter, "non-voter", false, "leave the member a non-voter (promote it later with members promote)")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the new member to catch up before promoting it")
	return cmd
}

func newMembersPromoteCmd() *cobra.Command {
	var f inspectFlags
	var wait time.Duration
	cmd := inspectCmd(&cobra.Command{
		Use:   "promote ID",
		Short: "Make a non-voter a voter once it has caught up with the log",
		Long: `Make the non-voter ID a voter. The leader promotes it only once it has caught up (it
answers /v1/ready and is within the leader's --trailing-logs of the log); the command asks
again until then, up to --wait.`,
		Example: `  raftlock members promote n5`,
		Args:    cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		r, err := promoteWhenCaughtUp(ctx, c, w, args[0], wait)
		if err != nil {
			return err
		}
		return membersResult(w, &f, r)
	})
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the member to catch up")
	return cmd
}

// promoteWhenCaughtUp asks for the promotion of id until the leader grants it or wait passes.
func promoteWhenCaughtUp(ctx context.Context, c *client.Client, w io.Writer, id string, wait time.Duration) (*api.MembersResponse, error) {
	deadline := time.Now().Add(wait)
	said := false
	for {
		r, err := c.Raw().PromoteMember(ctx, id)
		var ae *client.APIError
		switch {
		case err == nil:
			return r, nil
		case !errors.As(err, &ae) || ae.Code != api.CodeNotCaughtUp || time.Now().After(deadline):
			return nil, failure("promoting the member", err)
		case !said:
			fmt.Fprintf(w, "waiting for %s to catch up: %s\n", id, ae.Message)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, failure("promoting the member", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func newMembersRemoveCmd() *cobra.Command {
	var f inspectFlags
	return inspectCmd(&cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member from the cluster for good",
		Long: `Remove the member ID from the Raft configuration. A running node that is removed says so
in its log, reports itself not ready (/v1/health and /v1/ready answer 503 "removed") and
stops, unless it runs with --wait-when-removed. To add it again, start it with --join
(not its --initial-cluster command), with its data directory as it is or an empty one.`,
		Example: `  raftlock members remove n4`,
		Args:    cobra.ExactArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		r, err := c.Raw().RemoveMember(ctx, args[0])
		if err != nil {
			return failure("removing the member", err)
		}
		return membersResult(w, &f, r)
	})
}

// newLeaderCmd groups the commands about the leader.
func newLeaderCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "leader", Short: "Hand leadership over"}
	var f inspectFlags
	cmd.AddCommand(inspectCmd(&cobra.Command{
		Use:   "transfer [ID]",
		Short: "Ask the leader to hand leadership to member ID, or to the most up-to-date follower",
		Long: `Ask the leader to hand leadership over, to the voter ID or, without it, to the follower
most up to date, and wait until the new leader is elected. Under --acl it needs
operator:write. Use it before stopping the leader's machine for maintenance (SIGTERM does it
too) or to move the leader next to its clients.`,
		Example: `  raftlock leader transfer
  raftlock leader transfer n2`,
		Args: cobra.MaximumNArgs(1),
	}, &f, func(ctx context.Context, c *client.Client, w io.Writer, args []string) error {
		id := ""
		if len(args) == 1 {
			id = args[0]
		}
		r, err := c.Raw().TransferLeadership(ctx, id)
		if err != nil {
			return failure("transferring leadership", err)
		}
		if f.json() {
			return writeJSON(w, r)
		}
		_, err = fmt.Fprintf(w, "leader: %s\n", r.Leader)
		return err
	}))
	return cmd
}
