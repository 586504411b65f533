package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/internal/reach"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// backend is the coordination service a command runs on, chosen by the
// scheme of its endpoints: etcd:// (or none), zk://, redis://.
type backend interface {
	// name is the service's name in messages: "etcd", "ZooKeeper", "Redis".
	name() string
	// newLock and newElection make a primitive on NAME with disco's TTL,
	// construction bounded by ctx; cancelOnSuspend asks lock.Do and
	// election.Lead to end fn's context at Suspended. A lock's holds carry
	// value.
	newLock(ctx context.Context, name, value string, cancelOnSuspend bool) (lock.Service, error)
	newElection(ctx context.Context, name string, cancelOnSuspend bool) (election.Service, error)
	// status reads who holds, waits for or leads NAME.
	status(ctx context.Context, name, kind string) (*report, error)
	// where says which keys (znodes) a primitive on NAME uses, for -v.
	where(name string) string
	close()
}

// Schemes of --endpoints.
const (
	schemeEtcd  = "etcd"
	schemeZK    = "zk"
	schemeRedis = "redis"
)

// endpointsOf splits the endpoints into their scheme and addresses: the
// first endpoint's scheme is every endpoint's (etcd when it has none);
// another scheme later is an error.
func endpointsOf(eps []string) (scheme string, addrs []string, err error) {
	scheme = schemeEtcd
	for i, ep := range eps {
		s, rest, ok := strings.Cut(ep, "://")
		switch {
		case !ok && i == 0:
			s, rest = schemeEtcd, ep
		case !ok:
			s, rest = scheme, ep
		}
		switch s {
		case schemeEtcd, schemeZK:
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				// The clients would take it for part of the port, and
				// wait out the dial timeout.
				return "", nil, fmt.Errorf("--endpoints %q: %q after host:port: disco takes no path there (nor a ZooKeeper chroot)", ep, rest[i:])
			}
		case schemeRedis:
		case "http", "https":
			s, rest = schemeEtcd, ep // an etcd client URL as etcdctl takes it
		default:
			return "", nil, fmt.Errorf("--endpoints %q: unknown scheme %q (want etcd://, zk:// or redis://)", ep, s)
		}
		if i == 0 {
			scheme = s
		} else if s != scheme {
			return "", nil, fmt.Errorf("--endpoints: %s:// and %s:// together: one service at a time", scheme, s)
		}
		if rest == "" {
			return "", nil, fmt.Errorf("--endpoints %q: no address", ep)
		}
		addrs = append(addrs, rest)
	}
	if len(addrs) == 0 {
		return "", nil, errors.New("--endpoints: no endpoint given")
	}
	if scheme == schemeRedis && len(addrs) > 1 {
		return "", nil, fmt.Errorf("--endpoints: %d Redis servers: disco uses one primary", len(addrs))
	}
	return scheme, addrs, nil
}

// service is what the command knows of a coordination service before it
// connects: the one place a scheme of --endpoints maps to a service.
type service struct {
	// name is the service's name in messages: "etcd", "ZooKeeper", "Redis".
	name string
	// checkName is its library's CheckName: the check its constructors make
	// of a name, which connects to nothing.
	checkName func(name string) error
	// dial connects to the service at addrs, which has answered within the
	// dial timeout.
	dial func(g *globals, ctx context.Context, addrs []string) (backend, error)
}

// services are the services by scheme.
var services = map[string]service{
	schemeEtcd:  {"etcd", etcdio.CheckName, (*globals).dialEtcd},
	schemeZK:    {"ZooKeeper", zkio.CheckName, (*globals).dialZK},
	schemeRedis: {"Redis", redisio.CheckName, (*globals).dialRedis},
}

// service returns the service of g.endpoints and its addresses.
func (g *globals) service() (service, []string, error) {
	scheme, addrs, err := endpointsOf(g.endpoints)
	if err != nil {
		return service{}, nil, usageErr(err)
	}
	return services[scheme], addrs, nil
}

