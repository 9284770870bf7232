package client

import (
	"context"
	"errors"
)

// withdraw ends m's use of the lock with a withdrawal of attempt t, which may have left a
// queue place or a grant (token, if known) behind; see runWithdrawal.
func (m *Mutex) withdraw(t attempt, token uint64) {
	done := m.s.startWithdrawal(m.name) // before endUse: no new try may start in between
	m.s.endUse(m.name, m)
	go m.runWithdrawal(done, t, token, 0)
}

// runWithdrawalLater withdraws attempt t in the background like withdraw, without ending m's
// use of the lock, and releases no grant under token keep (m's hold).
func (m *Mutex) runWithdrawalLater(t attempt, keep uint64) {
	go m.runWithdrawal(m.s.startWithdrawal(m.name), t, 0, keep)
}

// runWithdrawal withdraws an attempt in the background, then calls done: it cancels the
// attempt (which takes the session out of the queue, refuses the attempt's requests still on
// their way, and reports a grant that came first) and releases the grant (token, if known,
// else the one reported, unless that is keep), asking again while the session lives. Reading
// the lock is not enough: a request the server still holds (its connection cut without the
// server noticing, or its node failed after replicating the queue entry), or one that reaches
// the server only now, can be granted later, leaving the lock held by a session whose Mutex
// never learns of it. The session's next try for the lock waits for done.
func (m *Mutex) runWithdrawal(done func(), t attempt, token, keep uint64) {
	defer done()
	ctx := m.s.ctx // the withdrawal lasts as long as the session
	for i := 0; ; i++ {
		var err error
		token, err = m.withdrawOnce(ctx, t, token, keep)
		if err == nil {
			// The server refuses the attempt's late requests now: the floor may pass it. (One
			// that cannot be withdrawn keeps the floor below it while the session lives.)
			m.s.endAttempt(t)
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.s.gone(err)
		if !isTransient(err) {
			m.s.c.logger.Warn("could not withdraw an attempt for a lock; the session may hold "+
				"it until it ends", "lock", m.name, "error", err)
			return
		}
		m.s.c.logger.Debug("withdrawing an attempt failed; asking again", "lock", m.name, "error", err)
		if !sleepCtx(ctx, m.s.c.backoff(i)) {
			return
		}
	}
}

// withdrawOnce asks once to withdraw the attempt; it returns the grant's token as far as it
// learned it.
func (m *Mutex) withdrawOnce(ctx context.Context, t attempt, token, keep uint64) (uint64, error) {
	c, sid := m.s.c, m.s.ID()
	if token == 0 {
		r, err := c.cancelAcquire(ctx, m.name, sid, m.s.fields(t))
		if err != nil {
			return 0, err
		}
		if !r.Held || r.Token == keep {
			return 0, nil
		}
		token = r.Token
	}
	err := c.releaseAttempt(ctx, m.name, sid, token, m.s.fields(t))
	if errors.Is(err, ErrNotHolder) {
		return token, nil
	}
	return token, err
}
