package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a target that echoes every byte and counts what it received.
type echo struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	var conns sync.Map
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		e.wg.Wait()
	})
	return e
}

func newProxy(t *testing.T, e *echo) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads its echo within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	return readN(c, len(msg), d)
}

func readN(c net.Conn, n int, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// silent reports whether nothing arrives on c for a short while: the check
// of an absence, bounded by a read deadline.
func silent(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
}

func TestForwards(t *testing.T) {
	p := newProxy(t, newEcho(t))
	c := dial(t, p)
	for _, msg := range []string{"hello", "world"} {
		if got, err := roundTrip(c, msg, 5*time.Second); err != nil || got != msg {
			t.Fatalf("round trip of %q: %q, %v", msg, got, err)
		}
	}
}

// A paused direction holds its bytes and delivers every one when unpaused.
func TestPauseHoldsAndDelivers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		pause, unpause func(*Proxy)
	}{
		{"tx", (*Proxy).PauseTx, (*Proxy).UnpauseTx},
		{"rx", (*Proxy).PauseRx, (*Proxy).UnpauseRx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, newEcho(t))
			c := dial(t, p)
			tc.pause(p)
			tc.pause(p) // twice: one unpause still frees the link
			if _, err := c.Write([]byte("held")); err != nil {
				t.Fatal(err)
			}
			if !silent(t, c) {
				t.Fatal("bytes passed a paused link")
			}
			tc.unpause(p)
			if got, err := readN(c, 4, 5*time.Second); err != nil || got != "held" {
				t.Fatalf("after unpause: %q, %v", got, err)
			}
		})
	}
}

// A blackholed direction passes nothing; when the light returns, a
// connection that had bytes to carry is reset (they never arrive), one that
// was idle goes on, and new connections work.
func TestBlackholeResetsWhatItHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dark     func(*Proxy)
		light    func(*Proxy)
		arrivals int64 // bytes the target gets from the held write
	}{
		{"tx", (*Proxy).BlackholeTx, (*Proxy).UnblackholeTx, 0},
		{"rx", (*Proxy).BlackholeRx, (*Proxy).UnblackholeRx, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEcho(t)
			p := newProxy(t, e)
			busy, idle := dial(t, p), dial(t, p)
			if _, err := roundTrip(idle, "up", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			before := e.received.Load()
			tc.dark(p)
			if _, err := busy.Write([]byte("lost")); err != nil {
				t.Fatal(err)
			}
			if !silent(t, busy) {
				t.Fatal("bytes passed a dark link")
			}
			tc.light(p)
			_ = busy.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := busy.Read(make([]byte, 8)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the link that held bytes in the dark was not reset: read %d, %v", n, err)
			}
			if got := e.received.Load() - before; got != tc.arrivals {
				t.Fatalf("the target got %d bytes of the held write, want %d", got, tc.arrivals)
			}
			if got, err := roundTrip(idle, "on", 5*time.Second); err != nil || got != "on" {
				t.Fatalf("the idle link: %q, %v", got, err)
			}
			if got, err := roundTrip(dial(t, p), "new", 5*time.Second); err != nil || got != "new" {
				t.Fatalf("a new link: %q, %v", got, err)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t, newEcho(t))
	c := dial(t, p)
	const d = 50 * time.Millisecond
	p.DelayTx(d)
	p.DelayRx(d)
	start := time.Now()
	if _, err := roundTrip(c, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip through %v each way took %v", d, took)
	}
	p.UndelayTx()
	p.UndelayRx()
	if _, err := roundTrip(c, "fast", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestModify(t *testing.T) {
	p := newProxy(t, newEcho(t))
	c := dial(t, p)
	var seen atomic.Bool
	p.ModifyRx(func(b []byte) []byte {
		if bytes.Contains(b, []byte("tap")) {
			seen.Store(true)
		}
		return bytes.ToUpper(b)
	})
	if got, err := roundTrip(c, "tap", 5*time.Second); err != nil || got != "TAP" || !seen.Load() {
		t.Fatalf("modified round trip: %q, %v, seen %v", got, err, seen.Load())
	}
	p.UnmodifyRx()
	if got, err := roundTrip(c, "tap", 5*time.Second); err != nil || got != "tap" {
		t.Fatalf("unmodified round trip: %q, %v", got, err)
	}
}

// Close ends every link, idle or held, and leaves no goroutine behind
// (TestMain checks).
func TestCloseEndsEveryLink(t *testing.T) {
	e := newEcho(t)
	p, err := Listen("127.0.0.1:0", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	idle, held := dial(t, p), dial(t, p)
	if _, err := roundTrip(idle, "up", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.PauseTx()
	if _, err := held.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range []net.Conn{idle, held} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a link outlived Close: %v", err)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("a closed proxy accepted a connection")
	}
}

// A target that is down: the client's connection is closed, not hung.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a link to a dead target stayed open: %v", err)
	}
}