// serviceRefuses returns the usage error for a NAME that the service of
// g.endpoints refuses. The error names NAME and the service and says which
// rule NAME breaks.
func (g *globals) serviceRefuses(name string) error {
	s, _, err := g.service()
	if err != nil {
		return err
	}
	if err := s.checkName(name); err != nil {
		return usageErr(fmt.Errorf("NAME %s: not a name disco can use on %s: %w", quote.Name(name), s.name, err))
	}
	return nil
}

// dial connects to the service of g.endpoints, which has answered within
// the dial timeout.
func (g *globals) dial(ctx context.Context) (backend, error) {
	s, addrs, err := g.service()
	if err != nil {
		return nil, err
	}
	return s.dial(g, ctx, addrs)
}

// maxEtcdTTL is the longest lease etcd grants.
const maxEtcdTTL = lease.MaxLeaseTTL * time.Second

func (g *globals) dialEtcd(ctx context.Context, addrs []string) (backend, error) {
	if g.ttl > maxEtcdTTL {
		// Said before connecting, as ZooKeeper's limit is, not as a
		// failed lease grant.
		return nil, usageErr(fmt.Errorf("--ttl %v: must be at most %v, the longest lease etcd grants: %w", g.ttl, maxEtcdTTL, primitives.ErrInvalidArgument))
	}
	cli, err := g.connect(ctx, addrs)
	if err != nil {
		return nil, err
	}
	return &etcdBackend{g: g, cli: cli}, nil
}

// unreachable words a failure to reach service at where, an attempt that
// began at began bounded by ctx, with the flag that set the bound.
func (g *globals) unreachable(ctx context.Context, service string, where []string, began time.Time, err error) error {
	return reach.Failed(ctx, service, where, began, "(--dial-timeout)", err)
}

// requestFailed words a request to service at where, begun at began and
// bounded by cctx (--command-timeout), that failed with err: a request that
// ran out of cctx's time says so, naming the bound and the flag.
func (g *globals) requestFailed(cctx context.Context, service string, where []string, began time.Time, err error) error {
	ranOut(cctx)
	return reach.Failed(cctx, service, where, began, "(--command-timeout)", err)
}

// timedOut words err, the failure of one of disco's own requests bounded
// by cctx, a context of withCommandTimeout's: one that ran out of cctx's
// time says so, naming the flag and its value. The backends' own words (a
// constructor's, a release's) name the store, and at most the time it did
// not answer within, never the flag that set it. A bound of the caller's
// that came first (lock.Do's on a release) is not the flag's: it is left
// as it is.
func timedOut(cctx context.Context, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !ranOut(cctx) {
		return err
	}
	var ct commandTimeout
	if !errors.As(context.Cause(cctx), &ct) {
		return err
	}
	return fmt.Errorf("%w (%v)", err, ct)
}

// commandTimeout is the cause of a context of withCommandTimeout's that ran
// out of its time, d.
type commandTimeout struct{ d time.Duration }

func (c commandTimeout) Error() string { return fmt.Sprintf("--command-timeout %v ran out", c.d) }

// withCommandTimeout returns ctx bounded by d, the command timeout: its
// cause, once d has passed, is a commandTimeout (unless ctx ends first).
func withCommandTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, commandTimeout{d})
}

// ranOut reports whether cctx's deadline has passed; then cctx is done too,
// also when a client that heeds the deadline itself failed first.
func ranOut(cctx context.Context) bool {
	dl, ok := cctx.Deadline()
	if !ok || time.Now().Before(dl) {
		return false
	}
	<-cctx.Done()
	return errors.Is(cctx.Err(), context.DeadlineExceeded)
}

// closeBounded closes a primitive on b with closePrimitive, then b. The
// primitive's Close may send a last request (a release, a lease revoke)
// that a store out of reach does not answer, and that some clients bound
// by nothing shorter than their session's TTL: disco waits for it at most
// the command timeout before it closes b, which ends such a request, and
// then at most that again.
func (g *globals) closeBounded(closePrimitive func(), b backend) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		closePrimitive()
	}()
	bound := time.NewTimer(g.commandTimeout)
	defer bound.Stop()
	select {
	case <-done:
		b.close()
		return
	case <-bound.C:
	}
	b.close()
	bound.Reset(g.commandTimeout)
	select {
	case <-done:
	case <-bound.C:
	}
}

