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

// Following returns how many follows of an election's leader run on s (one
// helper each), asked of s's loop; 0 once s has ended.
func Following(s *Session) int {
	ch := make(chan int, 1)
	if !s.post(func() {
		n := 0
		for _, f := range s.follows {
			f.mu.Lock()
			if f.running {
				n++
			}
			f.mu.Unlock()
		}
		ch <- n
	}) {
		return 0
	}
	select {
	case n := <-ch:
		return n
	case <-s.stopped:
		return 0
	}
}
