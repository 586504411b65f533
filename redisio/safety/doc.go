// Package safety runs disco's fault suite (internal/faultsuite) on Redis: a
// real redis-server with appendonly yes and appendfsync always, started by
// the test, each worker reaching it through a fault proxy of its own. Its
// faults: the server killed (SIGKILL) and restarted from its append-only
// file, a holder cut off until its session's key expired, and a holder's
// session and application frozen past the TTL. It has no code of its own
// beyond this comment:
//
//	go test -run Safety -v ./redisio/safety/
//	DISCO_SAFETY_LONG=1 go test -run Safety -v ./redisio/safety/
package safety