// etcdBackend is etcd, through one client.
type etcdBackend struct {
	g   *globals
	cli *clientv3.Client
	s   *etcdio.Session // the lease of the primitive made on b; nil before
}

func (b *etcdBackend) name() string { return "etcd" }

// session grants the lease of the primitive disco makes on b, with --ttl,
// the grant bounded by ctx. etcd raises a TTL below its minimum (one and a
// half election timeouts, in whole seconds) to that minimum, and the hold
// lives by the TTL granted: a crashed disco's hold outlives it by that, and
// CMD is stopped before that may run out, not --ttl. disco says so on
// stderr, once per lease, as it does of ZooKeeper's session timeout.
func (b *etcdBackend) session(ctx context.Context) (*etcdio.Session, error) {
	s, err := etcdio.NewSession(b.cli, b.g.options(ctx)...)
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // etcdio's words, without its "NewSession" (the primitive's name goes there)
		}
		return nil, err
	}
	b.s = s
	if granted := s.TTL(); granted != b.g.ttl {
		fmt.Fprintf(b.g.stderr, "disco: warning: etcd granted a lease TTL of %v, not the --ttl %v asked for (etcd raises a TTL to at least one and a half election timeouts): a hold outlives a crashed disco by %v\n",
			granted, b.g.ttl, granted)
	}
	return s, nil
}

// opts returns the options of a primitive on b's lease, made within ctx.
func (b *etcdBackend) opts(ctx context.Context, cancelOnSuspend bool) ([]etcdio.Option, error) {
	s, err := b.session(ctx)
	if err != nil {
		return nil, err
	}
	o := []etcdio.Option{etcdio.WithSession(s), etcdio.WithContext(ctx)}
	if cancelOnSuspend {
		o = append(o, etcdio.WithCancelOnSuspend())
	}
	return o, nil
}

func (b *etcdBackend) newLock(ctx context.Context, name, value string, cos bool) (lock.Service, error) {
	o, err := b.opts(ctx, cos)
	if err != nil {
		return nil, fmt.Errorf("etcdio: new lock %s: %w", quote.Name(name), err)
	}
	return etcdio.NewLock(b.cli, name, append(o, etcdio.WithValue(value))...)
}

func (b *etcdBackend) newElection(ctx context.Context, name string, cos bool) (election.Service, error) {
	o, err := b.opts(ctx, cos)
	if err != nil {
		return nil, fmt.Errorf("etcdio: new election %s: %w", quote.Name(name), err)
	}
	return etcdio.NewElection(b.cli, name, o...)
}

func (b *etcdBackend) status(ctx context.Context, name, kind string) (*report, error) {
	return readStatus(ctx, b.g, b.cli, name, kind)
}

func (b *etcdBackend) where(name string) string {
	return fmt.Sprintf("keys under etcd prefix %q", keyPrefix(name))
}

// close revokes b's lease, if it has one, waiting for etcd at most the
// command timeout, and closes the client, which ends the revoke then.
func (b *etcdBackend) close() {
	if b.s == nil {
		b.cli.Close()
		return
	}
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		b.s.Close()
	}()
	bound := time.NewTimer(b.g.commandTimeout)
	defer bound.Stop()
	select {
	case <-revoked:
	case <-bound.C:
	}
	b.cli.Close()
	<-revoked
}

// zkBackend is ZooKeeper, through one session that its primitives share.
type zkBackend struct {
	g       *globals
	s       *zkio.Session
	servers []string
}

func (g *globals) dialZK(ctx context.Context, servers []string) (backend, error) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(g.ttl), zkio.WithContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, g.unreachable(ctx, "ZooKeeper", servers, began, ctx.Err())
		}
		if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(inner.Error(), "ZooKeeper at ") {
			err = inner // zkio's words (no such host), without its prefix
		}
		return nil, err
	}
	return &zkBackend{g: g, s: s, servers: servers}, nil
}

func (b *zkBackend) name() string { return "ZooKeeper" }

