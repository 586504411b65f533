package redisio

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
)

// The lock protocol of the previous layout (queue and hold keys alone, no
// name/held), verbatim, as an older disco beside this one runs it.
const (
	oldHead = `
local function head(q)
  local removed = false
  while true do
    local h = redis.call('ZRANGE', q, 0, 0)
    if #h == 0 then return false, removed end
    local k = h[1]
    local s = redis.call('HGET', k, 's')
    if s and redis.call('EXISTS', s) == 1 then return k, removed end
    redis.call('ZREM', q, k)
    if s then redis.call('DEL', k) end
    removed = true
  end
end
`
	oldFirstWaiting = `
local function firstWaiting(q)
  local items = redis.call('ZRANGE', q, 0, 63)
  for _, e in ipairs(items) do
    if redis.call('HEXISTS', e, 't') == 0 then return e end
  end
  return items[1] or ''
end
`
)

var (
	oldEnqueue = redis.NewScript(oldHead + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1} end
local h, removed = head(KEYS[2])
if ARGV[2] == '1' and h then
  if removed then redis.call('PUBLISH', ARGV[5], h) end
  return {-2}
end
local c = redis.call('INCR', KEYS[1])
local k = ARGV[1] .. '/' .. c
redis.call('HSET', k, 's', KEYS[3], 'l', ARGV[6], 'v', ARGV[3])
redis.call('PEXPIRE', k, ARGV[4])
redis.call('ZADD', KEYS[2], c, k)
if not h then
  redis.call('HSET', k, 't', c)
  redis.call('PUBLISH', ARGV[5], k)
  return {c, c}
end
if removed then redis.call('PUBLISH', ARGV[5], h) end
return {c, 0}
`)
	oldCheck = redis.NewScript(oldHead + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1} end
if redis.call('EXISTS', KEYS[4]) == 0 then return {-3} end
local h, removed = head(KEYS[2])
if not h then return {-3} end
if h ~= KEYS[4] then
  if removed then redis.call('PUBLISH', ARGV[2], h) end
  return {0}
end
local t = redis.call('HGET', KEYS[4], 't')
if not t then
  if ARGV[1] == '1' then
    t = redis.call('INCR', KEYS[1])
  else
    t = redis.call('ZSCORE', KEYS[2], KEYS[4])
  end
  redis.call('HSET', KEYS[4], 't', t)
  redis.call('PUBLISH', ARGV[2], h)
end
return {1, tonumber(t)}
`)
	oldRelease = redis.NewScript(oldHead + oldFirstWaiting + `
local r = 0
if redis.call('HGET', KEYS[2], 's') == KEYS[3] then
  redis.call('DEL', KEYS[2])
  r = 1
end
local queued = redis.call('ZREM', KEYS[1], KEYS[2])
if r == 1 or queued == 1 then
  local h = head(KEYS[1])
  if h and ARGV[2] ~= '' and redis.call('HEXISTS', h, 't') == 0 then
    local t
    if ARGV[2] == 'lock' then
      t = redis.call('INCR', KEYS[4])
    else
      t = redis.call('ZSCORE', KEYS[1], h)
    end
    redis.call('HSET', h, 't', t)
    redis.call('PUBLISH', ARGV[1], h)
  else
    redis.call('PUBLISH', ARGV[1], firstWaiting(KEYS[1]))
  end
end
return r
`)
)

// mixedRun is a run of lockers of this package beside lockers of an older
// disco on one name: it fails the test if two hold at once, or if a grant's
// token is not above every token granted before it.
type mixedRun struct {
	t      *testing.T
	r      *testserver.Redis
	ctx    context.Context
	name   string
	mu     sync.Mutex
	inside int
	last   int64
	wg     sync.WaitGroup
}

func newMixedRun(t *testing.T, name string) *mixedRun {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &mixedRun{t: t, r: r, ctx: ctx, name: name}
}

// enter records who's grant of token; leave its end.
func (m *mixedRun) enter(who string, token int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inside++; m.inside > 1 {
		m.t.Errorf("%s holds beside another holder (token %d)", who, token)
	}
	if token <= m.last {
		m.t.Errorf("%s granted token %d after %d", who, token, m.last)
	}
	m.last = max(m.last, token)
}

func (m *mixedRun) leave() {
	m.mu.Lock()
	m.inside--
	m.mu.Unlock()
}

// client is a client of the run's server, closed at the test's end.
func (m *mixedRun) client() *redis.Client {
	cli := redis.NewClient(&redis.Options{Addr: m.r.Addr, PoolSize: 2})
	m.t.Cleanup(func() { cli.Close() })
	return cli
}

