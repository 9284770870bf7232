package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

type electFlags struct {
	runFlags
	value string
}

func newElectCmd() *cobra.Command {
	var f electFlags
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME [flags] -- COMMAND [ARGS...]",
		Short: "Run a command only while this process is the elected leader",
		Long: `Campaign in the election NAME and run COMMAND only while this process leads.

Candidates are elected in the order they started campaigning. While another candidate leads,
raftlock waits. Once elected it runs COMMAND with RAFTLOCK_LOCK, RAFTLOCK_FENCING_TOKEN (the
fencing token of this leadership), RAFTLOCK_SESSION, RAFTLOCK_VALUE and RAFTLOCK_ENDPOINTS in
its environment, and RAFTLOCK_TOKEN as "raftlock lock --help" says; "raftlock lock-info NAME"
shows the leader's --value to everyone.

If the leadership is lost while COMMAND runs, COMMAND and its process group get SIGTERM, then
SIGKILL after --grace, and raftlock campaigns again with a new session, to run COMMAND anew
when re-elected. The leadership is given up --safety-margin (default TTL/5) before the server
could free it, counting from the last renewal sent, so that COMMAND has been stopped before
another candidate can be elected: --grace (default half the margin) may be at most
margin - TTL/1000 - max(margin/10, 100ms), which leaves room for clock-rate error and the kill
itself ("raftlock lock --help" explains the arithmetic). When COMMAND exits by itself,
raftlock resigns (the next candidate is elected) and exits with COMMAND's exit code.

Flags may come before or after NAME, up to "--".
` + exitCodesHelp(false),
		Example: `  # three machines run this; exactly one runs the scheduler at any time
  raftlock elect --value "$(hostname):8080" services/scheduler -- ./scheduler --port 8080

  # who leads?
  raftlock lock-info services/scheduler`,
		ValidArgsFunction: completeLockNames(&f.clientFlags, cobra.ShellCompDirectiveDefault),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := splitCommand(cmd, args)
			if errors.Is(err, errHelp) {
				return cmd.Help()
			}
			if err != nil {
				return err
			}
			return runElect(cmd, &f, name, argv)
		},
	}
	f.runFlags.register(cmd)
	host, _ := os.Hostname()
	cmd.Flags().StringVar(&f.value, "value", host, "value announced while leading, e.g. this instance's address")
	return cmd
}

func runElect(cmd *cobra.Command, f *electFlags, name string, argv []string) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	if err := f.validate(); err != nil {
		return err
	}
	if err := checkRunnable(argv[0]); err != nil {
		return err
	}
	c, err := f.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	for attempt := 0; ; attempt++ {
		sess, err := f.newSession(ctx, c, "elect", name, stderr)
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: exitFailure, msg: "interrupted while campaigning"}
			}
			if attempt == 0 {
				return failure("creating a session", err)
			}
			fmt.Fprintf(stderr, "raftlock: creating a session: %s; trying again\n", errText(err))
			if !pause(ctx, time.Second) {
				return &exitError{code: exitFailure, msg: "interrupted while campaigning"}
			}
			continue
		}
		res, again, err := leadOnce(ctx, f, sess, name, argv, cmd, stderr)
		closeSession(sess, stderr)
		if err != nil || !again {
			return err
		}
		if res.lost != nil {
			fmt.Fprintf(stderr, "raftlock: lost the leadership of %q: %s; the command was stopped (exit status %d); campaigning again\n",
				name, lossCause(sess, res.lost), res.code)
		}
	}
}

// leadOnce campaigns with one session and runs the command while leading. again reports
// that the leadership (or the session) was lost and raftlock should campaign anew.
func leadOnce(ctx context.Context, f *electFlags, sess *client.Session, name string, argv []string,
	cmd *cobra.Command, stderr io.Writer) (childResult, bool, error) {
	e := client.NewElection(sess, name)
	fmt.Fprintf(stderr, "raftlock: campaigning for %q as %q\n", name, f.value)
	if err := e.Campaign(ctx, f.value); err != nil {
		switch {
		case ctx.Err() != nil:
			return childResult{}, false, &exitError{code: exitFailure, msg: "interrupted while campaigning"}
		case sess.Err() != nil:
			fmt.Fprintf(stderr, "raftlock: session lost while campaigning: %s; campaigning again\n", errText(sess.Err()))
			return childResult{}, true, nil
		}
		return childResult{}, false, failure("campaigning", err)
	}
	fmt.Fprintf(stderr, "raftlock: elected leader of %q (token %d)\n", name, e.Token())
	env := append(childEnv(sess.Client(), aclToken(f.token), name, e.Token(), sess.ID()), "RAFTLOCK_VALUE="+f.value)
	res, err := runChild(childSpec{
		argv: argv, env: env, grace: f.graceOrDefault(),
		stdin: cmd.InOrStdin(), stdout: cmd.OutOrStdout(), stderr: stderr,
	}, e.Context())
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rerr := e.Resign(rctx); rerr != nil {
		fmt.Fprintf(stderr, "raftlock: warning: resigning: %s (the session is destroyed next)\n", errText(rerr))
	}
	switch {
	case err != nil:
		return res, false, err
	case res.lost != nil && ctx.Err() == nil:
		return res, true, nil
	case res.lost != nil:
		return res, false, &exitError{code: exitLockLost, msg: fmt.Sprintf(
			"lost the leadership of %q while the command ran: %s", name, lossCause(sess, res.lost))}
	case res.code != 0:
		return res, false, &exitError{code: res.code}
	}
	return res, false, nil
}

// pause waits for d or until ctx is done; it reports whether ctx is still alive.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
