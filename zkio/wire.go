package zkio

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
)

// wire wraps every TCP connection a session's ZooKeeper client makes, to
// learn when the server last heard from the session: the send time of the
// latest request whose reply arrived. The server extended the session no
// earlier than it received that request, so a deadline counted from its
// send is not later than the server's. The wire follows the protocol's
// framing (each packet a length, then its body, which begins with the
// request's xid, echoed by its reply) to pair each reply with its request;
// watch notifications, which answer no request, do not count, and nor
// does a connect response that says the session expired (it renews
// nothing), nor any reply after it (a session the client opens then is
// another). Each reply that moves the time pokes the session's loop
// (heardCh).
//
// The wire's traffic is the session's renewal: a test that pauses the
// session or its renewal (package testhook) stops reads, writes and dials.
type wire struct {
	session any             // the testhook key: the *Session
	quit    <-chan struct{} // closed when the session ends
	heardCh chan struct{}   // poked when heard moves

	mu      sync.Mutex
	heard   time.Time // send time of the latest request answered
	replied time.Time // when that answer came
	broken  time.Time // when a connection last failed or closed
	expired bool      // a server said the session expired
	conns   map[*wireConn]struct{}
	shut    bool // shutDown was called: no connection is made
}

func newWire(session any, quit <-chan struct{}) *wire {
	now := time.Now()
	return &wire{session: session, quit: quit, heardCh: make(chan struct{}, 1), heard: now, replied: now,
		conns: map[*wireConn]struct{}{}}
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

// expire records that a server said the session expired: no answer
// counts from then on.
func (w *wire) expire() {
	w.mu.Lock()
	w.expired = true
	w.mu.Unlock()
}

// answered records that the server answered a request sent at sent.
func (w *wire) answered(sent time.Time) {
	w.mu.Lock()
	moved := sent.After(w.heard) && !w.expired
	if moved {
		w.heard, w.replied = sent, time.Now()
	}
	w.mu.Unlock()
	if moved {
		select {
		case w.heardCh <- struct{}{}:
		default:
		}
	}
}

func (w *wire) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	testhook.WaitRenewal(w.session, w.quit)
	if w.isShut() {
		return nil, errWireShut
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		w.breaks()
		return nil, err
	}
	wc := &wireConn{Conn: c, w: w, closed: make(chan struct{}), sent: map[int32][]time.Time{}}
	w.mu.Lock()
	shut := w.shut
	if !shut {
		w.conns[wc] = struct{}{}
	}
	w.mu.Unlock()
	if shut {
		c.Close()
		return nil, errWireShut
	}
	return wc, nil
}

// errWireShut is the dial's error once the wire is shut down.
var errWireShut = errors.New("zkio: the session's connection is closed")

func (w *wire) isShut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shut
}

// shutDown closes the wire's connections and refuses new ones, so that a
// client closed while no server answers stops at once, rather than when
// a read times out.
func (w *wire) shutDown() {
	w.mu.Lock()
	w.shut = true
	conns := w.conns
	w.conns = nil
	w.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// wireConn is one connection of the wire. Its client writes from one
// goroutine and reads from another.
type wireConn struct {
	net.Conn
	w      *wire
	once   sync.Once
	closed chan struct{}

	mu        sync.Mutex
	out, in   frames
	connected time.Time             // send time of the connect request, the first packet
	sent      map[int32][]time.Time // send times of the requests unanswered, by xid, in order
	lastWrite time.Time             // the start of the latest write (for a stream not followed)
}

func (c *wireConn) Read(p []byte) (int, error) {
	testhook.WaitRenewal(c.w.session, c.closed)
	n, err := c.Conn.Read(p)
	if n > 0 {
		var answered []time.Time
		expired := false
		c.mu.Lock()
		ok := c.in.feed(p[:n], func(first bool, head []byte) {
			xid := int32(binary.BigEndian.Uint32(head))
			switch {
			case first && connectSession(head) == 0:
				// The connect response of a session the server does
				// not have (expired, killed, or never known there):
				// it confirms nothing.
				expired = true
			case first: // the connect response
				answered = append(answered, c.connected)
			case xid == xidWatch: // a notification: no answer
			default:
				if q := c.sent[xid]; len(q) > 0 {
					answered = append(answered, q[0])
					if c.sent[xid] = q[1:]; len(q) == 1 {
						delete(c.sent, xid)
					}
				}
			}
		})
		if !ok {
			// A stream the wire cannot follow: count the reply as the
			// answer to the latest write, late by at most the time a
			// request is in flight.
			answered = append(answered, c.lastWrite)
		}
		c.mu.Unlock()
		if expired {
			c.w.expire()
		}
		for _, t := range answered {
			c.w.answered(t)
		}
	}
	if err != nil {
		c.w.breaks()
	}
	return n, err
}

func (c *wireConn) Write(p []byte) (int, error) {
	testhook.WaitRenewal(c.w.session, c.closed)
	now := time.Now()
	c.mu.Lock()
	c.lastWrite = now
	c.out.feed(p, func(first bool, head []byte) {
		if first {
			c.connected = now
		} else {
			xid := int32(binary.BigEndian.Uint32(head))
			c.sent[xid] = append(c.sent[xid], now)
		}
	})
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *wireConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.w.mu.Lock()
		delete(c.w.conns, c)
		c.w.mu.Unlock()
		c.w.breaks()
	})
	return c.Conn.Close()
}

// xidWatch is the xid of a watch notification, which answers no request.
const xidWatch = -1

// maxFrame bounds a packet's length; a larger one means the stream is not
// ZooKeeper's framing as the wire understands it.
const maxFrame = maxMaxData + sendSlack

// connectHead is how much of the first packet's body (the connect request
// or response) the wire reads before passing it on: a response's protocol
// version, timeout and session id. Both are longer (they end with the
// password).
const connectHead = 16

// connectSession returns the session id of a connect response's head: 0
// when the server has no such session (it expired, or was never known
// there).
func connectSession(head []byte) int64 { return int64(binary.BigEndian.Uint64(head[8:16])) }

// frames follows one direction of a connection: packets of a 4-byte
// big-endian length and a body whose first 4 bytes are, except in the
// first packet (the connect request or response), the xid.
type frames struct {
	head   [4 + connectHead]byte
	n      int  // bytes of head filled
	skip   int  // bytes of the current body left to skip
	count  int  // packets seen
	broken bool // the stream is not followed
}

// feed follows p, calling packet for each packet whose head it completes,
// with the start of its body: connectHead bytes of the first packet, else
// 4 (the xid); false once the stream cannot be followed.
func (f *frames) feed(p []byte, packet func(first bool, head []byte)) bool {
	for len(p) > 0 && !f.broken {
		if f.skip > 0 {
			k := min(f.skip, len(p))
			f.skip, p = f.skip-k, p[k:]
			continue
		}
		body := 4
		if f.count == 0 {
			body = connectHead
		}
		k := copy(f.head[f.n:4+body], p)
		f.n, p = f.n+k, p[k:]
		if f.n < 4+body {
			continue
		}
		length := int(binary.BigEndian.Uint32(f.head[:4]))
		if length < body || length > maxFrame {
			f.broken = true
			break
		}
		packet(f.count == 0, f.head[4:4+body])
		f.count++
		f.n, f.skip = 0, length-body
	}
	return !f.broken
}
