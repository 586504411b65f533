package etcdio

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// follower is one watch a session helper keeps open for the loop: a mirror's
// prefix or the key a lock waiter waits behind.
type follower struct {
	key  string
	opts []clientv3.OpOption // WithPrefix, WithFilterPut, ...
	// kind is the primitive's kind the watch serves, for
	// disco_wakeups_total: each event delivered to changed counts once. ""
	// counts nothing.
	kind string
	// synced runs on the helper each time the watch is (re)opened and etcd
	// confirmed it at revision rev: a read that catches up with what
	// happened up to rev (the watch delivers what comes after). An error
	// reopens the watch.
	synced func(ctx context.Context, rev int64) error
	// changed runs on the helper for each batch of events after synced. An
	// error reopens the watch.
	changed func(ctx context.Context, evs []*clientv3.Event) error
	// progress, if set, is told the revision of each progress notification:
	// every event up to it has been delivered.
	progress func(rev int64)
	// poke, if set, asks for a progress notification now.
	poke <-chan struct{}
}

// follow keeps f's watch open until ctx ends. The watch starts from the
// current revision, so it is in sync at once (a watch from a past revision is
// served by etcd's catch-up path, up to 100 ms late); synced then reads what
// came before. A watch that fails (compaction, a member without a leader)
// is reopened. So is a watch whose stream goes silent: after a quiet spell it
// asks etcd for a progress notification, and if none comes it moves to a new
// gRPC stream, which the client may open on another member (a member cut off
// from this client answers nothing, and its stream would wait forever). A
// watch not confirmed within the quiet spell moves at once. The client's
// balancer, not disco, picks the member of a new stream, so a move may land
// on the dark member again; each further try costs one quiet spell. Each
// read runs under a per-attempt timeout. Helper goroutine only.
func (s *Session) follow(ctx context.Context, f follower) {
	const retry = 100 * time.Millisecond
	for ctx.Err() == nil {
		s.watchOnce(ctx, f)
		ctxtime.Sleep(ctx, retry)
	}
}

// silence is how long a watch may stay quiet before follow checks its stream.
func (s *Session) silence() time.Duration {
	return max(250*time.Millisecond, min(s.ttl/4, 2*time.Second))
}

// quietSpell is silence plus up to half again, at random. etcd answers a
// progress request with one notification that the client hands to every
// watch on the stream, which restarts all their quiet spells together; the
// jitter spreads the spells so that one watch asks first, and claimProbe
// keeps the others from asking again while the answer is on its way.
func (s *Session) quietSpell() time.Duration {
	d := s.silence()
	return d + rand.N(d/2)
}

func (s *Session) watchOnce(ctx context.Context, f follower) {
	epoch := s.streamEpoch.Load()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Watches with equal metadata share one gRPC stream; a new epoch's
	// metadata makes a new stream.
	wctx = metadata.AppendToOutgoingContext(wctx, "disco-watch-stream", strconv.FormatUint(epoch, 10))
	// Watch itself waits until the stream's sender takes the request, which
	// it cannot while the connection under it is stuck: bound the wait.
	stuck := time.AfterFunc(s.silence(), cancel)
	wch := s.cli.Watch(wctx, f.key, append(f.opts, clientv3.WithCreatedNotify())...)
	if !stuck.Stop() {
		s.log.Debug("watch stream takes no requests; moving to a new stream", zap.String("key", f.key))
		s.streamEpoch.CompareAndSwap(epoch, epoch+1)
		return
	}
	quiet := time.NewTimer(s.quietSpell())
	defer quiet.Stop()
	probed, synced := false, false
	read := func(run func(context.Context) error) bool {
		rctx, done := s.attempt(ctx)
		err := run(rctx)
		done(err)
		if err != nil {
			s.log.Debug("watch read failed", zap.String("key", f.key), zap.Error(err))
			return false
		}
		return true
	}
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ok {
					s.log.Debug("watch failed", zap.String("key", f.key), zap.Error(wr.Err()))
				}
				return
			}
			quiet.Reset(s.quietSpell())
			probed = false
			switch {
			case wr.IsProgressNotify():
				if synced && f.progress != nil {
					f.progress(wr.Header.Revision)
				}
			case wr.Created && !synced:
				rev := wr.Header.Revision
				if !read(func(rctx context.Context) error { return f.synced(rctx, rev) }) {
					return
				}
				synced = true
			case synced && len(wr.Events) > 0:
				evs := wr.Events
				if f.kind != "" {
					s.metrics.Woken(f.kind, len(evs))
				}
				if !read(func(rctx context.Context) error { return f.changed(rctx, evs) }) {
					return
				}
			}
		case <-f.poke:
			if !s.requestProgress(wctx) {
				s.log.Debug("watch stream takes no requests; moving to a new stream", zap.String("key", f.key))
				s.streamEpoch.CompareAndSwap(epoch, epoch+1)
				return
			}
		case <-quiet.C:
			// A watch etcd never confirmed has no stream worth probing: its
			// member may be the dark one, so move at once.
			if probed || !synced {
				s.log.Debug("watch stream silent; moving to a new stream", zap.String("key", f.key))
				s.streamEpoch.CompareAndSwap(epoch, epoch+1)
				return
			}
			if s.claimProbe(epoch) && !s.requestProgress(wctx) {
				s.log.Debug("watch stream takes no requests; moving to a new stream", zap.String("key", f.key))
				s.streamEpoch.CompareAndSwap(epoch, epoch+1)
				return
			}
			probed = true
			quiet.Reset(s.quietSpell())
		case <-ctx.Done():
			return
		}
	}
}

// claimProbe reports whether a watch whose quiet spell ended should ask for
// a progress notification on the stream of epoch: not when another watch of
// the session asked on that stream less than a silence ago. etcd answers a
// request with one notification that the client hands to every watch of the
// stream, so that request serves this watch too, which counts itself as
// having asked: if no answer comes within its next quiet spell, it moves.
// So a stream of many quiet watches makes about one request per silence,
// however long etcd takes to answer.
func (s *Session) claimProbe(epoch uint64) bool {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probeEpoch == epoch && time.Since(s.probeAt) < s.silence() {
		return false
	}
	s.probeEpoch, s.probeAt = epoch, time.Now()
	return true
}

// requestProgress asks etcd for a progress notification on wctx's watch
// stream and reports whether the request was taken. It gives up after one
// quiet spell: the client hands the request to the stream's sender, which
// waits as long as the connection under it is stuck (a member cut off), and
// a watch helper must never wait on a stuck connection without a deadline.
// The timeout's context carries wctx's metadata, so it names the same stream.
func (s *Session) requestProgress(wctx context.Context) bool {
	pctx, cancel := context.WithTimeout(wctx, s.silence())
	defer cancel()
	return s.cli.RequestProgress(pctx) == nil
}
