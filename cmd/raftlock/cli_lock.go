package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/spf13/cobra"
)

// runFlags are the flags shared by lock and elect.
type runFlags struct {
	clientFlags
	ttl       time.Duration
	margin    time.Duration
	grace     time.Duration
	lockDelay time.Duration
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.clientFlags.register(cmd, client.DefaultRetryTimeout)
	cmd.Flags().DurationVar(&f.ttl, "ttl", client.DefaultSessionTTL,
		"session TTL: how long the lock outlives this process if it dies (2s to 24h)")
	cmd.Flags().DurationVar(&f.margin, "safety-margin", 0,
		"how long before the server could free the lock raftlock gives it up and stops COMMAND, counted from the last renewal it sent; it covers --grace and clock-rate error (default TTL/5, must be less than TTL/2)")
	cmd.Flags().DurationVar(&f.grace, "grace", 0,
		"time between SIGTERM and SIGKILL when the lock is lost (default half the safety margin); at most the margin less TTL/1000 (clock-rate error) and a tenth of the margin, at least 100ms (the kill itself), since the server may hand the lock on once the margin has run out")
	cmd.Flags().DurationVar(&f.lockDelay, "lock-delay", 0,
		"if this process dies or loses the cluster, keep the lock from everyone else this long after the TTL runs out, for commands whose writes cannot be fenced (0 to 60s)")
	// Parsing stops at NAME; splitCommand parses the flags that follow it.
	cmd.Flags().SetInterspersed(false)
}

// validate checks the timing flags before anything is asked of the cluster.
func (f *runFlags) validate() error {
	if f.ttl <= 0 {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("--ttl %s: the TTL must be positive", f.ttl)}
	}
	if f.margin < 0 || f.margin >= f.ttl/2 {
		return &exitError{code: exitFailure, msg: fmt.Sprintf(
			"--safety-margin %s must be positive and less than half the TTL (%s with --ttl %s): the lock is given up "+
				"TTL minus the margin after the last renewal was sent, which must leave time for the renewals, "+
				"sent every TTL/3, and their retries", f.margin, f.ttl/2, f.ttl)}
	}
	if f.grace < 0 {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("--grace %s must not be negative", f.grace)}
	}
	margin := f.marginOrDefault()
	most := maxGrace(f.ttl, margin)
	if most <= 0 {
		return &exitError{code: exitFailure, msg: fmt.Sprintf(
			"--safety-margin %s leaves no time for COMMAND to stop: %s", margin, graceArithmetic(f.ttl, margin))}
	}
	if f.grace > most {
		return &exitError{code: exitFailure, msg: fmt.Sprintf(
			"--grace %s does not fit in the safety margin %s: COMMAND must have stopped before the server may hand "+
				"the lock to someone else, and %s; use a shorter --grace or a larger --safety-margin (less than TTL/2)",
			f.grace, margin, graceArithmetic(f.ttl, margin))}
	}
	return nil
}

// killHeadroom is what the safety margin keeps, besides the clocks' rate error, for the kill
// itself: the local deadline firing late (scheduling, a GC pause), the signals' delivery and
// COMMAND's processes ending after SIGKILL. A tenth of the margin, at least 100ms.
func killHeadroom(margin time.Duration) time.Duration { return max(margin/10, 100*time.Millisecond) }

// maxGrace is the longest --grace that fits in the margin: the margin must cover the clocks'
// rate error over one TTL (2·ρ·TTL with ρ = 500 ppm, NTP's bound: TTL/1000), the kill
// (killHeadroom) and the grace between SIGTERM and SIGKILL (docs/safety.md, "The client's
// margin").
func maxGrace(ttl, margin time.Duration) time.Duration {
	return margin - ttl/1000 - killHeadroom(margin)
}

// graceArithmetic says how maxGrace is worked out, for an error message.
func graceArithmetic(ttl, margin time.Duration) string {
	return fmt.Sprintf("the margin must also cover the clocks' rate error over the TTL (TTL/1000 = %s) and the kill "+
		"itself (a tenth of the margin, at least 100ms: %s), so --grace may be at most %s - %s - %s = %s",
		ttl/1000, killHeadroom(margin), margin, ttl/1000, killHeadroom(margin), maxGrace(ttl, margin))
}

