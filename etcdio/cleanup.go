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
// background and returns the first attempt's error.
// An unsure key (see markUnsure) is deleted once more later, by name.
func (s *Session) deleteKey(key string, rev int64) error {
	err := s.deleteOnce(s.ctx, key, rev)
	if err != nil && s.ctx.Err() == nil && s.cli.Ctx().Err() == nil {
		s.deleteLater(key, rev)
	}
	if s.takeUnsure(key) {
		s.deleteAgainLater(key)
	}
	return err
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

// deleteLater deletes key, created at rev (0: unknown), in the background,
// retrying with backoff until it succeeds or the session or client ends.
func (s *Session) deleteLater(key string, rev int64) {
	s.goHelper(func(ctx context.Context) {
		backoff := ctxtime.NewBackoff(100*time.Millisecond, 2*time.Second)
		for ctx.Err() == nil && s.cli.Ctx().Err() == nil {
			err := s.deleteOnce(ctx, key, rev)
			if err == nil {
				return
			}
			s.log.Debug("could not delete an abandoned key; retrying", zap.String("key", key), zap.Error(err))
			backoff.Wait(ctx)
		}
	})
}

// deleteOnce makes one attempt (see attempt). With a known rev it deletes
// only that incarnation of the key, never a newer one of the same name.
func (s *Session) deleteOnce(ctx context.Context, key string, rev int64) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.cli.Ctx(), cancel)()
	ctx, done := s.attempt(ctx)
	defer func() { done(err) }()
	if rev == 0 {
		_, err = s.cli.Delete(ctx, key)
		return err
	}
	_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}
