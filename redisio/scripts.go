package redisio

import "github.com/redis/go-redis/v9"

// The Lua scripts below are every state change redisio makes. Each runs
// atomically on the server, so a grant, its token and the queue it comes
// from are one step. Keys of one scope (a primitive's name) are:
//
//	name/seq    the scope's counter: Created of every hold, and lock tokens
//	name/queue  sorted set of hold keys, scored by their Created (FIFO)
//	name/held   hash: one field per granted hold (its key), "mode session
//	            value" (mode w or r, W or R once its key was found gone);
//	            and n, a copy of the counter
//	name/<n>    one hold (held or waiting), a hash: s = its session's key,
//	            l = the session's id, v = an election value, m = an rwlock
//	            hold's mode (r or w), t = its token once granted, o = the
//	            enqueue's nonce, g = 1 for a tombstone; it carries the
//	            session's PX expiry
//	name/rtok   an rwlock's read token: shared by readers until the next
//	            writer is granted
//	name/wake   pub/sub channel of the name: an election's observers and
//	            older discos' waiters listen on it; each message is the key
//	            of a hold that may now be granted or now leads (or "")
//
// A waiter is woken on its session's channel, named as its session's key
// (the hold's s): wake() publishes the hold's key there, so that one
// message reaches the one session whose waiter it names, and on the
// name's channel as well, for the waiters of an older disco on the same
// name, which listen there only (a channel without subscribers costs
// Redis a lookup).
//
// The layout is redundant, so that no one deleted key gives a name two
// holders: a granted hold is in the queue and in name/held; a hold lives
// while its key exists (the key expires with its session's). The first
// script that finds a granted hold's key gone while the hold is still
// queued and its session's key exists writes a tombstone in its place (g =
// 1, the session's present expiry), once (its record's mode in upper case):
// the hold lives on until its owner's refresh reports it gone and the owner
// releases, or the tombstone expires. A live granted hold heads the queue whatever
// the queue says, and a script that finds one missing from the queue, or
// from name/held, puts it back. The counter is the greater of name/seq and
// its copy. head() removes dead holds from the front of a queue whenever a
// script looks at it.

// luaWake is wake(ch, k): it wakes the waiter of hold key k (if k is not
// "") on its session's channel, and publishes k on the name's channel ch.
const luaWake = `
local function wake(ch, k)
  if k and k ~= '' then
    local s = redis.call('HGET', k, 's')
    if s then redis.call('PUBLISH', s, k) end
  end
  redis.call('PUBLISH', ch, k or '')
end
`

// luaLayout is shared by the scripts of a scope: wake, the records of
// name/held, the counter, and head, which returns the first live hold key
// (a live granted one first) or false, and whether it removed dead ones.
const luaLayout = luaWake + luaState

