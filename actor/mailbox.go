package actor

import "sync"

// Mailbox is an unbounded first-in, first-out queue of messages for one loop.
// Any goroutine may Post; one goroutine, the loop, receives with Ready and
// Drain. The zero value is not usable; call NewMailbox.
type Mailbox[M any] struct {
	mu     sync.Mutex
	queue  []M
	closed bool
	ready  chan struct{}
}

// NewMailbox returns an empty, open mailbox.
func NewMailbox[M any]() *Mailbox[M] {
	return &Mailbox[M]{ready: make(chan struct{}, 1)}
}

// Post appends msg to the queue and never blocks. It reports false, and drops
// msg, once the mailbox is closed.
func (m *Mailbox[M]) Post(msg M) bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	m.queue = append(m.queue, msg)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
	return true
}

// Ready is signalled after a Post. One signal may stand for many messages, so
// the loop should Drain everything when it fires.
func (m *Mailbox[M]) Ready() <-chan struct{} { return m.ready }

// Drain removes and returns every queued message, in order of posting. buf, if
// not nil, is reused for the next batch; pass the previous batch back in.
func (m *Mailbox[M]) Drain(buf []M) []M {
	clear(buf)
	m.mu.Lock()
	out := m.queue
	m.queue = buf[:0]
	m.mu.Unlock()
	return out
}

// Len returns how many messages are queued, waiting to be drained.
func (m *Mailbox[M]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// Close makes later Posts fail. Messages already queued can still be drained.
func (m *Mailbox[M]) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
