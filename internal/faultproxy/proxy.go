// Package faultproxy is a TCP proxy that injects the network faults the
// tests need: a link that holds its bytes (paused), one that goes dark
// (blackholed), one that is slow (delayed), and a tap on the bytes passing.
//
// Unlike a proxy that discards bytes, it never loses a byte from a
// connection that goes on: a real network delivers a stream's bytes in order
// or breaks the connection, and a protocol such as HTTP/2 that lost a frame
// in the middle of a live connection can stay broken for good (every new
// stream reset) without its keepalives ever noticing. So a paused link
// delivers what it held when it is unpaused, and a blackholed link resets,
// when the light returns, every connection that had bytes to carry while it
// was dark: their bytes are lost with the connection, and the client dials
// a fresh one.
//
// The two directions are named from the proxy's listener: Tx carries what
// the dialling side sends towards the target, Rx what comes back.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// Proxy forwards every connection accepted on its address to its target.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex // guards the fields below
	tx, rx direction
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every link's pumps
}

// direction is the fault state of one direction of every link.
type direction struct {
	paused bool
	dark   bool
	// open is closed while bytes flow (neither paused nor dark) and replaced
	// by a fresh channel when they stop, so that a held pump waits on it.
	open   chan struct{}
	delay  time.Duration
	modify func([]byte) []byte
	// watch sees every chunk as it arrives, before it is held or passed.
	watch func([]byte)
}

func (d *direction) blocked() bool { return d.paused || d.dark }

// link is one proxied connection: the accepted one and the one dialled to
// the target.
type link struct {
	in, out   net.Conn
	life      context.Context // ends when the link is closed
	end       context.CancelFunc
	closeOnce sync.Once
	// heldDark records, per direction (0: Tx, 1: Rx), that the link held
	// bytes while that direction was dark. Guarded by Proxy.mu.
	heldDark [2]bool
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		l.end()
		l.in.Close()
		l.out.Close()
	})
}

// dialTimeout bounds the dial to the target for one accepted connection.
const dialTimeout = 5 * time.Second

// Listen starts a proxy listening on addr (host:port; port 0 picks a free
// one) that forwards to target.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{})}
	p.tx.open = closedChan()
	p.rx.open = closedChan()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every open connection and waits until the
// proxy's goroutines are gone. Closing twice is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.links
	p.links = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for l := range links {
		l.close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error: keep serving
		}
		out, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			in.Close() // the target is down: the client sees a refused link
			continue
		}
		l := &link{in: in, out: out}
		l.life, l.end = context.WithCancel(context.Background())
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(l, 0)
		go p.pump(l, 1)
	}
}

// pump copies one direction of l (0: Tx, in to out; 1: Rx, out to in) until
// either side ends, applying that direction's faults to each chunk read.
func (p *Proxy) pump(l *link, dir int) {
	defer p.wg.Done()
	defer p.forget(l)
	defer l.close()
	src, dst := l.in, l.out
	if dir == 1 {
		src, dst = l.out, l.in
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			data, delay, ok := p.admit(l, dir, buf[:n])
			if !ok {
				return
			}
			if delay > 0 && !ctxtime.Sleep(l.life, delay) {
				return
			}
			if len(data) > 0 {
				if _, werr := dst.Write(data); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF or an error: the link ends both ways, as etcd's proxy does
		}
	}
}