// luaState is luaLayout without wake.
const luaState = `
local function rec(m, s, v) return (m or 'w') .. ' ' .. s .. ' ' .. (v or '') end
local function parse(r) return string.match(r, '^(%S+) (%S+) (.*)$') end
local function created(k) return tonumber(string.match(k, '(%d+)$')) end
local function nextc(seq, held)
  local a = tonumber(redis.call('GET', seq) or '0') or 0
  local b = tonumber(redis.call('HGET', held, 'n') or '0') or 0
  if b > a then redis.call('SET', seq, b) end
  local c = redis.call('INCR', seq)
  redis.call('HSET', held, 'n', c)
  return c
end
local function record(k, held)
  local f = redis.call('HMGET', k, 'm', 's', 'v')
  if f[2] then redis.call('HSET', held, k, rec(f[1], f[2], f[3])) end
end
local function keep(k, held)
  if redis.call('HEXISTS', held, k) == 0 and redis.call('HEXISTS', k, 't') == 1 then record(k, held) end
end
local function expiry(sk, ttl)
  local pt = redis.call('PTTL', sk)
  if pt <= 0 then return ttl end
  return pt
end
local function granted(q, held)
  local live, removed = {}, false
  local f = redis.call('HGETALL', held)
  for i = 1, #f, 2 do
    local k = f[i]
    if k ~= 'n' then
      local m, s, v = parse(f[i + 1])
      local queued = redis.call('ZSCORE', q, k)
      local alive = redis.call('EXISTS', k) == 1
      if not alive and queued and s and (m == 'w' or m == 'r') and redis.call('EXISTS', s) == 1 then
        -- Its key was deleted: a tombstone keeps the hold, once, until its
        -- owner hears of it (its refresh reports a tombstone gone) and
        -- releases, or until its session's present expiry.
        redis.call('HSET', k, 's', s, 'l', string.match(s, '(%d+)$') or '0', 'm', m, 'v', v or '', 'g', '1')
        redis.call('PEXPIRE', k, expiry(s, 10000))
        redis.call('HSET', held, k, rec(string.upper(m), s, v))
        alive = true
      end
      if alive then
        if not queued then redis.call('ZADD', q, created(k), k) end
        table.insert(live, {k, string.lower(m or 'w')})
      else
        redis.call('HDEL', held, k)
        if queued then redis.call('ZREM', q, k) end
        removed = true
      end
    end
  end
  table.sort(live, function(x, y) return created(x[1]) < created(y[1]) end)
  return live, removed
end
local function head(q, held)
  local live, removed = granted(q, held)
  if #live > 0 then return live[1][1], removed end
  while true do
    local h = redis.call('ZRANGE', q, 0, 0)
    if #h == 0 then return false, removed end
    local k = h[1]
    if redis.call('EXISTS', k) == 1 then
      keep(k, held)
      return k, removed
    end
    redis.call('ZREM', q, k)
    removed = true
  end
end
`

// enqueueScript creates a hold and queues it; if nobody is ahead it is
// granted in the same step. The hold's key expires with its session's.
// KEYS: seq, queue, held, session key. ARGV: name, try (1/0), value, ttl
// ms, wake channel, session id, nonce (o: names the hold to findScript).
// Returns {-1} no session, {-2} taken (try), {created, token} (token 0:
// waiting).
var enqueueScript = redis.NewScript(luaLayout + luaEnqueue)

// luaEnqueue is enqueueScript's own part.
const luaEnqueue = `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
local h, removed = head(KEYS[2], KEYS[3])
if ARGV[2] == '1' and h then
  if removed then wake(ARGV[5], h) end
  return {-2}
end
local c = nextc(KEYS[1], KEYS[3])
local k = ARGV[1] .. '/' .. c
redis.call('HSET', k, 's', KEYS[4], 'l', ARGV[6], 'v', ARGV[3], 'o', ARGV[7])
redis.call('PEXPIRE', k, expiry(KEYS[4], ARGV[4]))
redis.call('ZADD', KEYS[2], c, k)
if not h then
  redis.call('HSET', k, 't', c)
  record(k, KEYS[3])
  redis.call('PUBLISH', ARGV[5], k)
  return {c, c}
end
if removed then wake(ARGV[5], h) end
return {c, 0}
`

// checkScript grants a waiting hold if it is now the queue's head. A lock's
// token is a fresh increment of the counter; an election's is the hold's
// Created.
// KEYS: seq, queue, held, session key, hold key. ARGV: lock (1/0), wake
// channel.
// Returns {-1} no session, {-3} hold gone, {0, place} still waiting (place:
// the hold's index in the queue), {1, token}.
var checkScript = redis.NewScript(luaLayout + luaCheck)

// luaCheck is checkScript's own part.
const luaCheck = `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
if redis.call('EXISTS', KEYS[5]) == 0 or redis.call('HEXISTS', KEYS[5], 'g') == 1 then return {-3} end
if not redis.call('ZSCORE', KEYS[2], KEYS[5]) then redis.call('ZADD', KEYS[2], created(KEYS[5]), KEYS[5]) end
local h, removed = head(KEYS[2], KEYS[3])
if not h then return {-3} end
if h ~= KEYS[5] then
  if removed then wake(ARGV[2], h) end
  return {0, redis.call('ZRANK', KEYS[2], KEYS[5])}
end
local t = redis.call('HGET', KEYS[5], 't')
if not t then
  if ARGV[1] == '1' then
    t = nextc(KEYS[1], KEYS[3])
  else
    t = created(KEYS[5])
  end
  redis.call('HSET', KEYS[5], 't', t)
  record(KEYS[5], KEYS[3])
  redis.call('PUBLISH', ARGV[2], h)
end
return {1, tonumber(t)}
`

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
// reads; then it wakes that head, or for an rwlock the first waiter
// (wake: on its session's channel, and on the name's).
// KEYS: seq, queue, held, session key, hold key. ARGV: wake channel,
// handoff (lock, election or "").
// Returns 1 if the hold's key existed, 0 if it was already gone.
var releaseScript = redis.NewScript(luaLayout + luaFirstWaiting + luaRelease)

