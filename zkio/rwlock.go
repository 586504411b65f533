package zkio

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

var rwlockSpec = &spec{kind: "rwlock", markers: []string{readMarker, writeMarker}, notHeld: rwlock.ErrNotHeld,
	taken: rwlock.ErrRWLockTaken, token: epochToken}

// EpochSuffix is appended to a read/write lock's path to name its epoch
// znode, the sibling that issues its fencing tokens.
const EpochSuffix = ".epoch"

// Epoch znode values: who advanced the epoch last.
const (
	readEpoch  = "read"
	writeEpoch = "write"
)

// NewRWLock returns a read/write lock on the znode path. Readers and
// writers queue in one order: a writer holds when it is first, a reader
// when no writer is ahead of it, so a waiting writer holds back the readers
// after it. Its znodes are named as Curator's InterProcessReadWriteLock
// names them (<path>/_c_<uuid>-__READ__<seq> and __WRIT__<seq>) and follow
// the same order, but interoperating with Curator's read/write lock is
// neither required nor tested. Sessions as NewLock.
//
// Tokens come from the epoch znode, path + EpochSuffix, a persistent
// sibling of path that Curator never looks at:
//
//   - A writer that holds sets the epoch to "write", in a transaction (a
//     multi) that also checks its own znode still exists. Its token is that
//     transaction's zxid, above every token issued before.
//   - A reader that holds reads the epoch. If a writer set it last (or it
//     does not exist yet), the reader sets it to "read" with a check of its
//     version, in a multi with the check of its own znode; a reader that
//     loses the race reads again and joins the epoch the winner made. Its
//     token is the zxid of the read epoch's write. Every reader between two
//     writers thus shares one token, above the previous writer's.
//
// The epoch znode outlives every holder; RetireRWLock removes it when the
// name is retired.
func NewRWLock(servers []string, path string, opts ...Option) (rwlock.Service, error) {
	svc, err := newService(servers, path, rwlockSpec, opts)
	if err != nil {
		return nil, err
	}
	return &zkRWLock{svc}, nil
}

type zkRWLock struct{ *service }

func (l *zkRWLock) grant(h driver.Hold, err error) (rwlock.Grant, error) {
	if err != nil {
		return rwlock.Grant{}, err
	}
	return rwlock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.s.Timeout(),
		Mode: h.Mode, Created: h.Created}, nil
}

// RLock blocks until this owner holds a read grant.
func (l *zkRWLock) RLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Read, "", false))
}

// TryRLock takes a read grant only if no writer holds or waits.
func (l *zkRWLock) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Read, "", true))
}

// RUnlock releases the current read grant; rwlock.ErrNotHeld if there is
// none.
func (l *zkRWLock) RUnlock(ctx context.Context) error {
	return l.release(ctx, driver.InMode(rwlock.Read))
}

// Lock blocks until this owner holds the write grant.
func (l *zkRWLock) Lock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, "", false))
}

// TryLock takes the write grant only if nobody holds or waits.
func (l *zkRWLock) TryLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, "", true))
}

// Unlock releases the current write grant; rwlock.ErrNotHeld if there is
// none.
func (l *zkRWLock) Unlock(ctx context.Context) error {
	return l.release(ctx, driver.InMode(rwlock.Write))
}

// Release releases exactly g (read or write), matched by its Created.
func (l *zkRWLock) Release(ctx context.Context, g rwlock.Grant) error {
	return l.release(ctx, driver.CreatedAt(g.Created))
}

// errRaced says another holder advanced the epoch first, or it was
// retired meanwhile: read it again.
var errRaced = errors.New("zkio: the epoch moved")

// errNoEpoch says the epoch znode does not exist.
var errNoEpoch = errors.New("zkio: no epoch")

// epochToken issues the token of the hold on node, which holds now, as
// NewRWLock's doc describes. It retries while the connection is down.
func epochToken(ctx context.Context, svc *service, node string, mode rwlock.Mode) (int64, error) {
	epoch := svc.path + EpochSuffix
	for {
		if err := svc.live(ctx); err != nil {
			return 0, err
		}
		// An attempt left running when ctx ends may advance the epoch,
		// as one whose answer was lost: a token no grant carries.
		var token int64
		err := svc.request(ctx, func() (err error) {
			token, err = epochOnce(svc.s.conn, epoch, node, mode)
			return err
		}, nil)
		switch {
		case err == nil:
			return token, nil
		case errors.As(err, new(leftRunning)):
			return 0, err
		case errors.Is(err, errRaced), errors.Is(err, errNoEpoch):
			continue
		case errors.Is(err, zk.ErrNoNode):
			return 0, fmt.Errorf("zkio: %s deleted before its grant: %w", node, primitives.ErrLost)
		case retryable(err):
			if !svc.pauseRetry(ctx) {
				return 0, svc.cause(ctx)
			}
		default:
			return 0, fmt.Errorf("zkio: advance %s: %w", epoch, err)
		}
	}
}

