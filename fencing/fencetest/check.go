package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ahrtr/disco/fencing"
)

// CheckFunc is a resource's check of one request's token: nil admits the
// request, an error refuses it (wrapping fencing.ErrTokenStale for a stale
// token). scope is the scope the request is for ("" on a resource that is
// not Keyed). Guard.CheckContext and Keyed.CheckContext are such checks,
// once their arguments are put in this order.
type CheckFunc func(ctx context.Context, t fencing.Token, scope string) error

// Check returns a Resource whose writes the kit keeps itself, one value per
// scope, and applies only if the check that start returns admits them. The
// kit runs the check and applies the write under one lock, as a resource
// that checks inside its own transaction does: it tests the check, not a
// window between a check and a write (see guard.Guard.Admit for that
// window; test the whole handler to cover it).
//
// start is called now, and again at each Restart (the values the kit keeps
// stay, as a database's rows would): it must build the check as a newly
// started process would (a new guard, its mark read from wherever it is
// kept durably). If the check keeps its marks in memory only and that is
// meant, set the Resource's Restart to nil.
//
// A check is given a parsed token: t is 0 for a request without one, and
// zero or negative for those tokens; the other malformed forms of the
// NoToken history, and a token with another scope or none (OtherScope),
// cannot be sent to it, as the transport (fencing.FromHTTP,
// fencing.FromIncomingContext, guard's middleware) refuses them before any
// check runs.
func Check(start func() CheckFunc) Resource {
	c := &checked{start: start, values: make(map[string]string)}
	c.check = start()
	return Resource{Write: c.write, Read: c.read, Restart: c.restart}
}

type checked struct {
	start  func() CheckFunc
	mu     sync.Mutex
	check  CheckFunc
	values map[string]string
}

func (c *checked) write(ctx context.Context, r Request) error {
	t, err := r.ParsedToken()
	if err != nil {
		return err
	}
	if r.TokenScope != r.Scope {
		return fmt.Errorf("fencetest: a check is given one scope, the request's: a token with another scope or none (%q for %q) is refused by the transport before it: %w",
			r.TokenScope, r.Scope, errors.ErrUnsupported)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx, t, r.Scope); err != nil {
		return err
	}
	c.values[r.Scope] = r.Value
	return nil
}

func (c *checked) read(_ context.Context, r Request) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[r.Scope], nil
}

func (c *checked) restart(context.Context) error {
	check := c.start()
	c.mu.Lock()
	c.check = check
	c.mu.Unlock()
	return nil
}