// admit passes a chunk through the direction's tap and holds it while the
// direction is paused or dark. It returns the chunk to write and the delay
// to apply, or false when the link ended meanwhile: closed, or reset because
// it held bytes while dark.
func (p *Proxy) admit(l *link, dir int, data []byte) ([]byte, time.Duration, bool) {
	p.mu.Lock()
	watch := p.dir(dir).watch
	p.mu.Unlock()
	if watch != nil {
		watch(data)
	}
	for {
		p.mu.Lock()
		d := p.dir(dir)
		if !d.blocked() {
			select {
			case <-l.life.Done(): // reset while it held the chunk
				p.mu.Unlock()
				return nil, 0, false
			default:
			}
			modify, delay := d.modify, d.delay
			p.mu.Unlock()
			if modify != nil {
				data = modify(data)
			}
			return data, delay, true
		}
		if d.dark {
			l.heldDark[dir] = true
		}
		open := d.open
		p.mu.Unlock()
		select {
		case <-open:
		case <-l.life.Done():
			return nil, 0, false
		}
	}
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

func (p *Proxy) dir(dir int) *direction {
	if dir == 0 {
		return &p.tx
	}
	return &p.rx
}

// set changes direction dir's state with f and then lets held bytes flow
// or holds new ones as the new state says. A link that held bytes while the
// direction was dark and is dark no longer is reset.
func (p *Proxy) set(dir int, f func(d *direction)) {
	p.mu.Lock()
	d := p.dir(dir)
	wasBlocked := d.blocked()
	f(d)
	if !d.dark {
		// Reset before anything held flows: a reset link's pumps see life end
		// closed and drop what they hold.
		for l := range p.links {
			if l.heldDark[dir] {
				l.heldDark[dir] = false
				l.close()
			}
		}
	}
	switch {
	case wasBlocked && !d.blocked():
		close(d.open)
	case !wasBlocked && d.blocked():
		d.open = make(chan struct{})
	}
	p.mu.Unlock()
}

// PauseTx holds the bytes sent towards the target until UnpauseTx, which
// delivers them: the link is slow, not broken.
func (p *Proxy) PauseTx() { p.set(0, func(d *direction) { d.paused = true }) }

// UnpauseTx delivers what PauseTx held and lets bytes flow again.
func (p *Proxy) UnpauseTx() { p.set(0, func(d *direction) { d.paused = false }) }

// PauseRx is PauseTx for the bytes coming back from the target.
func (p *Proxy) PauseRx() { p.set(1, func(d *direction) { d.paused = true }) }

// UnpauseRx is UnpauseTx for the bytes coming back from the target.
func (p *Proxy) UnpauseRx() { p.set(1, func(d *direction) { d.paused = false }) }

// BlackholeTx makes the direction towards the target dark: no byte sent
// arrives. Requests hang until their deadline.
func (p *Proxy) BlackholeTx() { p.set(0, func(d *direction) { d.dark = true }) }

// UnblackholeTx ends BlackholeTx: every connection that sent bytes while
// the direction was dark is reset (those bytes are lost with it), the
// others go on.
func (p *Proxy) UnblackholeTx() { p.set(0, func(d *direction) { d.dark = false }) }

// BlackholeRx is BlackholeTx for the bytes coming back from the target:
// requests arrive, replies do not.
func (p *Proxy) BlackholeRx() { p.set(1, func(d *direction) { d.dark = true }) }

// UnblackholeRx is UnblackholeTx for the bytes coming back from the target.
func (p *Proxy) UnblackholeRx() { p.set(1, func(d *direction) { d.dark = false }) }

// DelayTx holds every chunk of bytes sent towards the target for d before
// passing it on; chunks of one connection keep their order, so a busy
// connection's latency adds up. A non-positive d removes the delay.
func (p *Proxy) DelayTx(d time.Duration) { p.set(0, func(s *direction) { s.delay = max(d, 0) }) }

// UndelayTx removes DelayTx's latency.
func (p *Proxy) UndelayTx() { p.DelayTx(0) }

// DelayRx is DelayTx for the bytes coming back from the target.
func (p *Proxy) DelayRx(d time.Duration) { p.set(1, func(s *direction) { s.delay = max(d, 0) }) }

// UndelayRx removes DelayRx's latency.
func (p *Proxy) UndelayRx() { p.DelayRx(0) }

// ModifyTx passes every chunk sent towards the target through f, which
// returns what to send instead (it may return its argument). f runs on the
// proxy's goroutines, one chunk at a time per connection; a chunk it drops
// or alters breaks the protocol above, as on a real network that would.
func (p *Proxy) ModifyTx(f func([]byte) []byte) { p.set(0, func(d *direction) { d.modify = f }) }

// UnmodifyTx removes ModifyTx's function.
func (p *Proxy) UnmodifyTx() { p.ModifyTx(nil) }

// WatchTx calls f with every chunk sent to the target as it arrives,
// whether it is then passed, held (paused) or dropped (dark); f must not
// keep the slice. nil stops watching.
func (p *Proxy) WatchTx(f func([]byte)) { p.set(0, func(d *direction) { d.watch = f }) }

// ModifyRx is ModifyTx for the bytes coming back from the target.
func (p *Proxy) ModifyRx(f func([]byte) []byte) { p.set(1, func(d *direction) { d.modify = f }) }

// UnmodifyRx removes ModifyRx's function.
func (p *Proxy) UnmodifyRx() { p.ModifyRx(nil) }