// epochOnce makes one attempt: a writer advances the epoch, a reader joins
// the current read epoch or starts one. zk.ErrNoNode means node is gone.
func epochOnce(conn *zk.Conn, epoch, node string, mode rwlock.Mode) (int64, error) {
	if mode == rwlock.Write {
		token, err := advance(conn, epoch, node, writeEpoch, -1)
		if errors.Is(err, errNoEpoch) {
			return advance(conn, epoch, node, writeEpoch, -2)
		}
		return token, err
	}
	data, st, err := conn.Get(epoch)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return advance(conn, epoch, node, readEpoch, -2)
	case err != nil:
		return 0, err
	case string(data) != readEpoch:
		return advance(conn, epoch, node, readEpoch, st.Version)
	}
	// Join the read epoch. node still existing after the read means no
	// writer behind it can have held, so the epoch read is the current one.
	ok, _, err := conn.Exists(node)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, zk.ErrNoNode
	}
	return st.Mzxid, nil
}

// advance writes value to the epoch znode if its version is version (-1:
// any; -2: create it, it must not exist), in one multi with a check that
// node exists, and returns the zxid of that multi.
func advance(conn *zk.Conn, epoch, node, value string, version int32) (int64, error) {
	write := any(&zk.SetDataRequest{Path: epoch, Data: []byte(value), Version: version})
	if version == -2 {
		write = &zk.CreateRequest{Path: epoch, Data: []byte(value), Acl: zk.WorldACL(zk.PermAll)}
	}
	res, err := conn.Multi(&zk.CheckVersionRequest{Path: node, Version: -1}, write)
	if len(res) == 2 {
		switch {
		case errors.Is(res[0].Error, zk.ErrNoNode):
			return 0, zk.ErrNoNode
		case errors.Is(res[1].Error, zk.ErrNoNode):
			return 0, errNoEpoch
		case errors.Is(res[1].Error, zk.ErrBadVersion), errors.Is(res[1].Error, zk.ErrNodeExists):
			return 0, errRaced
		}
	}
	if err != nil {
		return 0, err
	}
	if version != -2 {
		return res[1].Stat.Mzxid, nil
	}
	// A create's response carries no stat: the epoch's czxid is the
	// multi's zxid, whatever wrote it since. If this read fails, the caller
	// tries again, and a writer's new advance or a reader's join of the
	// epoch it made is as good a token.
	ok, st, err := conn.Exists(epoch)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, errRaced // retired meanwhile: start again
	}
	return st.Czxid, nil
}

// ErrInUse is returned by RetireRWLock while the lock has holders or
// waiters.
var ErrInUse = errors.New("zkio: in use")

// RetireRWLock deletes the epoch znode of the read/write lock on path
// (path + EpochSuffix), the one znode the lock leaves after every holder is
// gone, through the session s. It fails with an error wrapping ErrInUse,
// deleting nothing, while a reader or writer holds or waits. Call it only
// once nobody uses the name: ZooKeeper cannot check the queue and delete
// the epoch in one step, so a reader that comes between the two holds in
// an epoch that is then deleted, and a reader after it opens a new epoch
// with a higher token while the first still holds (a guard then refuses
// the first reader). Tokens still only grow: a new epoch znode gets a
// higher zxid than any token issued before. etcdio's RetireRWLock checks
// and deletes in one transaction.
func RetireRWLock(ctx context.Context, s *Session, path string) error {
	p, err := cleanPath(path)
	if err != nil {
		return fmt.Errorf("zkio: retire rwlock: %w", err)
	}
	fail := func(err error) error { return fmt.Errorf("zkio: retire rwlock %s: %w", p, err) }
	if s == nil {
		return fail(fmt.Errorf("nil session: %w", ErrInvalidArgument))
	}
	if err := driver.ContextErr(ctx); err != nil {
		return fail(err)
	}
	if err := s.Err(); err != nil {
		return fail(err)
	}
	children, _, err := s.conn.Children(p)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fail(err)
	}
	if q := queueOf(children, rwlockSpec.markers...); len(q) > 0 {
		return fail(fmt.Errorf("%d readers or writers hold or wait: %w", len(q), ErrInUse))
	}
	if err := s.conn.Delete(p+EpochSuffix, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fail(err)
	}
	return nil
}