// marginOrDefault is the session's safety margin: --safety-margin, or TTL/5.
func (f *runFlags) marginOrDefault() time.Duration {
	if f.margin > 0 {
		return f.margin
	}
	return f.ttl / 5
}

// graceOrDefault is the time the command gets between SIGTERM and SIGKILL: --grace, or half
// the safety margin (at most maxGrace), so that it has stopped before the server can free the
// lock.
func (f *runFlags) graceOrDefault() time.Duration {
	if f.grace > 0 {
		return f.grace
	}
	margin := f.marginOrDefault()
	return min(margin/2, maxGrace(f.ttl, margin))
}

// newSession creates the session that holds the lock, warning on stderr when it is in danger.
func (f *runFlags) newSession(ctx context.Context, c *client.Client, kind, name string, stderr io.Writer) (*client.Session, error) {
	host, _ := os.Hostname()
	return c.NewSession(ctx,
		client.WithTTL(f.ttl),
		client.WithSafetyMargin(f.marginOrDefault()),
		client.WithLockDelay(f.lockDelay),
		client.WithSessionName(fmt.Sprintf("raftlock %s on %s pid %d", kind, host, os.Getpid())),
		client.WithOnDanger(func(remaining time.Duration) {
			fmt.Fprintf(stderr, "raftlock: warning: cannot renew the session; %q is lost in %s unless the cluster answers\n",
				name, remaining.Round(time.Millisecond))
		}))
}

// closeSession destroys the session, which releases anything it still holds.
func closeSession(s *client.Session, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "raftlock: warning: %s (the session expires after its TTL)\n", errText(err))
	}
}

// lossCause says why a hold of the session ended: the session's own loss (destroyed, past its
// deadline), or err when the session lives.
func lossCause(s *client.Session, err error) string {
	if serr := s.Err(); serr != nil {
		return errText(serr)
	}
	return errText(err)
}

// splitCommand splits "NAME [FLAGS] [--] COMMAND [ARGS...]" (cobra has parsed the flags before
// NAME) and parses the flags between NAME and "--" or the first word that is not a flag, so
// that flags may come before or after NAME. Without "--", COMMAND starts at the first word
// after NAME that is not a flag, and everything from there on is its own.
func splitCommand(cmd *cobra.Command, args []string) (string, []string, error) {
	if len(args) == 0 || args[0] == "" || args[0] == "--" {
		return "", nil, &exitError{code: exitFailure, msg: "missing lock NAME (usage: NAME -- COMMAND [ARGS...])"}
	}
	if err := cmd.Flags().Parse(args[1:]); err != nil {
		return "", nil, &exitError{code: exitFailure, msg: err.Error()}
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return "", nil, errHelp
	}
	rest := cmd.Flags().Args()
	if len(rest) == 0 {
		return "", nil, &exitError{code: exitFailure, msg: "missing COMMAND (usage: NAME -- COMMAND [ARGS...])"}
	}
	return args[0], rest, nil
}

// errHelp asks for the command's help instead of a run.
var errHelp = errors.New("help requested")

// checkRunnable fails, with the exit code a shell would give, when COMMAND cannot be run, so
// that nothing is acquired or campaigned for only to fail then.
func checkRunnable(argv0 string) error {
	if _, err := exec.LookPath(argv0); err != nil {
		return &exitError{code: execExitCode(err), msg: fmt.Sprintf("cannot run %s: %v", argv0, err)}
	}
	return nil
}

// execExitCode is the exit code for a command that could not be started: 127 when it was not
// found, 126 when it was found but cannot be executed.
func execExitCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

