package zkio

import (
	"reflect"
	"sync"
	"unsafe"
)

// Test hooks, compiled only into this package's tests.

// KillSession ends s at the server, as an expiry would: the client closes
// the session (ZooKeeper deletes its ephemeral znodes at once) without s
// being told, so s learns it from its connection, as it would learn of an
// expiry.
func KillSession(s *Session) { s.conn.Close() }

// ServerOf returns the address of the server s is connected to.
func ServerOf(s *Session) string { return s.conn.Server() }

// Watchers returns how many watch channels s's ZooKeeper client holds
// registered (one per ExistsW, GetW or ChildrenW until its event fires).
// The client does not export them: this reads its fields (those of
// github.com/go-zookeeper/zk v1.0.4) under its own lock.
func Watchers(s *Session) int {
	v := reflect.ValueOf(s.conn).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("watchersLock").UnsafeAddr()))
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for it := v.FieldByName("watchers").MapRange(); it.Next(); {
		n += it.Value().Len()
	}
	return n
}
