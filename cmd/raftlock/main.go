// Command raftlock is the raftlock server, its development cluster and its command-line client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "raftlock:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "raftlock:", err)
		os.Exit(1)
	}
}

// exitError asks main to exit with a given status after printing msg (if any).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "raftlock",
		Short:         "A distributed lock service with sessions, TTL leases and fencing tokens",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version prints what the version command prints.
	root.Version = version.Get().Version
	root.SetVersionTemplate(versionText())
	root.AddCommand(newVersionCmd())
	addServerCommands(root)
	addClientCommands(root)
	root.AddCommand(newBenchCmd())
	root.AddCommand(newTLSCmd())
	root.AddCommand(newSnapshotCmd(), newRecoverCmd(), newLeaderCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the raftlock version, the commit it was built from and its Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}

// versionText is the version, the commit and the Go version, one a line.
func versionText() string {
	v := version.Get()
	commit := v.Commit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("raftlock %s\ncommit %s\n%s\n", v.Version, commit, v.GoVersion)
}
