package zkio

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// packet frames a body that begins with xid, as the ZooKeeper protocol
// does, with size bytes of body in all.
func packet(xid int32, size int) []byte {
	p := make([]byte, 4+size)
	binary.BigEndian.PutUint32(p, uint32(size))
	binary.BigEndian.PutUint32(p[4:], uint32(xid))
	return p
}

// connectPacket frames a connect request or response (protocol version,
// timeout, session id, password) of session id.
func connectPacket(id int64) []byte {
	p := packet(0, 36)
	binary.BigEndian.PutUint32(p[8:], 4000)
	binary.BigEndian.PutUint64(p[12:], uint64(id))
	return p
}

// TestWireHeardIsTheAnsweredRequest: the wire counts the session heard
// from at the send time of the request a reply answers, not of a later
// write (a request still in flight), and never for a watch notification,
// which answers nothing. The reply comes in pieces, as the client reads.
// (Counting from the latest write, the wire's rule before it followed the
// framing, fails this test: a notification arriving while a ping is lost
// would have renewed the session on the client's side only.)
func TestWireHeardIsTheAnsweredRequest(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	w := newWire(t, nil)
	c := &wireConn{Conn: client, w: w, closed: make(chan struct{}), sent: map[int32][]time.Time{}}
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, server) }()
	reply := func(xid int32) {
		t.Helper()
		p := packet(xid, 16)
		if xid == 0 {
			p = connectPacket(0x1234)
		}
		go func() {
			_, _ = server.Write(p[:3])
			_, _ = server.Write(p[3:])
		}()
		buf := make([]byte, len(p))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	write := func(xid int32) time.Time {
		t.Helper()
		before := time.Now()
		p := packet(xid, 12)
		if xid == 0 {
			p = connectPacket(0x1234)
		}
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		return before
	}
	write(0) // the connect request
	reply(0)
	first, _ := w.lastHeard()
	at5 := write(5)
	at6 := write(6)
	reply(xidWatch)
	if h, _ := w.lastHeard(); !h.Equal(first) {
		t.Fatalf("a notification moved heard from %v to %v", first, h)
	}
	reply(5)
	h, _ := w.lastHeard()
	if h.Before(at5) || !h.Before(at6) {
		t.Fatalf("heard %v after the reply to the request sent at %v (the next at %v)", h, at5, at6)
	}
	select {
	case <-w.heardCh:
	default:
		t.Fatal("the loop was not poked")
	}
}

// TestWireExpiredConnectIsNoAnswer: a connect response without a session
// (id 0: the server has none such, it expired) does not count the session
// heard from, and nor does any reply after it on a later connection (a
// session the client opens then is another).
func TestWireExpiredConnectIsNoAnswer(t *testing.T) {
	w := newWire(t, nil)
	start, _ := w.lastHeard()
	exchange := func(reply []byte, xid int32) {
		t.Helper()
		client, server := net.Pipe()
		defer server.Close()
		c := &wireConn{Conn: client, w: w, closed: make(chan struct{}), sent: map[int32][]time.Time{}}
		defer c.Close()
		go func() { _, _ = io.Copy(io.Discard, server) }()
		for _, p := range [][]byte{connectPacket(0x1234), packet(xid, 12)} {
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range [][]byte{reply, packet(xid, 16)} {
			go func() { _, _ = server.Write(p) }()
			if _, err := io.ReadFull(c, make([]byte, len(p))); err != nil {
				t.Fatal(err)
			}
		}
	}
	exchange(connectPacket(0), 5)
	if h, _ := w.lastHeard(); !h.Equal(start) {
		t.Fatalf("an expired session's connect response moved heard from %v to %v", start, h)
	}
	exchange(connectPacket(0x5678), 6)
	if h, _ := w.lastHeard(); !h.Equal(start) {
		t.Fatalf("a new session's answers after the expiry moved heard from %v to %v", start, h)
	}
}