// childEnv is what the command learns about its lock. RAFTLOCK_TOKEN names the ACL token
// wherever one is in use, so that raftlock commands run by COMMAND act with it; without one
// it still carries the fencing token, as it did before ACLs existed and as the docs promised
// (deprecated: RAFTLOCK_FENCING_TOKEN is the fencing token's name; aclToken keeps a raftlock
// run by COMMAND from taking it for an ACL token).
func childEnv(c *client.Client, aclToken, name string, token uint64, session string) []string {
	fencing := strconv.FormatUint(token, 10)
	env := []string{
		"RAFTLOCK_LOCK=" + name,
		fencingTokenEnv + "=" + fencing,
		"RAFTLOCK_SESSION=" + session,
		"RAFTLOCK_ENDPOINTS=" + strings.Join(c.Endpoints(), ","),
	}
	if aclToken == "" {
		return append(env, tokenEnv+"="+fencing)
	}
	return append(env, tokenEnv+"="+aclToken)
}

type lockFlags struct {
	runFlags
	wait   time.Duration
	value  string
	limit  int
	shared bool
}

func newLockCmd() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "lock [flags] NAME [flags] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Take the lock NAME, run COMMAND while holding it, and release it when COMMAND exits.

COMMAND runs with RAFTLOCK_LOCK (the name), RAFTLOCK_FENCING_TOKEN (pass it to the resource
you protect), RAFTLOCK_SESSION and RAFTLOCK_ENDPOINTS in its environment; RAFTLOCK_TOKEN is
the ACL token in use (--token), for raftlock commands that COMMAND runs. Without an ACL token,
RAFTLOCK_TOKEN carries the fencing token again, as it did before ACLs: that use is deprecated
and will go; read RAFTLOCK_FENCING_TOKEN (a raftlock run by COMMAND does not send it as an
ACL token). raftlock
keeps the session alive meanwhile. If the lock is lost while COMMAND runs (the cluster was
unreachable for too long, or the session was destroyed), COMMAND and every process in its
group get SIGTERM, then SIGKILL after --grace, and raftlock exits with code 3. Signals sent
to raftlock are passed on to COMMAND; the lock is released once it has exited.

raftlock gives the lock up --safety-margin (default TTL/5) before the server could free it,
counting from the last renewal it sent, so that COMMAND has been stopped before anyone else
can be granted the lock. The margin covers three things: the difference in rate between this
machine's clock and the servers' over one TTL (TTL/1000, for clocks within 500 ppm; no
synchronised clocks needed), the kill itself (a tenth of the margin, at least 100ms: the
deadline firing late, the signals, the processes ending) and --grace. So --grace (default half
the margin) may be at most margin - TTL/1000 - max(margin/10, 100ms): with --ttl 15s and the
default margin of 3s, at most 3s - 15ms - 300ms = 2.685s. The fencing token protects against
what no margin can: a machine paused for longer than that.

With --wait 0 (the default) raftlock does not wait: if another session holds the lock it
exits at once with code 75, which makes "run the nightly job on exactly one machine" a
one-liner in every crontab. With --wait 30s it waits in the lock's FIFO queue for up to 30s;
a negative --wait waits without limit.

With --limit N, NAME is a semaphore: up to N runs hold it at once, each with its own fencing
token, and the others wait (or exit with code 75). Every run on NAME must give the same
--limit while any holds or waits for it; one with another limit exits with code 1. With
--shared, the run takes a shared (read) hold: shared runs overlap, a run without --shared
overlaps none, and one that waits stops later shared runs from overtaking it.

A cluster that does not answer (down, or without a leader) fails the run with code 1 after 5s,
as it fails "raftlock locks" or "status" (--retry-timeout sets this too); once the lock is
asked for, requests keep trying for --retry-timeout (default 15s) to ride out an election.