func (b *zkBackend) opts(cos bool) []zkio.Option {
	o := []zkio.Option{zkio.WithSession(b.s)}
	if cos {
		o = append(o, zkio.WithCancelOnSuspend())
	}
	return o
}

func (b *zkBackend) newLock(_ context.Context, name, value string, cos bool) (lock.Service, error) {
	b.warnGranted()
	return zkio.NewLock(nil, name, append(b.opts(cos), zkio.WithValue(value))...)
}

func (b *zkBackend) newElection(_ context.Context, name string, cos bool) (election.Service, error) {
	b.warnGranted()
	return zkio.NewElection(nil, name, b.opts(cos)...)
}

// warnGranted says on stderr when the session timeout ZooKeeper granted
// is not --ttl. The server keeps it between its minSessionTimeout and
// maxSessionTimeout (by default 2 and 20 ticks), and the holds on the
// session live by it: a crashed disco's hold outlives it by the timeout
// granted, and CMD is stopped before that may run out, not --ttl. Said by
// the commands that hold a session (status holds none), once per session.
func (b *zkBackend) warnGranted() {
	if granted := b.s.Timeout(); granted != b.g.ttl {
		fmt.Fprintf(b.g.stderr, "disco: warning: ZooKeeper granted a session timeout of %v, not the --ttl %v asked for (the server keeps it between its minSessionTimeout and maxSessionTimeout): a hold outlives a crashed disco by %v\n",
			granted, b.g.ttl, granted)
	}
}

func (b *zkBackend) where(name string) string {
	return fmt.Sprintf("znodes under %s", name)
}

func (b *zkBackend) close() { b.s.Close() }

// silentRedis drops go-redis's log (it logs failed dials on its own): disco
// reports failures itself, once, and logs nothing else.
type silentRedis struct{}

func (silentRedis) Printf(context.Context, string, ...any) {}

// redisBackend is one Redis primary, through one client.
type redisBackend struct {
	g   *globals
	cli *redis.Client
}

// dialRedis connects to addrs[0] (endpointsOf takes one Redis primary).
func (g *globals) dialRedis(ctx context.Context, addrs []string) (backend, error) {
	addr := addrs[0]
	opt, err := redis.ParseURL("redis://" + addr)
	if err != nil {
		return nil, usageErr(fmt.Errorf("--endpoints redis://%s: %w", addr, err))
	}
	redis.SetLogger(silentRedis{}) // the client's logger is global
	opt.DialTimeout = g.dialTimeout
	opt.ContextTimeoutEnabled = true // so that the dial timeout bounds the ping
	cli := redis.NewClient(opt)
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	// The client heeds ctx's deadline in a read but not its cancellation
	// (a signal): closing the client ends the ping then.
	stopClose := context.AfterFunc(ctx, func() { cli.Close() })
	err = cli.Ping(ctx).Err()
	if !stopClose() && err == nil {
		err = ctx.Err() // answered as ctx ended, and closed
	}
	if err != nil {
		cli.Close()
		return nil, g.unreachable(ctx, "Redis", []string{opt.Addr}, began, err)
	}
	return &redisBackend{g: g, cli: cli}, nil
}

func (b *redisBackend) name() string { return "Redis" }

func (b *redisBackend) opts(ctx context.Context, cos bool) []redisio.Option {
	o := []redisio.Option{redisio.WithTTL(b.g.ttl), redisio.WithContext(ctx)}
	if cos {
		o = append(o, redisio.WithCancelOnSuspend())
	}
	return o
}

func (b *redisBackend) newLock(ctx context.Context, name, value string, cos bool) (lock.Service, error) {
	return redisio.NewLock(b.cli, name, append(b.opts(ctx, cos), redisio.WithValue(value))...)
}

func (b *redisBackend) newElection(ctx context.Context, name string, cos bool) (election.Service, error) {
	return redisio.NewElection(b.cli, name, b.opts(ctx, cos)...)
}

func (b *redisBackend) where(name string) string {
	return fmt.Sprintf("keys %s/*", name)
}

func (b *redisBackend) close() { b.cli.Close() }
