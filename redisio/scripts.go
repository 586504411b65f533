package redisio

import "github.com/redis/go-redis/v9"

// The Lua scripts below are every state change redisio makes. Each runs
// atomically on the server, so a grant, its token and the queue it comes
// from are one step. Keys of one scope (a primitive's name) are:
//
//	name/seq    the scope's counter: Created of every hold, and lock tokens
//	name/queue  sorted set of hold keys, scored by their Created (FIFO)
//	name/<n>    one hold (held or waiting), a hash: s = its session's key,
//	            l = the session's id, v = an election value, m = an rwlock
//	            hold's mode (r or w), t = its token once granted; it
//	            carries the session's PX expiry
//	name/rtok   an rwlock's read token: shared by readers until the next
//	            writer is granted
//	name/wake   pub/sub channel; each message is the key of a hold that
//	            may now be granted (or "")
//
// A hold is dead when its key or its session's key is gone; head() removes
// dead holds from the front of a queue whenever a script looks at it.

// luaHead is shared by the scripts that look at a queue's front. It returns
// the first live hold key (or false) and whether it removed dead ones.
const luaHead = `
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

// enqueueScript creates a hold and queues it; if nobody is ahead it is
// granted in the same step.
// KEYS: seq, queue, session key. ARGV: name, try (1/0), value, ttl ms,
// wake channel, session id.
// Returns {-1} no session, {-2} taken (try), {created, token} (token 0:
// waiting).
var enqueueScript = redis.NewScript(luaHead + `
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

