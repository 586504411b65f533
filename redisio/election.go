package redisio

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Election is redisio's election.Service and election.TermResigner, what
// NewElection returns; it is exported for the reasons Lock is. It has no
// methods beyond those interfaces' and CancelOnSuspend.
type Election struct {
	face
	v *service
	// proclaiming is held from a Proclaim's script (on the helper that
	// runs it, see request) until the term's value is set to what it
	// wrote, or the value is put back: Proclaims and their undos change
	// the value one at a time, the term's last, so that an undo puts back
	// the term's value, Redis's after the Proclaims before it.
	proclaiming sync.Mutex
}

var (
	_ election.Service      = (*Election)(nil)
	_ election.TermResigner = (*Election)(nil)
)

// NewElection returns a candidate (and observer) in the election named
// name on cli. Candidates lead in the order they campaigned; a term's
// token is its Created, so tokens rise from term to term. Options and bad
// input as NewLock.
func NewElection(cli *redis.Client, name string, opts ...Option) (election.Service, error) {
	v, err := newService(cli, name, kindElection, opts)
	if err != nil {
		return nil, err
	}
	return &Election{face: v, v: v}, nil
}

// Campaign blocks until this candidate leads with value.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if err := e.checkValue("campaign", value); err != nil {
		return err
	}
	_, err := e.v.acquire(ctx, false, value, rwlock.Write)
	return err
}

// Proclaim changes the leader's value; election.ErrNotLeader unless leading.
// One that returns another error leaves the value as the term has it (see
// Giving up in the package doc); the Proclaims of one Election change
// it one at a time.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.checkValue("proclaim", value); err != nil {
		return err
	}
	v := e.v
	h, err := loopCall(v.s, ctx, func() (driver.Hold, error) {
		return v.On(func(h driver.Hold) bool { return !h.Releasing() })
	})
	if err != nil {
		return err
	}
	keys := []string{v.queue, v.granted, v.s.key, h.Key}
	// The script runs on a helper (see request): its caller leaves once
	// ctx ends, and the value it set is put back when its answer comes.
	// A script that fails may have run: its value is put back before the
	// caller learns the error. Either way, proclaiming is held from the
	// script until the term's value is set or the value put back.
	n, left, err := request(v.s, &v.requests, ctx, v.Done(), func() (int64, error) {
		e.proclaiming.Lock()
		if err := ctx.Err(); err != nil { // it waited for another Proclaim
			e.proclaiming.Unlock()
			return 0, err
		}
		// The outcome must be known to undo it: ctx does not cut the
		// script short.
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		n, err := proclaimScript.Run(opCtx, v.s.asked, keys, value, v.wake).Int64()
		if err != nil {
			e.unproclaim(keys, h, value)
		}
		if err != nil || n != 1 {
			e.proclaiming.Unlock()
		}
		return n, err
	}, func(n int64, err error) {
		if err == nil && n == 1 {
			e.unproclaim(keys, h, value)
			e.proclaiming.Unlock()
		}
	})
	if left {
		if cerr := ctx.Err(); cerr != nil {
			return v.errf("proclaim: %w", cerr)
		}
		return v.Err()
	}
	if err != nil {
		if cerr := ctxtime.Ended(ctx); cerr != nil {
			return v.errf("proclaim: %w (%v)", cerr, err)
		}
		return v.errf("proclaim: %w", err)
	}
	if n != 1 { // the script held proclaiming only for a value it set
		return v.errf("%w", election.ErrNotLeader)
	}
	defer e.proclaiming.Unlock()
	_, err = loopCall(v.s, context.Background(), func() (struct{}, error) {
		v.Update(func(cur *driver.Hold) {
			if cur.Created == h.Created {
				cur.Value = value
			}
		})
		return struct{}{}, nil
	})
	return err
}

// unproclaim puts the term's value back on the hold of keys
// (proclaimScript's) if it has the value a Proclaim whose caller left it,
// or whose script failed, may have set, within opTimeout (and the bounds
// of ownCtx and ownClient). The term's value, read with proclaiming held,
// is the one the Proclaims before it set (h's, if the term is no longer
// h).
func (e *Election) unproclaim(keys []string, h driver.Hold, value string) {
	v := e.v
	old := h.Value
	if cur, ok := v.Current(); ok && cur.Created == h.Created {
		old = cur.Value
	}
	if old == value {
		return
	}
	ctx, cancel := v.s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	if _, _, err := inAttempts(ctx, nil, func() (int64, error) {
		return ownScript(ctx, v.s, proclaimScript, keys, old, v.wake, value).Int64()
	}); err != nil {
		v.s.log.Debug("redisio: undo a proclaim", zap.String("key", keys[3]), zap.Error(err))
	}
}

// Resign ends this candidate's term; election.ErrNotLeader if it has none.
func (e *Election) Resign(ctx context.Context) error { return e.v.release(ctx, driver.Any) }

// ResignTerm ends exactly term, matched by its Created.
func (e *Election) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.v.release(ctx, driver.CreatedAt(term.Created))
}

// Term is this candidate's own current term.
func (e *Election) Term() (election.Leadership, bool) {
	h, ok := e.v.Current()
	if !ok {
		return election.Leadership{}, false
	}
	return election.Leadership{Key: h.Key, Value: h.Value, FencingToken: h.Token, LeaseID: h.LeaseID, Created: h.Created}, true
}

// Leader returns whoever leads now; election.ErrNoLeader if nobody does.
func (e *Election) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.v.Usable(ctx); err != nil {
		return election.Leadership{}, err
	}
	l, err := e.v.readLeader(ctx)
	if err != nil {
		return l, err
	}
	if l.Key == "" {
		return l, e.v.errf("%w", election.ErrNoLeader)
	}
	return l, nil
}

// Observe delivers the current leader first, then each change: the first
// is read after the call (a read that fails is repeated; while Redis cannot
// be read, nothing is delivered), and the service follows the leader (its
// session's leader watch) for as long as ctx lives.
func (e *Election) Observe(ctx context.Context) <-chan election.Leadership {
	if ctx == nil {
		return driver.Closed[election.Leadership]()
	}
	v := e.v
	v.Spec().Listeners.Join(ctx)
	seq, l, err := v.readLeaderUntil(ctx)
	var ch <-chan election.Leadership
	if err == nil {
		ch, err = loopCall(v.s, ctx, func() (<-chan election.Leadership, error) {
			if v.Ended() {
				return nil, v.Err()
			}
			v.applyLeaderLoop(seq, l)
			return v.obs.Subscribe(ctx, v.leader), nil
		})
	}
	if err != nil {
		return driver.Closed[election.Leadership]()
	}
	return ch
}

// checkValue refuses a value over the service's limit before anything is
// sent.
func (e *Election) checkValue(what, value string) error {
	if len(value) > e.v.maxValue {
		return e.v.errf("%s: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			what, len(value), e.v.maxValue, primitives.ErrInvalidArgument)
	}
	return nil
}