// luaRelease is releaseScript's own part.
const luaRelease = `
local r = 0
if redis.call('HGET', KEYS[5], 's') == KEYS[4] then
  redis.call('DEL', KEYS[5])
  r = 1
end
local mine = r == 1
local rc = redis.call('HGET', KEYS[3], KEYS[5])
if rc then
  local _, s = parse(rc)
  if s == KEYS[4] then
    redis.call('HDEL', KEYS[3], KEYS[5])
    mine = true
  end
end
local queued = redis.call('ZREM', KEYS[2], KEYS[5])
if mine or queued == 1 then
  local h = head(KEYS[2], KEYS[3])
  if h and ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[3], h) == 0 then
    local t
    if ARGV[2] == 'lock' then
      t = nextc(KEYS[1], KEYS[3])
    else
      t = created(h)
    end
    redis.call('HSET', h, 't', t)
    record(h, KEYS[3])
    wake(ARGV[1], h)
  else
    wake(ARGV[1], firstWaiting(KEYS[2]))
  end
end
return r
`

// findScript returns the key of this session's hold that an enqueue with
// the nonce created, or "": for an enqueue whose reply was lost.
// KEYS: queue, session key. ARGV: nonce.
var findScript = redis.NewScript(`
for _, e in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, -1)) do
  local f = redis.call('HMGET', e, 's', 'o')
  if f[1] == KEYS[2] and f[2] == ARGV[1] then return e end
end
return ''
`)

// leaderScript returns the queue's live head: {key, value, token, session
// id}, or {} if the queue is empty.
// KEYS: queue, held. ARGV: wake channel.
var leaderScript = redis.NewScript(luaLayout + `
local h, removed = head(KEYS[1], KEYS[2])
if removed then wake(ARGV[1], h) end
if not h then return {} end
local v, l
if redis.call('EXISTS', h) == 1 then
  local f = redis.call('HMGET', h, 'v', 'l')
  v, l = f[1], f[2]
else
  local rc = redis.call('HGET', KEYS[2], h)
  if rc then
    local _, s, rv = parse(rc)
    v, l = rv, string.match(s, '(%d+)$')
  end
end
return {h, v or '', created(h), tonumber(l or '0')}
`)

// proclaimScript sets the value of a hold that heads its queue; with
// ARGV[3], only if its value is ARGV[3] (it undoes a Proclaim whose
// caller left it).
// KEYS: queue, held, session key, hold key. ARGV: value, wake channel[,
// the value it replaces].
// Returns 1 if set, 0 if the hold does not lead (or has another value).
var proclaimScript = redis.NewScript(luaLayout + `
if redis.call('HGET', KEYS[4], 's') ~= KEYS[3] or redis.call('HEXISTS', KEYS[4], 'g') == 1 then return 0 end
if ARGV[3] and redis.call('HGET', KEYS[4], 'v') ~= ARGV[3] then return 0 end
local h = head(KEYS[1], KEYS[2])
if h ~= KEYS[4] then return 0 end
redis.call('HSET', KEYS[4], 'v', ARGV[1])
redis.call('HSET', KEYS[2], KEYS[4], rec('w', KEYS[3], ARGV[1]))
redis.call('PUBLISH', ARGV[2], h)
return 1
`)

// refreshScript extends the session's key and its holds' keys by the TTL.
// A hold key that is a tombstone (its key was deleted) counts as gone, and
// is not extended.
// KEYS: session key, hold keys... ARGV: ttl ms.
// Returns -1 if the session key is gone, else the hold keys that are gone.
var refreshScript = redis.NewScript(`
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return -1 end
local missing = {}
for i = 2, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'g') == 1 or redis.call('PEXPIRE', KEYS[i], ARGV[1]) == 0 then
    table.insert(missing, KEYS[i])
  end
end
return missing
`)

