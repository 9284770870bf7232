package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/config"
)

func newRecoverCmd() *cobra.Command {
	var dataDir, members, logLevel string
	var gap uint64
	var waitLock time.Duration
	cmd := &cobra.Command{
		Use:   "recover --data-dir DIR --members ID=RAFT_ADDR[,...]",
		Short: "Rewrite a stopped node's membership, to restart a cluster that lost its majority",
		Long: `When a cluster has lost its majority for good (two of three machines are gone), the
survivors cannot elect a leader. Stop every surviving node, pick the one whose data is most
recent (highest applied index in raftlock status before the loss, or simply the one that
was the leader), and run recover on its data directory with the members the new cluster
starts with (usually that node alone, with its own id and Raft address). Then start that node
as before: it elects itself and serves the state it had. Add new nodes with empty data
directories and --join; do not restart the old nodes with their old data.

This uses hashicorp/raft's RecoverCluster: every entry in the node's log counts as
committed, including any the old majority had not acknowledged, and entries the old
majority committed but this node never received are lost. So that fencing tokens still only
grow, the recovered state's log index is the last index the node held plus --index-gap: the
old cluster must have gone on for fewer entries than that without this node. A gap that would
leave fewer than 2^62 log indexes above the recovered one (or wrap past the top of uint64) is
refused before anything changes.

An agent (or another recover) that still holds the data directory, such as one stopped with
SIGTERM a moment ago that is still shutting down (without a quorum it can take seconds), is
waited for up to --wait-lock; past it recover refuses, naming the process.`,
		Example: `  raftlock recover --data-dir /var/lib/raftlock/n1 --members n1=10.0.0.1:7101`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return &exitError{code: exitFailure, msg: "--data-dir is required"}
			}
			ms, err := config.ParseMembers("members", members)
			if err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			if len(ms) == 0 {
				return &exitError{code: exitFailure, msg: "--members is required: id=raft-addr,... of the new cluster"}
			}
			if _, err := os.Stat(dataDir); err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			log := newLogger(cmd.ErrOrStderr(), logLevel, "text")
			// An agent stopped just before (SIGTERM) may take seconds to exit, more without a
			// quorum: wait for it, a bounded time, rather than refuse at once.
			wctx, cancel := context.WithTimeout(cmd.Context(), waitLock)
			err = cluster.AwaitDataDir(wctx, dataDir, func(holder string) {
				fmt.Fprintf(cmd.ErrOrStderr(), "waiting up to %s for %s, which holds %s (an agent still stopping?), to exit\n",
					waitLock, holder, dataDir)
			})
			cancel()
			if err != nil {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%v (waited %s, --wait-lock)", err, waitLock)}
			}
			res, err := cluster.Recover(dataDir, ms, gap, log)
			if err != nil {
				return &exitError{code: exitFailure, msg: err.Error()}
			}
			var names []string
			for _, s := range res.Members {
				names = append(names, fmt.Sprintf("%s=%s", s.ID, s.Address))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(),
				"recovered %s: members %s; %d sessions, %d locks; the log was at index %d and goes on from %d\n"+
					"Start the node as before; add nodes with empty data dirs and --join.\n",
				dataDir, strings.Join(names, ","), res.Stats.Sessions, res.Stats.Locks, res.LastIndex, res.Index)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped node's data directory (required)")
	cmd.Flags().StringVar(&members, "members", "", "the new cluster's voters as id=raft-addr,... (required)")
	cmd.Flags().Uint64Var(&gap, "index-gap", cluster.DefaultIndexGap,
		"log entries the recovered state's index goes past the node's last (entries the lost majority may have committed without it)")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level: trace, debug, info, warn or error")
	cmd.Flags().DurationVar(&waitLock, "wait-lock", 30*time.Second,
		"how long to wait for the process that holds the data dir (an agent still stopping) to exit")
	return cmd
}
