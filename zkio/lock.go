package zkio

import (
	"context"
	"fmt"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
)

var lockSpec = &spec{kind: "lock", markers: []string{lockMarker}, notHeld: lock.ErrNotHeld, taken: lock.ErrLockTaken}

// NewLock returns a lock on the znode path, in the layout of Curator's
// InterProcessMutex: a disco lock and an InterProcessMutex on the same path
// exclude each other. It connects to servers with a session of its own,
// which Close ends; or, with WithSession (and nil servers), it runs on that
// session. With WithValue its znodes carry a value naming the owner.
func NewLock(servers []string, path string, opts ...Option) (lock.Service, error) {
	svc, err := newService(servers, path, lockSpec, opts)
	if err != nil {
		return nil, err
	}
	return &zkLock{svc}, nil
}

type zkLock struct{ *service }

// checkLockValue refuses WithValue on any constructor but NewLock's, and a
// value larger than the session takes.
func checkLockValue(sp *spec, o options) error {
	if !o.valueSet {
		return nil
	}
	if sp != lockSpec {
		return fmt.Errorf("zkio: %s: WithValue is for locks only (an election's value is Campaign's): %w", sp.kind, ErrInvalidArgument)
	}
	limit := o.maxData
	if o.session != nil {
		limit = o.session.maxData
	}
	if len(o.value) > limit {
		return fmt.Errorf("zkio: lock: WithValue: value of %d bytes, more than the %d bytes a znode takes here (WithMaxDataSize): %w",
			len(o.value), limit, ErrInvalidArgument)
	}
	return nil
}

func (l *zkLock) grant(h driver.Hold, err error) (lock.Grant, error) {
	if err != nil {
		return lock.Grant{}, err
	}
	return lock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.s.Timeout(), Created: h.Created}, nil
}

func (l *zkLock) Lock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, 0, l.value, false))
}

func (l *zkLock) TryLock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, 0, l.value, true))
}

func (l *zkLock) Unlock(ctx context.Context) error { return l.release(ctx, driver.Any) }

func (l *zkLock) Release(ctx context.Context, g lock.Grant) error {
	return l.release(ctx, driver.CreatedAt(g.Created))
}