// sessionScript creates a session: a new id from the global counter and its
// key with the TTL. An id whose key exists (the counter was deleted, say)
// is skipped, so a live session's key is never taken.
// KEYS: counter. ARGV: key prefix, ttl ms. Returns the id.
var sessionScript = redis.NewScript(`
while true do
  local id = redis.call('INCR', KEYS[1])
  if redis.call('SET', ARGV[1] .. id, '1', 'PX', ARGV[2], 'NX') then return id end
end
`)

// luaRW holds the read/write lock's rules: a writer is granted at the head
// of the queue; a reader when no live writer is ahead of it or granted. A
// writer's token is a new increment of the counter, and it ends the read
// epoch; a reader's is the epoch's token (name/rtok), opened by a new
// increment.
const luaRW = `
local function writerAhead(q, k, held)
  local live, removed = granted(q, held)
  for _, g in ipairs(live) do
    if g[2] == 'w' and g[1] ~= k then return true, removed end
  end
  local items = {}
  if k then
    local rank = redis.call('ZRANK', q, k)
    if rank and rank > 0 then items = redis.call('ZRANGE', q, 0, rank - 1) end
  else
    items = redis.call('ZRANGE', q, 0, -1)
  end
  for _, e in ipairs(items) do
    if redis.call('EXISTS', e) == 1 then
      keep(e, held)
      if redis.call('HGET', e, 'm') == 'w' then return true, removed end
    elseif redis.call('HEXISTS', held, e) == 0 then
      redis.call('ZREM', q, e)
      removed = true
    end
  end
  return false, removed
end
local function grantToken(seq, rtok, mode, fresh, held)
  if mode == 'w' then
    redis.call('DEL', rtok)
    return fresh or nextc(seq, held)
  end
  local t = redis.call('GET', rtok)
  if t then return tonumber(t) end
  t = fresh or nextc(seq, held)
  redis.call('SET', rtok, t)
  return t
end
`

// rwEnqueueScript is enqueueScript for a read/write lock.
// KEYS: seq, queue, held, session key, rtok. ARGV: name, try (1/0), mode
// (r/w), ttl ms, wake channel, session id, nonce. Returns as
// enqueueScript.
var rwEnqueueScript = redis.NewScript(luaLayout + luaFirstWaiting + luaRW + `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
local blocked, removed
if ARGV[3] == 'w' then
  local h
  h, removed = head(KEYS[2], KEYS[3])
  blocked = h ~= false
else
  blocked, removed = writerAhead(KEYS[2], nil, KEYS[3])
end
if removed then wake(ARGV[5], firstWaiting(KEYS[2])) end
if ARGV[2] == '1' and blocked then return {-2} end
local c = nextc(KEYS[1], KEYS[3])
local k = ARGV[1] .. '/' .. c
redis.call('HSET', k, 's', KEYS[4], 'l', ARGV[6], 'm', ARGV[3], 'o', ARGV[7])
redis.call('PEXPIRE', k, expiry(KEYS[4], ARGV[4]))
redis.call('ZADD', KEYS[2], c, k)
if blocked then return {c, 0} end
local t = grantToken(KEYS[1], KEYS[5], ARGV[3], c, KEYS[3])
redis.call('HSET', k, 't', t)
record(k, KEYS[3])
return {c, t}
`)

