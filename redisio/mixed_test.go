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

// TestOldAndNewLayoutTogether: lockers running the previous layout's
// scripts and lockers of this package contend for one name; at most one
// holds at a time, and each grant's token is above every token granted
// before it.
func TestOldAndNewLayoutTogether(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const name, rounds = "mixed", 25
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	inside, last := 0, int64(0)
	enter := func(who string, token int64) {
		mu.Lock()
		defer mu.Unlock()
		if inside++; inside > 1 {
			t.Errorf("%s holds beside another holder (token %d)", who, token)
		}
		if token <= last {
			t.Errorf("%s granted token %d after %d", who, token, last)
		}
		last = max(last, token)
	}
	leave := func() {
		mu.Lock()
		inside--
		mu.Unlock()
	}

	var wg sync.WaitGroup
	for i := range 2 {
		cli := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 2})
		defer cli.Close()
		s, err := NewSession(cli, WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := NewLock(cli, name, WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				g, err := l.Lock(ctx)
				if err != nil {
					t.Errorf("new locker %d: %v", i, err)
					return
				}
				enter(fmt.Sprintf("new locker %d", i), int64(g.Token()))
				leave()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("new locker %d: Unlock: %v", i, err)
					return
				}
			}
		}()
	}
	for i := range 2 {
		cli := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 2})
		defer cli.Close()
		// The old side's session: a key of the same form with a long TTL,
		// so that the test needs no refresher for it.
		id, err := cli.Incr(ctx, sessionCounter).Result()
		if err != nil {
			t.Fatal(err)
		}
		skey := fmt.Sprintf("%s%d", sessionPrefix, id)
		if err := cli.Set(ctx, skey, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		defer cli.Del(context.Background(), skey)
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("old locker %d", i)
			for range rounds {
				res, err := oldEnqueue.Run(ctx, cli, []string{name + "/seq", name + "/queue", skey},
					name, "0", "", time.Minute.Milliseconds(), name+"/wake", id).Int64Slice()
				if err != nil {
					t.Errorf("%s: enqueue: %v", who, err)
					return
				}
				key, token := fmt.Sprintf("%s/%d", name, res[0]), res[1]
				for token == 0 {
					res, err := oldCheck.Run(ctx, cli, []string{name + "/seq", name + "/queue", skey, key}, "1", name+"/wake").Int64Slice()
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
				enter(who, token)
				leave()
				if n, err := oldRelease.Run(ctx, cli, []string{name + "/queue", key, skey, name + "/seq"}, name+"/wake", "lock").Int64(); err != nil || n != 1 {
					t.Errorf("%s: release: %d, %v", who, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
