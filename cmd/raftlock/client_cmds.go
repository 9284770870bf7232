package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

// Exit codes of the client commands, documented in their help.
const (
	exitFailure    = 1   // raftlock itself failed: cluster unreachable, bad arguments, interrupted
	exitLockLost   = 3   // the lock (or leadership) was lost while the command ran
	exitLockHeld   = 75  // the lock is held by someone else (EX_TEMPFAIL: try again later)
	exitCannotExec = 126 // the command was found but could not be started
	exitNotFound   = 127 // the command was not found
)

// defaultEndpoints are those of the `raftlock dev` cluster.
const defaultEndpoints = "http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003"

// endpointsEnv names the environment variable read when --endpoints is not given.
const endpointsEnv = "RAFTLOCK_ENDPOINTS"

// tokenEnv names the environment variable read when --token is not given.
const tokenEnv = "RAFTLOCK_TOKEN"

// exitCodesHelp is appended to the help of the commands that run a child.
const exitCodesHelp = `
Exit codes:
  0-255  the command's own exit code, passed through (128+N if it was killed by signal N)
  1      raftlock failed before or around running the command (cluster unreachable,
         bad arguments, interrupted while waiting)
  3      the lock was lost while the command ran; the command got SIGTERM, then SIGKILL
         after the grace period
  75     the lock is held by another session and --wait was 0 or elapsed (EX_TEMPFAIL)
  126    the command could not be executed
  127    the command was not found`

// addClientCommands registers the client-side commands (lock, elect, inspection).
func addClientCommands(root *cobra.Command) {
	root.AddCommand(
		newLockCmd(),
		newElectCmd(),
		newLocksCmd(),
		newLockInfoCmd(),
		newSessionsCmd(),
		newMembersCmd(),
		newStatusCmd(),
		newACLCmd(),
	)
}

// clientFlags are the connection flags every client command has.
type clientFlags struct {
	endpoints string
	timeout   time.Duration
	retry     time.Duration
	token     string
}

// register adds the flags; retry is the default of --retry-timeout.
func (f *clientFlags) register(cmd *cobra.Command, retry time.Duration) {
	cmd.Flags().StringVar(&f.endpoints, "endpoints", "",
		"comma-separated HTTP endpoints of the cluster (default $"+endpointsEnv+", else "+defaultEndpoints+")")
	cmd.Flags().DurationVar(&f.timeout, "request-timeout", client.DefaultRequestTimeout,
		"timeout of one request to one endpoint")
	cmd.Flags().DurationVar(&f.retry, "retry-timeout", retry,
		"how long a request keeps trying other endpoints while the cluster is unreachable or has no leader")
	cmd.Flags().StringVar(&f.token, "token", "", "ACL token secret sent with every request (default $"+tokenEnv+")")
}

// tokenOptions returns the client option that sends --token, else $RAFTLOCK_TOKEN, if any.
func (f *clientFlags) tokenOptions() []client.Option {
	t := f.token
	if t == "" {
		t = os.Getenv(tokenEnv)
	}
	if t == "" {
		return nil
	}
	return []client.Option{client.WithToken(t)}
}

// endpointList resolves --endpoints, then $RAFTLOCK_ENDPOINTS, then the dev cluster.
func (f *clientFlags) endpointList() []string {
	v := f.endpoints
	if v == "" {
		v = os.Getenv(endpointsEnv)
	}
	if v == "" {
		v = defaultEndpoints
	}
	return strings.Split(v, ",")
}

// newClient returns a client configured by the flags.
func (f *clientFlags) newClient() (*client.Client, error) {
	c, err := client.New(f.endpointList(), append([]client.Option{client.WithRequestTimeout(f.timeout),
		client.WithRetryTimeout(f.retry)}, f.tokenOptions()...)...)
	if err != nil {
		return nil, &exitError{code: exitFailure, msg: err.Error()}
	}
	return c, nil
}

// outputFlag is the -o flag of the inspection commands.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

func (o *outputFlag) validate() error {
	if o.format != "table" && o.format != "json" {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("unknown output format %q (want table or json)", o.format)}
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// completeLockNames completes a lock name from the locks currently held or awaited; after
// the name it answers with directive (file names for a command's arguments, or nothing).
func completeLockNames(f *clientFlags, after cobra.ShellCompDirective) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, after
		}
		c, err := client.New(f.endpointList(), append([]client.Option{client.WithRetryTimeout(0)}, f.tokenOptions()...)...)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		locks, err := c.Locks(ctx, toComplete, client.Stale())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []cobra.Completion
		for _, l := range locks {
			names = append(names, l.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// failure turns an error of a client call into an exit with code 1 and a plain message.
func failure(what string, err error) error {
	return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: %s", what, strings.TrimPrefix(err.Error(), "raftlock: "))}
}