// newLock is a lock of this package on the run's name, on a session of
// its own with opts.
func (m *mixedRun) newLock(opts ...Option) lock.Service {
	cli := m.client()
	s, err := NewSession(cli, opts...)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { s.Close() })
	l, err := NewLock(cli, m.name, WithSession(s))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { l.Close() })
	return l
}

// newLockers starts n lockers of this package, each on a session of its
// own with opts, each locking and unlocking rounds times.
func (m *mixedRun) newLockers(n, rounds int, opts ...Option) {
	for i := range n {
		l := m.newLock(opts...)
		m.wg.Go(func() {
			for range rounds {
				g, err := l.Lock(m.ctx)
				if err != nil {
					m.t.Errorf("new locker %d: %v", i, err)
					return
				}
				m.enter(fmt.Sprintf("new locker %d", i), int64(g.Token()))
				m.leave()
				if err := l.Unlock(m.ctx); err != nil {
					m.t.Errorf("new locker %d: Unlock: %v", i, err)
					return
				}
			}
		})
	}
}

// oldSession is an older disco's session on cli: a key of the same form
// with a long TTL, so that the test needs no refresher for it.
func (m *mixedRun) oldSession(cli *redis.Client) (key string, id int64) {
	id, err := cli.Incr(m.ctx, sessionCounter).Result()
	if err != nil {
		m.t.Fatal(err)
	}
	key = fmt.Sprintf("%s%d", sessionPrefix, id)
	if err := cli.Set(m.ctx, key, "1", time.Minute).Err(); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { cli.Del(context.Background(), key) })
	return key, id
}

// TestOldAndNewLayoutTogether: lockers running the previous layout's
// scripts and lockers of this package contend for one name; at most one
// holds at a time, and each grant's token is above every token granted
// before it. (The old side wakes on the name's channel only, where this
// package's waiters do not listen: they are granted behind an old release
// at their next timed look, TTL/4.)
func TestOldAndNewLayoutTogether(t *testing.T) {
	const name, rounds = "mixed", 12
	m := newMixedRun(t, name)
	m.newLockers(2, rounds, WithTTL(2*time.Second))
	for i := range 2 {
		cli := m.client()
		skey, id := m.oldSession(cli)
		m.wg.Go(func() {
			who := fmt.Sprintf("old locker %d", i)
			for range rounds {
				res, err := oldEnqueue.Run(m.ctx, cli, []string{name + "/seq", name + "/queue", skey},
					name, "0", "", time.Minute.Milliseconds(), name+"/wake", id).Int64Slice()
				if err != nil {
					t.Errorf("%s: enqueue: %v", who, err)
					return
				}
				key, token := fmt.Sprintf("%s/%d", name, res[0]), res[1]
				for token == 0 {
					res, err := oldCheck.Run(m.ctx, cli, []string{name + "/seq", name + "/queue", skey, key}, "1", name+"/wake").Int64Slice()
					if err != nil {
						t.Errorf("%s: check: %v", who, err)
						return
					}
					if res[0] == 1 {
						token = res[1]
					} else if res[0] != 0 {
						t.Errorf("%s: check: %v", who, res)
						return
					}
					time.Sleep(2 * time.Millisecond) // the old side's re-check interval
				}
				m.enter(who, token)
				m.leave()
				if n, err := oldRelease.Run(m.ctx, cli, []string{name + "/queue", key, skey, name + "/seq"}, name+"/wake", "lock").Int64(); err != nil || n != 1 {
					t.Errorf("%s: release: %d, %v", who, n, err)
					return
				}
			}
		})
	}
	m.wg.Wait()
}

// luaNameWake is the wake of the protocol before this one: a message on the
// name's channel alone, which every session using the name listened on.
const luaNameWake = `
local function wake(ch, k)
  redis.call('PUBLISH', ch, k or '')
end
`

// The previous protocol's lock scripts: this layout, each wake on the
// name's channel only (the scripts were these, with each wake(ch, k) a
// PUBLISH of k on ch).
var (
	prevEnqueue = redis.NewScript(luaNameWake + luaState + luaEnqueue)
	prevCheck   = redis.NewScript(luaNameWake + luaState + luaCheck)
	prevRelease = redis.NewScript(luaNameWake + luaState + luaFirstWaiting + luaRelease)
)

// prevLocker is a locker of the previous protocol: its session listens on
// the name's channel and wakes a waiter on a message that names its hold.
// It has no re-check timer (the previous disco looks again every TTL/4),
// so it is woken by a message or never.
type prevLocker struct {
	m    *mixedRun
	who  string
	cli  *redis.Client
	skey string
	id   int64
	msgs <-chan *redis.Message
	n    int
}

func (m *mixedRun) prevLocker(who string) *prevLocker {
	cli := m.client()
	skey, id := m.oldSession(cli)
	ps := cli.Subscribe(m.ctx, m.name+"/wake")
	m.t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(m.ctx); err != nil {
		m.t.Fatal(err)
	}
	return &prevLocker{m: m, who: who, cli: cli, skey: skey, id: id, msgs: ps.Channel(redis.WithChannelSize(1000))}
}

