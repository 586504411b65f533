package memio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// barrierState is a held barrier: its key exists. Guarded by the store's
// mutex.
type barrierState struct {
	name    string
	held    bool
	lowered chan struct{} // closed at the Release
}

// NewBarrier returns a barrier on name in st, held while its key (name)
// exists. It has no session: the barrier outlives whoever held it.
func NewBarrier(st *Store, name string) (barrier.Barrier, error) {
	if st == nil {
		return nil, fmt.Errorf("memio: new barrier %s: nil Store: %w", quote.Name(name), ErrInvalidArgument)
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("memio: new barrier %s: %w", quote.Name(name), err)
	}
	return memBarrier{st: st, name: name}, nil
}

type memBarrier struct {
	st   *Store
	name string
}

func (b memBarrier) Hold(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return err
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	if x, ok := b.st.barriers[b.name]; ok && x.held {
		return fmt.Errorf("memio: barrier %s: %w", quote.Name(b.name), barrier.ErrHeld)
	}
	b.st.barriers[b.name] = &barrierState{name: b.name, held: true, lowered: make(chan struct{})}
	b.st.write()
	return nil
}

func (b memBarrier) Release(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return err
	}
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	x, ok := b.st.barriers[b.name]
	if !ok || !x.held {
		return fmt.Errorf("memio: barrier %s: %w", quote.Name(b.name), barrier.ErrNotHeld)
	}
	b.st.lowerBarrier(x)
	return nil
}

