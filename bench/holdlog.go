package main

import (
	"fmt"
	"sync"
	"time"
)

// hold is one acquisition, in nanoseconds since the run's start on the
// monotonic clock. Holds are appended in acquisition order: each is appended
// by its holder while it holds the lock.
type hold struct {
	lockCalled, acquired int64
	releaseCalled        int64 // set before Unlock is called
	released             int64 // set after Unlock returns; 0 if it failed
	token                int64
}

// holdLog is the shared memory the in-process contenders record into.
type holdLog struct {
	start time.Time
	mu    sync.Mutex
	holds []hold
	// checked: the holds before this one have been checked against their
	// predecessors (analyze checks each hold once).
	checked int
}

func (h *holdLog) now() int64 { return int64(time.Since(h.start)) }

func (h *holdLog) acquired(lockCalled, acquired, token int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, hold{lockCalled: lockCalled, acquired: acquired, token: token})
	return len(h.holds) - 1
}

func (h *holdLog) setReleaseCalled(i int, t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[i].releaseCalled = t
}

func (h *holdLog) setReleased(i int, t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[i].released = t
}

// analyze fills s from the holds acquired in [from, to) and checks that the
// holds logged since its last call (all, the first time) never overlapped
// their predecessors and that their tokens only rose.
func (h *holdLog) analyze(s *side, from, to int64, errs *errCount) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fromReturn []time.Duration
	for i, cur := range h.holds {
		if i > 0 && i >= h.checked {
			prev := h.holds[i-1]
			if prev.releaseCalled == 0 || cur.acquired < prev.releaseCalled {
				errs.add(fmt.Errorf("mutual exclusion violated: hold %d acquired %v before hold %d released",
					i, time.Duration(cur.acquired), i-1))
			}
			if cur.token <= prev.token {
				errs.add(fmt.Errorf("fencing token went from %d to %d", prev.token, cur.token))
			}
		}
		if cur.acquired < from || cur.acquired >= to {
			continue
		}
		s.Count++
		s.waits = append(s.waits, time.Duration(cur.acquired-cur.lockCalled))
		if i > 0 {
			prev := h.holds[i-1]
			s.handoffs = append(s.handoffs, time.Duration(cur.acquired-prev.releaseCalled))
			if prev.released > 0 {
				// The next holder may return before the previous holder's
				// Unlock does: that counts as a zero handoff.
				fromReturn = append(fromReturn, time.Duration(max(0, cur.acquired-prev.released)))
			}
		}
	}
	s.Handoff = summarize(s.handoffs)
	h.checked = len(h.holds)
	s.fromReturn = fromReturn
	s.HandoffR = summarize(fromReturn)
	s.Wait = summarize(s.waits)
	s.Window = time.Duration(to - from)
	s.rate()
}

// split divides each handoff into holds acquired in [from, to) at the
// moment the previous holder's release call returned (see handoffSplit).
// Handoffs whose release failed are left out.
func (h *holdLog) split(from, to int64) *handoffSplit {
	h.mu.Lock()
	defer h.mu.Unlock()
	var handoffs, releases, rests []time.Duration
	for i := 1; i < len(h.holds); i++ {
		prev, cur := h.holds[i-1], h.holds[i]
		if cur.acquired < from || cur.acquired >= to || prev.released == 0 {
			continue
		}
		handoffs = append(handoffs, time.Duration(cur.acquired-prev.releaseCalled))
		releases = append(releases, time.Duration(prev.released-prev.releaseCalled))
		rests = append(rests, time.Duration(cur.acquired-prev.released))
	}
	return newHandoffSplit(handoffs, releases, rests)
}

// count returns how many holds were acquired in [from, to).
func (h *holdLog) count(from, to int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, x := range h.holds {
		if x.acquired >= from && x.acquired < to {
			n++
		}
	}
	return n
}

// last returns when the last hold was acquired (0 if none).
func (h *holdLog) last() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.holds) == 0 {
		return 0
	}
	return h.holds[len(h.holds)-1].acquired
}
