package etcdio

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// A key this session wrote and no longer wants (a caller gave up, a reply
// was lost, Close) must go while the session lives: otherwise it stays under
// the live lease and everyone behind it waits until the session ends. These
// deletes run on session helpers and are retried until they succeed or the
// session ends (then the lease takes the key).

// deleteKey deletes key, created at rev (0: unknown, for a name never to be
// used again), trying once now; if that fails it keeps trying in the
// background and returns the first attempt's error (see persist).
// An unsure key (see markUnsure) is deleted once more later, by name.
func (s *Session) deleteKey(key string, rev int64) error {
	err := s.persist("key "+key, func(ctx context.Context) error { return s.deleteRequest(ctx, key, rev) })
	s.deletedOnce(key)
	return err
}

// deletedOnce is told that key was deleted, or is being deleted in the
// background: if a write of it was unsure (see markUnsure), it is deleted
// once more later. Every delete of a key the session wrote says so.
func (s *Session) deletedOnce(key string) {
	if s.takeUnsure(key) {
		s.deleteAgainLater(key)
	}
}

// deleteUnknown deletes key, a retired name whose write's outcome is
// unknown: now, and once more later (see deleteAgainLater).
func (s *Session) deleteUnknown(key string) {
	_ = s.deleteKey(key, 0)
	s.deleteAgainLater(key)
}

// deleteAgainLater deletes key, a retired name, once more when a write of it
// still in flight somewhere in etcd has surely been applied or dropped. (No
// later key takes a retired name, so deleting by name is safe.)
func (s *Session) deleteAgainLater(key string) {
	s.goHelper(func(ctx context.Context) {
		if ctxtime.Sleep(ctx, 2*s.bound.get()) {
			_ = s.deleteKey(key, 0)
		}
	})
}

// markUnsure records that key, a retired name this session holds, had a
// write attempt whose outcome stayed unknown: that attempt may still land
// after the key is deleted, so its deletion is repeated later.
func (s *Session) markUnsure(key string) {
	s.unsureMu.Lock()
	defer s.unsureMu.Unlock()
	if s.unsure == nil {
		s.unsure = make(map[string]struct{})
	}
	s.unsure[key] = struct{}{}
}

// takeUnsure reports whether key was marked unsure, and unmarks it.
func (s *Session) takeUnsure(key string) bool {
	s.unsureMu.Lock()
	defer s.unsureMu.Unlock()
	_, ok := s.unsure[key]
	delete(s.unsure, key)
	return ok
}

// persist makes f's request once now, in one attempt (see once), and if
// that fails, again in the background with backoff until it succeeds or
// the session or client ends. It returns the first attempt's error. what
// names the abandoned thing f deletes, for the log.
func (s *Session) persist(what string, f func(ctx context.Context) error) error {
	err := s.once(s.ctx, f)
	if err == nil || s.ctx.Err() != nil || s.cli.Ctx().Err() != nil {
		return err
	}
	s.goHelper(func(ctx context.Context) {
		backoff := ctxtime.NewBackoff(100*time.Millisecond, 2*time.Second)
		for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
			err := s.once(ctx, f)
			if err == nil {
				return
			}
			s.log.Debug("could not delete an abandoned "+what+"; retrying", zap.Error(err))
			backoff.Wait(ctx)
		}
	})
	return err
}

// once makes f's request in one attempt (see attempt), which also ends if
// the client is closed.
func (s *Session) once(ctx context.Context, f func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.cli.Ctx(), cancel)()
	ctx, done := s.attempt(ctx)
	defer func() { done(err) }()
	return f(ctx)
}

// deleteOnce deletes key, created at rev (0: unknown), in one attempt.
func (s *Session) deleteOnce(ctx context.Context, key string, rev int64) error {
	return s.once(ctx, func(ctx context.Context) error { return s.deleteRequest(ctx, key, rev) })
}

// deleteRequest deletes key: with a known rev only that incarnation of it,
// never a newer one of the same name.
func (s *Session) deleteRequest(ctx context.Context, key string, rev int64) error {
	if rev == 0 {
		_, err := s.cli.Delete(ctx, key)
		return err
	}
	_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}
