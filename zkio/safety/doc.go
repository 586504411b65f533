// Package safety runs disco's fault suite (internal/faultsuite) on
// ZooKeeper: a real three-server ensemble started by the test, each
// worker reaching it through fault proxies of its own. Its faults: a
// follower or the leader killed and restarted (sessions move to the
// others), a holder cut off until the ensemble expired its session, a
// holder's session expired by the ensemble while it is connected, and a
// holder's session and application frozen past the session timeout. It has
// no code of its own beyond this comment:
//
//	go test -run Safety -v ./zkio/safety/
//	DISCO_SAFETY_LONG=1 go test -run Safety -v ./zkio/safety/
package safety