// rwCheckScript is checkScript for a read/write lock; a reader it grants
// wakes the hold behind it, so that readers queued together follow each
// other in.
// KEYS: seq, queue, held, session key, hold key, rtok. ARGV: wake channel.
// Returns as checkScript.
var rwCheckScript = redis.NewScript(luaLayout + luaFirstWaiting + luaRW + `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
if redis.call('EXISTS', KEYS[5]) == 0 or redis.call('HEXISTS', KEYS[5], 'g') == 1 then return {-3} end
if not redis.call('ZSCORE', KEYS[2], KEYS[5]) then redis.call('ZADD', KEYS[2], created(KEYS[5]), KEYS[5]) end
local mode = redis.call('HGET', KEYS[5], 'm')
local blocked, removed
if mode == 'w' then
  local h
  h, removed = head(KEYS[2], KEYS[3])
  blocked = h ~= KEYS[5]
else
  blocked, removed = writerAhead(KEYS[2], KEYS[5], KEYS[3])
end
if removed then wake(ARGV[1], firstWaiting(KEYS[2])) end
if blocked then return {0, redis.call('ZRANK', KEYS[2], KEYS[5])} end
local t = redis.call('HGET', KEYS[5], 't')
if not t then
  t = grantToken(KEYS[1], KEYS[6], mode, nil, KEYS[3])
  redis.call('HSET', KEYS[5], 't', t)
  record(KEYS[5], KEYS[3])
  if mode == 'r' then
    local rank = redis.call('ZRANK', KEYS[2], KEYS[5])
    local nxt = redis.call('ZRANGE', KEYS[2], rank + 1, rank + 1)
    if nxt[1] then wake(ARGV[1], nxt[1]) end
  end
end
return {1, tonumber(t)}
`)

// A barrier on name is one key, name/barrier, with no expiry: held while
// it exists. Its channel name/barrier.wake is published to when it is
// released. barrierReleaseScript deletes it and wakes the waiters in one
// step.
// KEYS: the barrier key. ARGV: wake channel. Returns 1 if it was held.
// Sent once (see onceScripter): a second run would find the key gone.
var barrierReleaseScript = redis.NewScript(`
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[1], '')
return 1
`)

// barrierUnholdScript deletes the barrier's key if its value is the
// Hold's id, and wakes the waiters: it undoes a Hold whose caller left it.
// KEYS: the barrier key. ARGV: the Hold's id, wake channel. Returns 1 if
// it deleted the key. Run again, it finds the key gone.
var barrierUnholdScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
`)

// barrierHoldScript creates the barrier's key, its value the holder's
// id, if it does not exist. A run again of the same Hold (go-redis sends a
// command again when its reply is lost) finds its own id and answers as
// the first run did.
// KEYS: the barrier key. ARGV: the Hold's id. Returns 1 if the key is this
// Hold's, 0 if it was held already.
var barrierHoldScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
`)

// A double barrier on name keeps:
//
//	name/dbarrier          hash: c = the count, g = the round's id (the
//	                       first party's), r = 1 once count parties entered,
//	                       n = the entries' counter
//	name/dbarrier.parties  sorted set of the round's party keys, by entry
//	name/dbarrier.<id>     one party (id: its session's id and a number of
//	                       the session's), a hash: s = its session's key;
//	                       it carries the session's PX expiry
//	name/dbarrier.wake     pub/sub channel: published to when the round
//	                       fills and when it ends
//
// A party is alive while its key and its session's key exist; every script
// drops the dead ones first, with their keys. When no live party is left
// the round is over and the hash and the set are deleted.
const luaParties = `
local function prune(p)
  local n = 0
  for _, k in ipairs(redis.call('ZRANGE', p, 0, -1)) do
    local s = redis.call('HGET', k, 's')
    if s and redis.call('EXISTS', s) == 1 then
      n = n + 1
    else
      redis.call('ZREM', p, k)
      redis.call('DEL', k)
    end
  end
  return n
end
`

