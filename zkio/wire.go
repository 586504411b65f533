package zkio

import (
	"net"
	"sync"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
)

// wire wraps every TCP connection a session's ZooKeeper client makes, to
// learn when the server last heard from the session: the send time of the
// last request written before a reply arrived. The server extended the
// session no earlier than that, so a deadline counted from it is not
// later than the server's. (For the idle exchange, one ping and its reply,
// it is exact; a reply that arrives after a later request was written
// makes it err late by at most the time that request is in flight.) Each
// reply that moves it pokes the session's loop (heardCh).
//
// The wire's traffic is the session's renewal: a test that pauses the
// session or its renewal (package testhook) stops reads, writes and dials.
type wire struct {
	session any           // the testhook key: the *Session
	heardCh chan struct{} // poked when heard moves

	mu        sync.Mutex
	lastWrite time.Time // start of the latest write
	heard     time.Time // send time of the latest write answered
	replied   time.Time // when that answer came
	broken    time.Time // when a connection last failed or closed
}

func newWire(session any) *wire {
	now := time.Now()
	return &wire{session: session, heardCh: make(chan struct{}, 1), heard: now, replied: now}
}

// lastHeard returns the send time of the last request the server
// answered, and when its answer came.
func (w *wire) lastHeard() (sent, replied time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heard, w.replied
}

// lastBroken returns when a connection last failed or closed (zero: never).
func (w *wire) lastBroken() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.broken
}

func (w *wire) breaks() {
	w.mu.Lock()
	w.broken = time.Now()
	w.mu.Unlock()
}

func (w *wire) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	testhook.WaitRenewal(w.session, nil)
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		w.breaks()
		return nil, err
	}
	return &wireConn{Conn: c, w: w, closed: make(chan struct{})}, nil
}

type wireConn struct {
	net.Conn
	w      *wire
	once   sync.Once
	closed chan struct{}
}

func (c *wireConn) Read(p []byte) (int, error) {
	testhook.WaitRenewal(c.w.session, c.closed)
	n, err := c.Conn.Read(p)
	if n > 0 {
		w := c.w
		w.mu.Lock()
		moved := w.lastWrite.After(w.heard)
		if moved {
			w.heard, w.replied = w.lastWrite, time.Now()
		}
		w.mu.Unlock()
		if moved {
			select {
			case w.heardCh <- struct{}{}:
			default:
			}
		}
	}
	if err != nil {
		c.w.breaks()
	}
	return n, err
}

func (c *wireConn) Write(p []byte) (int, error) {
	testhook.WaitRenewal(c.w.session, c.closed)
	c.w.mu.Lock()
	c.w.lastWrite = time.Now()
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *wireConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.w.breaks()
	})
	return c.Conn.Close()
}
