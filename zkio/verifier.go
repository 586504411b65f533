package zkio

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/driver"
)

// Verifier tells a guard (guard.WithVerifier) whether a token is that of a
// current grant of one kind of disco primitive on ZooKeeper, so that a
// token no grant had cannot raise the guard's mark. It reads the ensemble
// through a session, once per raise of the mark, after a sync: the server
// the session is on (a follower may lag the leader) first catches up with
// every write the ensemble completed before the Verify, so a token that
// was superseded by then is never judged on an older state. The rules, for
// a token t of the primitive on path p:
//
//   - "lock" and "election": the first znode of p's queue now (the holder,
//     the leader) was created at zxid t;
//   - "rwlock": the epoch znode (p + EpochSuffix) was last written at zxid
//     t, and the first znode of the queue now is of the epoch's kind (a
//     writer for a write epoch, a reader for a read epoch);
//   - "semaphore" (scope p#i, semaphore.Scope): a lease under p/leases
//     claims slot i and was last written at zxid t, its claim.
//
// So a released or superseded holder's token is refused, also by a fresh
// guard with no mark, and so is a zxid at which nothing of p was written.
//
// Every Verify ends within its context's deadline or DefaultVerifierTimeout;
// when the ensemble does not answer, its error does not wrap
// fencing.ErrTokenForged, so the guard rejects the request as unverified
// and keeps its mark. (The ZooKeeper client cannot cancel a request: one
// that outlives Verify finishes, or fails, with the session's connection.)
//
// The caller owns s; a Verifier never closes it.
type Verifier struct {
	s          *Session
	kind, name string
}

// DefaultVerifierTimeout bounds each Verify whose context has no deadline.
const DefaultVerifierTimeout = 5 * time.Second

// NewVerifier returns a Verifier of the tokens that disco's primitives of
// kind ("lock", "rwlock", "election" or "semaphore") issue, read through
// s. A keyed guard verifies each request's scope (the primitive's path; a
// semaphore slot's path#slot, semaphore.Scope); an unkeyed
// guard passes none, and the Verifier then verifies path's tokens (path may
// be "" for a verifier that only keyed guards use).
func NewVerifier(s *Session, kind, path string) (*Verifier, error) {
	if s == nil {
		return nil, fmt.Errorf("zkio: NewVerifier: nil session: %w", ErrInvalidArgument)
	}
	switch kind {
	case "lock", "rwlock", "election", "semaphore":
	default:
		return nil, fmt.Errorf(`zkio: NewVerifier: kind %q, want "lock", "rwlock", "election" or "semaphore": %w`, kind, ErrInvalidArgument)
	}
	if path != "" {
		p, err := cleanPath(path)
		if err != nil {
			return nil, fmt.Errorf("zkio: NewVerifier: %w", err)
		}
		path = p
	}
	return &Verifier{s: s, kind: kind, name: path}, nil
}

// Verify returns nil if t is the token of a current grant of scope (the
// Verifier's path if scope is ""), an error wrapping fencing.ErrTokenForged
// if it is not, and any other error if the ensemble did not answer.
func (v *Verifier) Verify(ctx context.Context, scope string, t fencing.Token) error {
	if ctx == nil {
		return fmt.Errorf("zkio: verify: %w", driver.ContextErr(ctx))
	}
	if scope == "" {
		scope = v.name
	}
	p, slot := scope, ""
	if v.kind == "semaphore" {
		i := strings.LastIndexByte(scope, '#')
		if n, err := strconv.Atoi(scope[i+1:]); i < 0 || err != nil || n < 0 || strconv.Itoa(n) != scope[i+1:] {
			p = ""
		} else {
			p, slot = scope[:i], scope[i+1:]
		}
	}
	if p != "" {
		var err error
		if p, err = cleanPath(p); err != nil {
			p = ""
		}
	}
	if p == "" {
		return fmt.Errorf("zkio: token %d: no usable scope %q: %w", t, scope, fencing.ErrTokenForged)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultVerifierTimeout)
		defer cancel()
	}
	type answer struct {
		why string
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		var why string
		var err error
		if v.kind == "semaphore" {
			why, err = v.judgeSlot(p, slot, int64(t))
		} else {
			why, err = v.judge(p, int64(t))
		}
		ch <- answer{why, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		a.err = ctx.Err()
	}
	switch {
	case a.err != nil:
		return fmt.Errorf("zkio: verify token %d of %s %s: %w", t, v.kind, p, a.err)
	case a.why != "":
		return fmt.Errorf("zkio: token %d of %s %s: %s: %w", t, v.kind, p, a.why, fencing.ErrTokenForged)
	}
	return nil
}

// judge returns why t is no current grant's token ("" if it is one), or an
// error if the ensemble could not tell.
func (v *Verifier) judge(p string, t int64) (string, error) {
	conn := v.s.conn
	if err := synced(conn, p); err != nil {
		return "", err
	}
	markers := map[string][]string{"lock": {lockMarker}, "election": {latchMarker}, "rwlock": {readMarker, writeMarker}}[v.kind]
	for {
		children, _, err := conn.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return "no one holds it now", nil
		}
		if err != nil {
			return "", err
		}
		q := firstOf(children, 1, markers...)
		if len(q) == 0 {
			return "no one holds it now", nil
		}
		ok, st, err := conn.Exists(path.Join(p, q[0].name))
		if err != nil {
			return "", err
		}
		if !ok {
			continue // the head left meanwhile: read the queue again
		}
		if v.kind != "rwlock" {
			if st.Czxid != t {
				return "not the present holder's token", nil
			}
			return "", nil
		}
		data, est, err := conn.Get(p + EpochSuffix)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return "the lock has no epoch", nil
		case err != nil:
			return "", err
		case est.Mzxid != t:
			return "not the lock's present epoch", nil
		case string(data) == readEpoch && q[0].marker != readMarker,
			string(data) == writeEpoch && (q[0].marker != writeMarker || st.Czxid > t):
			return "no holder of that epoch holds now", nil
		}
		return "", nil
	}
}

// judgeSlot applies the semaphore's rule (see Verifier).
func (v *Verifier) judgeSlot(p, slot string, t int64) (string, error) {
	conn := v.s.conn
	leases := p + semLeases
	if err := synced(conn, leases); err != nil {
		return "", err
	}
	children, _, err := conn.Children(leases)
	if errors.Is(err, zk.ErrNoNode) {
		return "no one holds the slot now", nil
	}
	if err != nil {
		return "", err
	}
	for _, c := range children {
		data, st, err := conn.Get(path.Join(leases, c))
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return "", err
		case string(data) == slotPrefix+slot && st.Mzxid == t:
			return "", nil
		}
	}
	return "no lease holds the slot with that token", nil
}

// synced has the server conn is on catch up with the leader (Sync) before
// a verifier's reads: ZooKeeper serves a read from the state of the server
// that answers it, and a follower may lag the leader, so without it a
// holder the ensemble has superseded could still look current. A path
// that does not exist syncs all the same.
func synced(conn *zk.Conn, p string) error {
	if _, err := conn.Sync(p); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}