// dbEnterScript counts a party in, unless the round is full: it writes the
// party's key and, if it is the count-th, marks the round full and wakes
// the others. With no live party it starts a new round (id ARGV[2]).
// KEYS: hash, parties, session key, party key. ARGV: count, round id, ttl
// ms, wake channel.
// Returns {"-1"} no session, {"-2"} full, {"-4", count} another count, or
// {"0" or "1" (full now), round id}; run again for a party it counted in,
// {"0" or "1" (full), round id}.
var dbEnterScript = redis.NewScript(luaParties + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {'-1'} end
local n = prune(KEYS[2])
if redis.call('ZSCORE', KEYS[2], KEYS[4]) then
  -- A run again of an Enter that counted this party (its reply was lost
  -- and go-redis sent it again): answer as that run did.
  local full = '0'
  if redis.call('HGET', KEYS[1], 'r') == '1' then full = '1' end
  return {full, redis.call('HGET', KEYS[1], 'g')}
end
if n == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'c', ARGV[1], 'g', ARGV[2])
end
local c = redis.call('HGET', KEYS[1], 'c')
if c ~= ARGV[1] then return {'-4', c or ''} end
if redis.call('HGET', KEYS[1], 'r') == '1' or n >= tonumber(c) then return {'-2'} end
redis.call('HSET', KEYS[4], 's', KEYS[3])
local pt = redis.call('PTTL', KEYS[3])
if pt <= 0 then pt = ARGV[3] end
redis.call('PEXPIRE', KEYS[4], pt)
redis.call('ZADD', KEYS[2], redis.call('HINCRBY', KEYS[1], 'n', 1), KEYS[4])
local g = redis.call('HGET', KEYS[1], 'g')
if n + 1 >= tonumber(c) then
  redis.call('HSET', KEYS[1], 'r', '1')
  redis.call('PUBLISH', ARGV[4], g)
  return {'1', g}
end
return {'0', g}
`)

// dbCheckScript looks whether a party's round is full.
// KEYS: hash, parties, session key, party key. ARGV: round id.
// Returns -1 no session, -3 the party is gone (its key deleted, or its
// round ended), 0 waiting, 1 full.
var dbCheckScript = redis.NewScript(luaParties + `
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'g') ~= ARGV[1] or not redis.call('ZSCORE', KEYS[2], KEYS[4]) then return -3 end
prune(KEYS[2])
if not redis.call('ZSCORE', KEYS[2], KEYS[4]) then return -3 end
if redis.call('HGET', KEYS[1], 'r') == '1' then return 1 end
return 0
`)

// dbLeaveScript takes a party out (leaving, withdrawing or ending): it
// deletes the party's key; the last live party of the round deletes the
// round and wakes the leavers. Run again by a leaver, it only looks
// whether the round is over.
// KEYS: hash, parties, party key. ARGV: round id ("": the round the key is
// in, if any), wake channel.
// Returns 1 if the round is over, 0 if live parties remain.
var dbLeaveScript = redis.NewScript(luaParties + `
local mine = redis.call('ZREM', KEYS[2], KEYS[3]) == 1
redis.call('DEL', KEYS[3])
local g = redis.call('HGET', KEYS[1], 'g')
if not g or (not mine and g ~= ARGV[1]) then return 1 end
if prune(KEYS[2]) > 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[2], g)
return 1
`)

// dbWithdrawScript takes out a party whose Enter gives up (its ctx ended,
// or its Enter script's reply was lost), unless the party is counted in a
// complete round: then the others may have passed the barrier counting it,
// and it stays in. Taken out, it is as dbLeaveScript's: the last live
// party of the round deletes the round and wakes the leavers. Redis runs
// it and dbEnterScript one at a time, so a party is either taken out
// before a count (which does not include it) or counted in a round
// marked complete (which this script leaves alone).
// KEYS: hash, parties, party key. ARGV: wake channel.
// Returns {"1", round id} if the party is in a complete round, {"0"} once
// it is out (or was not in). Run again, it answers as it did.
var dbWithdrawScript = redis.NewScript(luaParties + `
local mine = redis.call('ZSCORE', KEYS[2], KEYS[3])
local g = redis.call('HGET', KEYS[1], 'g')
if mine and g and redis.call('HGET', KEYS[1], 'r') == '1' then return {'1', g} end
redis.call('ZREM', KEYS[2], KEYS[3])
redis.call('DEL', KEYS[3])
if not mine or not g then return {'0'} end
if prune(KEYS[2]) > 0 then return {'0'} end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], g)
return {'0'}
`)

// A semaphore on name has the lock layout (name/seq, name/queue, name/held,
// name/<n>) and name/permits, its N, written by its first user and never
// deleted. A granted hold's value (v, and the value in its name/held
// record) is its slot, so a tombstone keeps the slot taken. luaSem holds
// its rules: a hold is granted when fewer than N live holds are granted and
// fewer than the free permits live waiters are queued ahead of it (first
// come, first served), in the lowest free slot, with a new increment of the
// counter as its token.
const luaSem = `
local function slotOf(k, held)
  local rc = redis.call('HGET', held, k)
  if rc then
    local _, _, v = parse(rc)
    return tonumber(v)
  end
  return tonumber(redis.call('HGET', k, 'v'))