func (b memBarrier) Wait(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return err
	}
	b.st.mu.Lock()
	x, ok := b.st.barriers[b.name]
	held := ok && x.held
	b.st.mu.Unlock()
	if !held {
		return nil
	}
	select {
	case <-x.lowered:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lowerBarrier deletes a held barrier's key and lets its waiters go.
// Locked.
func (st *Store) lowerBarrier(x *barrierState) {
	x.held = false
	close(x.lowered)
	delete(st.barriers, x.name)
	st.write()
}

// round is one meeting of a double barrier's parties: their keys, and
// whether count have entered (its ready key exists). Guarded by the store's
// mutex.
type round struct {
	name    string
	count   int
	parties []*doubleParty
	isReady bool
	ready   chan struct{} // closed when count have entered
	empty   chan struct{} // closed when every party of a ready round is gone
}

// roundOf returns the current round of the double barrier name. Locked.
func (st *Store) roundOf(name string, count int) *round {
	r, ok := st.rounds[name]
	if !ok {
		r = &round{name: name, count: count, ready: make(chan struct{}), empty: make(chan struct{})}
		st.rounds[name] = r
	}
	return r
}

// leaveRound takes p's key out of its round; the last party of a ready
// round ends it. Locked.
func (st *Store) leaveRound(p *doubleParty) {
	r := p.round
	if p.k != nil {
		delete(st.keys, p.k.name)
		delete(p.s.keys, p.k)
		p.k = nil
		st.write()
	}
	for i, x := range r.parties {
		if x == p {
			r.parties = append(r.parties[:i], r.parties[i+1:]...)
			break
		}
	}
	if len(r.parties) == 0 && st.rounds[r.name] == r {
		if r.isReady {
			close(r.empty)
		}
		delete(st.rounds, r.name)
	}
}

// NewDoubleBarrier returns one party of the double barrier on name in st
// for count parties, on its own session or the one WithSession gives. Its
// keys: one per party that entered (name/waiters/<revision>), and
// name/ready while count have entered and not all have left. Every party
// of a name must be given the same count, as on Redis: an Enter that finds
// the parties in the round given another count fails with an error
// wrapping primitives.ErrInvalidArgument, and the party is not counted.
func NewDoubleBarrier(st *Store, name string, count int, opts ...Option) (barrier.DoubleBarrier, error) {
	fail := func(err error) error { return fmt.Errorf("memio: new double barrier %s: %w", quote.Name(name), err) }
	o, err := buildOptions(opts)
	switch {
	case err != nil:
		return nil, fail(err)
	case st == nil:
		return nil, fail(fmt.Errorf("nil Store: %w", ErrInvalidArgument))
	case count < 1:
		return nil, fail(fmt.Errorf("count %d: %w", count, ErrInvalidArgument))
	}
	if err := checkLockValue("double barrier", o); err != nil {
		return nil, fail(err)
	}
	if err := checkName(name); err != nil {
		return nil, fail(err)
	}
	s, own := o.session, false
	if s == nil {
		s, own = newSession(st, o), true
	} else if s.st != st {
		return nil, fail(fmt.Errorf("WithSession: the session is of another Store: %w", ErrInvalidArgument))
	}
	p := &doubleParty{st: st, s: s, own: own, name: name, count: count, done: make(chan struct{})}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.err != nil {
		return nil, fail(s.err)
	}
	s.parties[p] = struct{}{}
	return p, nil
}

// doubleParty is one party of a double barrier.
type doubleParty struct {
	st        *Store
	s         *Session
	own       bool
	name      string
	count     int
	done      chan struct{}
	closeOnce sync.Once

	// Guarded by the store's mutex.
	err     error
	round   *round
	k       *key // its key while in the round
	entered bool // Enter succeeded and Leave has not
	// kicked, while Enter waits, is closed if the party's key is deleted.
	kicked chan struct{}
}

func (p *doubleParty) Count() int            { return p.count }
func (p *doubleParty) Done() <-chan struct{} { return p.done }

func (p *doubleParty) Err() error {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	return p.err
}

func (p *doubleParty) Enter(ctx context.Context) error {
	if err := p.s.gate(ctx); err != nil {
		return err
	}
	st := p.st
	st.mu.Lock()
	switch {
	case p.err != nil:
		st.mu.Unlock()
		return p.err
	case p.entered:
		st.mu.Unlock()
		return fmt.Errorf("memio: double barrier %s: %w", quote.Name(p.name), barrier.ErrEntered)
	}
	if err := p.s.failure(); err != nil {
		st.mu.Unlock()
		return err
	}
	r := st.roundOf(p.name, p.count)
	if r.count != p.count {
		st.mu.Unlock()
		return fmt.Errorf("memio: double barrier %s: count %d, but the barrier's parties were given %d: %w",
			quote.Name(p.name), p.count, r.count, ErrInvalidArgument)
	}
	if r.isReady {
		st.mu.Unlock()
		return fmt.Errorf("memio: double barrier %s: %w", quote.Name(p.name), barrier.ErrFull)
	}
	rev := st.write()
	p.k = &key{name: p.name + "/waiters/" + strconv.FormatInt(rev, 10), created: rev, party: p, slot: -1}
	st.keys[p.k.name] = p.k
	p.s.keys[p.k] = struct{}{}
	p.round = r
	r.parties = append(r.parties, p)
	if len(r.parties) == r.count {
		r.isReady = true
		close(r.ready)
	}
	kicked := make(chan struct{})
	p.kicked = kicked
	st.mu.Unlock()
	gone := func() error {
		return fmt.Errorf("memio: double barrier %s: the party's key was deleted by another client: %w", quote.Name(p.name), errLost)
	}
	select {
	case <-r.ready:
		st.mu.Lock()
		defer st.mu.Unlock()
		p.kicked = nil
		switch {
		case p.err != nil:
			return p.err
		case p.k == nil:
			return gone() // out of the round before it was complete
		}
		p.entered = true
		return nil
	case <-kicked:
		return gone()
	case <-ctx.Done():
		st.mu.Lock()
		defer st.mu.Unlock()
		p.kicked = nil
		if r.isReady && p.err == nil && p.k != nil {
			// The round completed counting this party: it is in.
			p.entered = true
			return nil
		}
		st.leaveRound(p)
		return ctx.Err()
	case <-p.done:
		return p.Err()
	}
}

func (p *doubleParty) Leave(ctx context.Context) error {
	if err := p.s.gate(ctx); err != nil {
		return err
	}
	st := p.st
	st.mu.Lock()
	switch {
	case p.err != nil:
		st.mu.Unlock()
		return p.err
	case !p.entered:
		st.mu.Unlock()
		return fmt.Errorf("memio: double barrier %s: %w", quote.Name(p.name), barrier.ErrNotEntered)
	}
	if err := p.s.failure(); err != nil {
		st.mu.Unlock()
		return err
	}
	r := p.round
	st.leaveRound(p)
	st.mu.Unlock()
	select {
	case <-r.empty:
		st.mu.Lock()
		p.entered = false
		st.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return p.Err()
	}
}

// keyDeleted: someone deleted the party's key; it is out of the round,
// and an Enter under way fails with ErrLost, also one whose round had just
// completed (one that returned has entered: its Leave waits for the
// others). Locked.
func (p *doubleParty) keyDeleted() {
	if p.kicked != nil {
		close(p.kicked)
		p.kicked = nil
	}
	if p.round != nil {
		p.st.leaveRound(p)
	}
}

// end ends the party with its session: it is gone from the barrier with its
// key. Locked.
func (p *doubleParty) end(err error) {
	if p.err != nil {
		return
	}
	p.err = fmt.Errorf("memio: double barrier %s: %w", quote.Name(p.name), err)
	if p.round != nil {
		p.st.leaveRound(p)
	}
	delete(p.s.parties, p)
	close(p.done)
}

// Close takes the party out of the barrier and ends it; with its own
// session, the session is closed too.
func (p *doubleParty) Close() error {
	first := false
	p.closeOnce.Do(func() { first = true })
	if !first {
		return fmt.Errorf("memio: double barrier %s: already closed: %w", quote.Name(p.name), primitives.ErrClosed)
	}
	p.st.mu.Lock()
	p.end(fmt.Errorf("closed: %w", primitives.ErrClosed))
	p.st.mu.Unlock()
	if p.own {
		if err := p.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
			return err
		}
	}
	return nil
}