Flags may come before or after NAME, up to "--".
` + exitCodesHelp(true),
		Example: `  # run the nightly job on exactly one of the machines whose crontab has this line
  raftlock lock jobs/nightly -- /usr/local/bin/nightly.sh

  # wait up to a minute for the lock, and tell the resource which token we hold
  raftlock lock --wait 1m db/migrate -- sh -c 'migrate --fencing-token "$RAFTLOCK_FENCING_TOKEN"'

  # at most two reindex jobs at once across the fleet
  raftlock lock --limit 2 --wait 10m jobs/reindex -- ./reindex.sh

  # readers share the lock, the writer (no --shared) runs alone
  raftlock lock --shared --wait 1m docs/handbook -- ./render.sh
  raftlock lock --wait 1m docs/handbook -- ./edit.sh

  # against a real cluster
  RAFTLOCK_ENDPOINTS=http://10.0.0.1:7001,http://10.0.0.2:7001 raftlock lock --ttl 30s backup -- ./backup.sh`,
		ValidArgsFunction: completeLockNames(&f.clientFlags, cobra.ShellCompDirectiveDefault),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv, err := splitCommand(cmd, args)
			if errors.Is(err, errHelp) {
				return cmd.Help()
			}
			if err != nil {
				return err
			}
			return runLock(cmd, &f, cmd.Flags().Changed("value"), name, argv)
		},
	}
	f.runFlags.register(cmd)
	cmd.Flags().DurationVar(&f.wait, "wait", 0, "how long to wait for the lock: 0 fails at once if it is held, negative waits forever")
	cmd.Flags().StringVar(&f.value, "value", "", "value stored with the lock while held (shown by lock-info)")
	cmd.Flags().IntVar(&f.limit, "limit", 0, "make NAME a semaphore that up to this many runs hold at once (1 to 1000)")
	cmd.Flags().BoolVar(&f.shared, "shared", false, "take a shared (read) hold: shared runs overlap, others run alone")
	return cmd
}

// hold is what lock runs COMMAND under: a Mutex, a Semaphore's permit or an RWMutex's shared
// hold.
type hold struct {
	key       string
	lock, try func(context.Context) error
	unlock    func(context.Context) error
	token     func() uint64
	context   func() context.Context
}

// checkKind checks --limit and --shared.
func (f *lockFlags) checkKind() error {
	switch {
	case f.limit != 0 && (f.limit < 1 || f.limit > 1000):
		return &exitError{code: exitFailure, msg: fmt.Sprintf("--limit %d: a semaphore's limit is between 1 and 1000", f.limit)}
	case f.limit > 1 && f.shared:
		return &exitError{code: exitFailure, msg: "--shared is for locks: a semaphore (--limit above 1) has no shared holds"}
	}
	return nil
}

// reachable reads the lock once, with the inspection commands' retry timeout (unless
// --retry-timeout is given), so that a cluster that is down or has no leader fails the run as
// soon as it fails them. The lock's own client keeps the longer default, which its renewals
// and its acquire use to ride out a leader election.
func (f *lockFlags) reachable(ctx context.Context, cmd *cobra.Command, name string) error {
	retry := inspectRetry
	if cmd.Flags().Changed("retry-timeout") {
		retry = f.retry
	}
	opts, err := f.options(retry)
	if err != nil {
		return &exitError{code: exitFailure, msg: err.Error()}
	}
	c, err := client.New(f.endpointList(), opts...)
	if err != nil {
		return &exitError{code: exitFailure, msg: err.Error()}
	}
	defer c.Close()
	_, err = c.GetLock(ctx, name)
	var ae *client.APIError
	if err == nil || errors.As(err, &ae) && ae.Code != api.CodeNoLeader && ae.Code != api.CodeTimeout {
		return nil // it answers: a refusal (no read access, say) is the acquire's to report
	}
	if ctx.Err() != nil {
		return &exitError{code: exitFailure, msg: "interrupted while reaching the cluster"}
	}
	return failure("reaching the cluster", err)
}

// newHold makes the hold that the flags (checked by checkKind) ask for.
func (f *lockFlags) newHold(sess *client.Session, name string, opts []client.MutexOption) hold {
	switch {
	case f.limit != 0:
		x := client.NewSemaphore(sess, name, f.limit, opts...)
		return hold{name, x.Acquire, x.TryAcquire, x.Release, x.Token, x.Context}
	case f.shared:
		rw := client.NewRWMutex(sess, name, opts...)
		return hold{name, rw.RLock, rw.TryRLock, rw.RUnlock, rw.Token, rw.Context}
	}
	m := client.NewMutex(sess, name, opts...)
	return hold{name, m.Lock, m.TryLock, m.Unlock, m.Token, m.Context}
}

