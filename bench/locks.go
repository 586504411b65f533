package main

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives/lock"
)

// locker is one owner's handle on a mutual-exclusion lock, made the way a
// separate process would make it: its own client connection, its own session
// and lease. lock returns the hold's fencing token.
type locker interface {
	lock(ctx context.Context) (token int64, err error)
	unlock(ctx context.Context) error
	close() error
}

// lockLib is one implementation under test.
type lockLib struct {
	name string
	open func(cli *clientv3.Client, prefix string) (locker, error)
}

// discoLib is disco's etcdio.NewLock, one session per owner.
var discoLib = lockLib{name: "disco", open: func(cli *clientv3.Client, prefix string) (locker, error) {
	s, err := etcdio.NewLock(cli, prefix)
	if err != nil {
		return nil, err
	}
	return discoLocker{s}, nil
}}

type discoLocker struct{ s lock.Service }

func (d discoLocker) lock(ctx context.Context) (int64, error) {
	g, err := d.s.Lock(ctx)
	return int64(g.FencingToken), err
}
func (d discoLocker) unlock(ctx context.Context) error { return d.s.Unlock(ctx) }
func (d discoLocker) close() error                     { return d.s.Close() }

// etcdMutexLib is etcd's own concurrency.Mutex on a concurrency.Session
// (default TTL 60s, the same as disco's).
var etcdMutexLib = lockLib{name: "etcd-mutex", open: func(cli *clientv3.Client, prefix string) (locker, error) {
	s, err := concurrency.NewSession(cli)
	if err != nil {
		return nil, err
	}
	return &etcdMutexLocker{s: s, m: concurrency.NewMutex(s, prefix)}, nil
}}

type etcdMutexLocker struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

func (e *etcdMutexLocker) lock(ctx context.Context) (int64, error) {
	if err := e.m.Lock(ctx); err != nil {
		return 0, err
	}
	// The revision at which the Mutex saw itself first: monotonic across
	// holders, the natural fencing token for concurrency.Mutex.
	return e.m.Header().Revision, nil
}
func (e *etcdMutexLocker) unlock(ctx context.Context) error { return e.m.Unlock(ctx) }
func (e *etcdMutexLocker) close() error                     { return e.s.Close() }

// putDeleteLib is the floor for an uncontended lock: one Put and one Delete
// of a key, the fewest writes any etcd lock can make. It is not a lock.
var putDeleteLib = lockLib{name: "put+delete", open: func(cli *clientv3.Client, prefix string) (locker, error) {
	return &putDelete{cli: cli, key: prefix + "/k"}, nil
}}

type putDelete struct {
	cli *clientv3.Client
	key string
}

func (p *putDelete) lock(ctx context.Context) (int64, error) {
	resp, err := p.cli.Put(ctx, p.key, "")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (p *putDelete) unlock(ctx context.Context) error {
	resp, err := p.cli.Delete(ctx, p.key)
	if err == nil && resp.Deleted != 1 {
		err = fmt.Errorf("put+delete: deleted %d keys", resp.Deleted)
	}
	return err
}
func (p *putDelete) close() error { return nil }