// checkScript grants a waiting hold if it is now the queue's head. A lock's
// token is a fresh increment of the counter; an election's is the hold's
// Created.
// KEYS: seq, queue, session key, hold key. ARGV: lock (1/0), wake channel.
// Returns {-1} no session, {-3} hold gone, {0} still waiting, {1, token}.
var checkScript = redis.NewScript(luaHead + `
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

// luaFirstWaiting returns the first of the queue's first 64 holds that has
// no token yet (a waiter that may now be granted), else the head, else ”.
const luaFirstWaiting = `
local function firstWaiting(q)
  local items = redis.call('ZRANGE', q, 0, 63)
  for _, e in ipairs(items) do
    if redis.call('HEXISTS', e, 't') == 0 then return e end
  end
  return items[1] or ''
end
`

// releaseScript deletes a hold (held or waiting) of this session and hands
// the lock on: for a lock or an election it grants the queue's new head in
// the same step (a lock's token a new increment of the counter, an
// election's the head's Created), so that the next holder's own check only
// reads; then it wakes that head, or for an rwlock the first waiter.
// KEYS: queue, hold key, session key, seq. ARGV: wake channel, handoff
// (lock, election or "").
// Returns 1 if the hold existed, 0 if it was already gone.
var releaseScript = redis.NewScript(luaHead + luaFirstWaiting + `
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

// leaderScript returns the queue's live head: {key, value, token, session
// id}, or {} if the queue is empty.
// KEYS: queue. ARGV: wake channel.
var leaderScript = redis.NewScript(luaHead + `
local h, removed = head(KEYS[1])
if removed then redis.call('PUBLISH', ARGV[1], h or '') end
if not h then return {} end
local f = redis.call('HMGET', h, 'v', 'l')
return {h, f[1] or '', tonumber(redis.call('ZSCORE', KEYS[1], h)), tonumber(f[2] or '0')}
`)

// proclaimScript sets the value of a hold that heads its queue.
// KEYS: queue, hold key, session key. ARGV: value, wake channel.
// Returns 1 if set, 0 if the hold does not lead.
var proclaimScript = redis.NewScript(luaHead + `
if redis.call('HGET', KEYS[2], 's') ~= KEYS[3] then return 0 end
local h = head(KEYS[1])
if h ~= KEYS[2] then return 0 end
redis.call('HSET', KEYS[2], 'v', ARGV[1])
redis.call('PUBLISH', ARGV[2], h)
return 1
`)

// refreshScript extends the session's key and its holds' keys by the TTL.
// KEYS: session key, hold keys... ARGV: ttl ms.
// Returns -1 if the session key is gone, else the hold keys that are gone.
var refreshScript = redis.NewScript(`
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return -1 end
local missing = {}
for i = 2, #KEYS do
  if redis.call('PEXPIRE', KEYS[i], ARGV[1]) == 0 then table.insert(missing, KEYS[i]) end
end
return missing
`)

// sessionScript creates a session: a new id from the global counter and its
// key with the TTL. KEYS: counter. ARGV: key prefix, ttl ms. Returns the id.
var sessionScript = redis.NewScript(`
local id = redis.call('INCR', KEYS[1])
redis.call('SET', ARGV[1] .. id, '1', 'PX', ARGV[2])
return id
`)

// luaRW holds the read/write lock's rules: a writer is granted at the head
// of the queue; a reader when no live writer is ahead of it. A writer's
// token is a new increment of the counter, and it ends the read epoch; a
// reader's is the epoch's token (name/rtok), opened by a new increment.
const luaRW = `
local function writerAhead(q, k)
  local items = {}
  if k then
    local rank = redis.call('ZRANK', q, k)
    if rank and rank > 0 then items = redis.call('ZRANGE', q, 0, rank - 1) end
  else
    items = redis.call('ZRANGE', q, 0, -1)
  end
  local removed = false
  for _, e in ipairs(items) do
    local s = redis.call('HGET', e, 's')
    if s and redis.call('EXISTS', s) == 1 then
      if redis.call('HGET', e, 'm') == 'w' then return true, removed end
    else
      redis.call('ZREM', q, e)
      if s then redis.call('DEL', e) end
      removed = true
    end
  end
  return false, removed
end
local function grantToken(seq, rtok, mode, fresh)
  if mode == 'w' then
    redis.call('DEL', rtok)
    return fresh or redis.call('INCR', seq)
  end
  local t = redis.call('GET', rtok)
  if t then return tonumber(t) end
  t = fresh or redis.call('INCR', seq)
  redis.call('SET', rtok, t)
  return t
end
`

// rwEnqueueScript is enqueueScript for a read/write lock.
// KEYS: seq, queue, session key, rtok. ARGV: name, try (1/0), mode (r/w),
// ttl ms, wake channel, session id. Returns as enqueueScript.
var rwEnqueueScript = redis.NewScript(luaHead + luaFirstWaiting + luaRW + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1} end
local blocked, removed
if ARGV[3] == 'w' then
  local h
  h, removed = head(KEYS[2])
  blocked = h ~= false
else
  blocked, removed = writerAhead(KEYS[2], nil)
end
if removed then redis.call('PUBLISH', ARGV[5], firstWaiting(KEYS[2])) end
if ARGV[2] == '1' and blocked then return {-2} end
local c = redis.call('INCR', KEYS[1])
local k = ARGV[1] .. '/' .. c
redis.call('HSET', k, 's', KEYS[3], 'l', ARGV[6], 'm', ARGV[3])
redis.call('PEXPIRE', k, ARGV[4])
redis.call('ZADD', KEYS[2], c, k)
if blocked then return {c, 0} end
local t = grantToken(KEYS[1], KEYS[4], ARGV[3], c)
redis.call('HSET', k, 't', t)
return {c, t}
`)

// rwCheckScript is checkScript for a read/write lock; a reader it grants
// wakes the hold behind it, so that readers queued together follow each
// other in.
// KEYS: seq, queue, session key, hold key, rtok. ARGV: wake channel.
// Returns as checkScript.
var rwCheckScript = redis.NewScript(luaHead + luaFirstWaiting + luaRW + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {-1} end
if redis.call('EXISTS', KEYS[4]) == 0 or not redis.call('ZSCORE', KEYS[2], KEYS[4]) then return {-3} end
local mode = redis.call('HGET', KEYS[4], 'm')
local blocked, removed
if mode == 'w' then
  local h
  h, removed = head(KEYS[2])
  blocked = h ~= KEYS[4]
else
  blocked, removed = writerAhead(KEYS[2], KEYS[4])
end
if removed then redis.call('PUBLISH', ARGV[1], firstWaiting(KEYS[2])) end
if blocked then return {0} end
local t = redis.call('HGET', KEYS[4], 't')
if not t then
  t = grantToken(KEYS[1], KEYS[5], mode, nil)
  redis.call('HSET', KEYS[4], 't', t)
  if mode == 'r' then
    local rank = redis.call('ZRANK', KEYS[2], KEYS[4])
    local nxt = redis.call('ZRANGE', KEYS[2], rank + 1, rank + 1)
    if nxt[1] then redis.call('PUBLISH', ARGV[1], nxt[1]) end
  end
end
return {1, tonumber(t)}
`)