func (p *prevLocker) keys(hold ...string) []string {
	n := p.m.name
	return append([]string{n + "/seq", n + "/queue", n + "/held", p.skey}, hold...)
}

// enqueue queues a hold: its key, and its token if it was granted at once.
func (p *prevLocker) enqueue() (string, int64, error) {
	p.n++
	res, err := prevEnqueue.Run(p.m.ctx, p.cli, p.keys(), p.m.name, "0", "", time.Minute.Milliseconds(),
		p.m.name+"/wake", p.id, fmt.Sprintf("prev-%d", p.n)).Int64Slice()
	if err != nil {
		return "", 0, fmt.Errorf("%s: enqueue: %w", p.who, err)
	}
	return fmt.Sprintf("%s/%d", p.m.name, res[0]), res[1], nil
}

// look runs the check script on key once: its token if it is granted now,
// else 0.
func (p *prevLocker) look(key string) (int64, error) {
	res, err := prevCheck.Run(p.m.ctx, p.cli, p.keys(key), "1", p.m.name+"/wake").Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("%s: check: %w", p.who, err)
	}
	switch res[0] {
	case 1:
		return res[1], nil
	case 0:
		return 0, nil
	}
	return 0, fmt.Errorf("%s: check: %v", p.who, res)
}

// await looks at key again at each message naming it, until it is
// granted: its token.
func (p *prevLocker) await(key string) (int64, error) {
	for {
		select {
		case msg := <-p.msgs:
			if msg.Payload != key {
				continue
			}
		case <-p.m.ctx.Done():
			return 0, fmt.Errorf("%s: no wake message named %s: %w", p.who, key, p.m.ctx.Err())
		}
		if token, err := p.look(key); err != nil || token != 0 {
			return token, err
		}
	}
}

func (p *prevLocker) release(key string) error {
	n, err := prevRelease.Run(p.m.ctx, p.cli, p.keys(key), p.m.name+"/wake", "lock").Int64()
	if err != nil || n != 1 {
		return fmt.Errorf("%s: release %s: %d, %v", p.who, key, n, err)
	}
	return nil
}

// TestPreviousWakeProtocolTogether: lockers of the previous protocol, whose
// releases wake on the name's channel and whose waiters listen there only,
// beside lockers of this package, which wake a waiter on its session's
// channel and listen there only. This package's releases publish on the
// name's channel too, so a previous waiter behind one is woken by a
// message, with no timer; a waiter of this package behind a previous
// release is granted at its next timed look (TTL/4). At most one holds at a
// time, and each grant's token is above every one before it.
func TestPreviousWakeProtocolTogether(t *testing.T) {
	const name, rounds = "prev-wake", 10
	m := newMixedRun(t, name)
	opts := []Option{WithTTL(2 * time.Second)} // a look every 500 ms

	// A previous waiter behind a holder of this package: woken by its
	// release's message.
	l := m.newLock(opts...)
	g, err := l.Lock(m.ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := m.prevLocker("previous locker")
	key, token, err := p.enqueue()
	if err != nil || token != 0 {
		t.Fatalf("previous locker queued behind a holder: %s %d, %v", key, token, err)
	}
	if token, err := p.look(key); err != nil || token != 0 {
		t.Fatalf("previous locker's first look behind a holder: %d, %v", token, err)
	}
	waited := make(chan error, 1)
	go func() {
		tok, err := p.await(key)
		if err == nil && tok <= int64(g.Token()) {
			err = fmt.Errorf("previous locker granted token %d after %d", tok, g.Token())
		}
		waited <- err
	}()
	if err := l.Unlock(m.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	// A waiter of this package behind a previous holder: granted at its
	// timed look.
	got := make(chan error, 1)
	go func() {
		_, err := l.Lock(m.ctx)
		if err == nil {
			err = l.Unlock(m.ctx)
		}
		got <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
		n, err := m.client().ZCard(m.ctx, name+"/queue").Result()
		return err == nil && n == 2
	})
	if err := p.release(key); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// Both contend.
	m.newLockers(2, rounds, opts...)
	for i := range 2 {
		p := m.prevLocker(fmt.Sprintf("previous locker %d", i))
		m.wg.Go(func() {
			for range rounds {
				key, token, err := p.enqueue()
				if err == nil && token == 0 {
					token, err = p.look(key)
				}
				if err == nil && token == 0 {
					token, err = p.await(key)
				}
				if err != nil {
					t.Error(err)
					return
				}
				m.enter(p.who, token)
				m.leave()
				if err := p.release(key); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	m.wg.Wait()
}
