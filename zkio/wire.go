package zkio

import (
	"net"
	"sync"
	"time"
)

// wire wraps every TCP connection a session's ZooKeeper client makes, to
// learn when the server last heard from the session: the send time of the
// last request written before a reply arrived. The server extended the
// session no earlier than that, so a deadline counted from it is not
// later than the server's. (For the idle exchange, one ping and its reply,
// it is exact; a reply that arrives after a later request was written
// makes it err late by at most the time that request is in flight.)
//
// A test may gate the wire (pause): reads, writes and dials then wait, as
// they would in a process frozen by a long garbage collection pause.
type wire struct {
	mu        sync.Mutex
	lastWrite time.Time // start of the latest write
	heard     time.Time // send time of the latest write answered
	gate      <-chan struct{}
}

func newWire() *wire { return &wire{heard: time.Now()} }

// lastHeard returns the send time of the last request the server answered.
func (w *wire) lastHeard() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heard
}

// pause makes the wire's traffic wait until resume is closed.
func (w *wire) pause(resume <-chan struct{}) {
	w.mu.Lock()
	w.gate = resume
	w.mu.Unlock()
}

// wait blocks while the wire is paused, or until closed is closed.
func (w *wire) wait(closed <-chan struct{}) {
	w.mu.Lock()
	g := w.gate
	w.mu.Unlock()
	if g == nil {
		return
	}
	select {
	case <-g:
	case <-closed:
	}
}

func (w *wire) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	w.wait(nil)
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
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
	c.w.wait(c.closed)
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.mu.Lock()
		if c.w.lastWrite.After(c.w.heard) {
			c.w.heard = c.w.lastWrite
		}
		c.w.mu.Unlock()
	}
	return n, err
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.w.wait(c.closed)
	c.w.mu.Lock()
	c.w.lastWrite = time.Now()
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *wireConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