end
local function semTurn(q, held, k, n)
  local items = redis.call('ZRANGE', q, 0, -1)
  for _, e in ipairs(items) do
    if redis.call('EXISTS', e) == 1 then keep(e, held) end
  end
  local live, removed = granted(q, held)
  local free = n - #live
  local ahead = 0
  for _, e in ipairs(items) do
    if e == k then break end
    if redis.call('HEXISTS', held, e) == 0 then
      if redis.call('EXISTS', e) == 1 then
        ahead = ahead + 1
      else
        redis.call('ZREM', q, e)
        removed = true
      end
    end
  end
  return ahead < free, live, removed
end
local function semGrant(seq, q, held, k, live, n, ch)
  local used = {}
  for _, g in ipairs(live) do
    local s = slotOf(g[1], held)
    if s then used[s] = true end
  end
  local slot = 0
  while used[slot] do slot = slot + 1 end
  local t = nextc(seq, held)
  redis.call('HSET', k, 't', t, 'v', slot)
  record(k, held)
  if #live + 1 < n then wake(ch, firstWaiting(q)) end
  return t, slot
end
`

// semPermitsScript sets a semaphore's N if it has none and returns it.
// KEYS: name/permits. ARGV: n.
var semPermitsScript = redis.NewScript(`
local p = redis.call('GET', KEYS[1])
if not p then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return tonumber(p)
`)

// semEnqueueScript is enqueueScript for a semaphore.
// KEYS: seq, queue, held, session key. ARGV: name, try (1/0), n, ttl ms,
// wake channel, session id, nonce.
// Returns {-1} no session, {-2} no permit (try), {created, token, slot}
// (token 0: waiting).
var semEnqueueScript = redis.NewScript(luaLayout + luaFirstWaiting + luaSem + `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
local n = tonumber(ARGV[3])
local ok, live, removed = semTurn(KEYS[2], KEYS[3], nil, n)
if removed then wake(ARGV[5], firstWaiting(KEYS[2])) end
if ARGV[2] == '1' and not ok then return {-2} end
local c = nextc(KEYS[1], KEYS[3])
local k = ARGV[1] .. '/' .. c
redis.call('HSET', k, 's', KEYS[4], 'l', ARGV[6], 'o', ARGV[7])
redis.call('PEXPIRE', k, expiry(KEYS[4], ARGV[4]))
redis.call('ZADD', KEYS[2], c, k)
if not ok then return {c, 0, -1} end
local t, slot = semGrant(KEYS[1], KEYS[2], KEYS[3], k, live, n, ARGV[5])
return {c, t, slot}
`)

// semCheckScript is checkScript for a semaphore.
// KEYS: seq, queue, held, session key, hold key. ARGV: n, wake channel.
// Returns {-1} no session, {-3} hold gone, {0, place} still waiting, {1,
// token, slot}.
var semCheckScript = redis.NewScript(luaLayout + luaFirstWaiting + luaSem + `
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1} end
if redis.call('EXISTS', KEYS[5]) == 0 or redis.call('HEXISTS', KEYS[5], 'g') == 1 then return {-3} end
if not redis.call('ZSCORE', KEYS[2], KEYS[5]) then redis.call('ZADD', KEYS[2], created(KEYS[5]), KEYS[5]) end
local t = redis.call('HGET', KEYS[5], 't')
if t then return {1, tonumber(t), tonumber(redis.call('HGET', KEYS[5], 'v'))} end
local n = tonumber(ARGV[1])
local ok, live, removed = semTurn(KEYS[2], KEYS[3], KEYS[5], n)
if removed then wake(ARGV[2], firstWaiting(KEYS[2])) end
if not ok then return {0, redis.call('ZRANK', KEYS[2], KEYS[5])} end
local slot
t, slot = semGrant(KEYS[1], KEYS[2], KEYS[3], KEYS[5], live, n, ARGV[2])
return {1, t, slot}
`)