func runLock(cmd *cobra.Command, f *lockFlags, hasValue bool, name string, argv []string) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.checkKind(); err != nil {
		return err
	}
	if err := checkRunnable(argv[0]); err != nil {
		return err
	}
	if err := f.reachable(ctx, cmd, name); err != nil {
		return err
	}
	c, err := f.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	sess, err := f.newSession(ctx, c, "lock", name, stderr)
	if err != nil {
		return failure("creating a session", err)
	}
	defer closeSession(sess, stderr)
	var opts []client.MutexOption
	if hasValue {
		opts = append(opts, client.WithValue(f.value))
	}
	if f.wait > 0 {
		opts = append(opts, client.WithWaitChunk(min(f.wait, client.DefaultWaitChunk)))
	}
	m := f.newHold(sess, name, opts)
	if err := takeLock(ctx, c, m, f.wait); err != nil {
		return err
	}
	res, err := runChild(childSpec{
		argv: argv, env: childEnv(c, aclToken(f.token), name, m.token(), sess.ID()), grace: f.graceOrDefault(),
		stdin: cmd.InOrStdin(), stdout: cmd.OutOrStdout(), stderr: stderr,
	}, m.context())
	uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uerr := m.unlock(uctx)
	switch {
	case err != nil:
		return err
	case res.lost != nil:
		return &exitError{code: exitLockLost, msg: fmt.Sprintf(
			"lost lock %q while the command ran: %s; the command was stopped (exit status %d)",
			name, lossCause(sess, res.lost), res.code)}
	case errors.Is(uerr, client.ErrLockLost):
		return &exitError{code: exitLockLost, msg: fmt.Sprintf(
			"lock %q was lost before the command finished: %s", name, lossCause(sess, uerr))}
	case uerr != nil:
		fmt.Fprintf(stderr, "raftlock: warning: releasing %q: %s (it is released when the session ends)\n", name, errText(uerr))
	}
	if res.code != 0 {
		return &exitError{code: res.code}
	}
	return nil
}

// takeLock acquires the lock, turning "held by someone else" into exit code 75.
func takeLock(ctx context.Context, c *client.Client, m hold, wait time.Duration) error {
	var err error
	switch {
	case wait == 0:
		err = m.try(ctx)
	case wait < 0:
		err = m.lock(ctx)
	default:
		wctx, cancel := context.WithTimeout(ctx, wait)
		err = m.lock(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return &exitError{code: exitLockHeld, msg: fmt.Sprintf("lock %q is still held after waiting %s%s",
				m.key, wait, describeHolder(c, m.key))}
		}
	}
	var ae *client.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae) && ae.Holder != nil && ae.Holder.Session != "":
		return &exitError{code: exitLockHeld, msg: fmt.Sprintf("lock %q is held by session %s (token %d)",
			m.key, ae.Holder.Session, ae.Holder.Token)}
	case errors.As(err, &ae) && ae.Holder != nil: // under ACLs, another token's session is not named
		return &exitError{code: exitLockHeld, msg: fmt.Sprintf("lock %q is held by another session (token %d)",
			m.key, ae.Holder.Token)}
	case errors.Is(err, client.ErrLockHeld):
		return &exitError{code: exitLockHeld, msg: fmt.Sprintf("lock %q is held by another session", m.key)}
	case errors.Is(err, client.ErrLockDelayed):
		return &exitError{code: exitLockHeld, msg: fmt.Sprintf("lock %q is in its lock-delay: %s", m.key, errText(err))}
	case errors.Is(err, client.ErrLimitMismatch), errors.Is(err, client.ErrModeMismatch):
		return &exitError{code: exitFailure, msg: errText(err)}
	case ctx.Err() != nil:
		return &exitError{code: exitFailure, msg: fmt.Sprintf("interrupted while waiting for lock %q", m.key)}
	}
	return failure(fmt.Sprintf("acquiring lock %q", m.key), err)
}

// describeHolder names the holder of a lock for a message, or returns "" if it cannot.
func describeHolder(c *client.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.GetLock(ctx, name)
	if err != nil || !l.Held {
		return ""
	}
	if l.Session == "" { // under ACLs, another token's session is not named
		return fmt.Sprintf(" (held by another session, token %d)", l.Token)
	}
	return fmt.Sprintf(" (held by session %s, token %d)", l.Session, l.Token)
}
