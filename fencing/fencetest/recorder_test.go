package fencetest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recorder is a test that records what the kit reports instead of failing,
// so that the kit's own tests can see it fail a broken resource. It runs
// each subtest on a goroutine of its own, as testing does, so that Fatal
// and Skip end only that subtest.
type recorder struct {
	testing.TB // the real test, for what recorder does not record
	name       string
	only       string // if set, Run runs only the subtest of that name

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	failed   bool
	skipped  bool
	logs     []string
	cleanups []func()
	subs     []*recorder
}

func newRecorder(t testing.TB, name string) *recorder {
	ctx, cancel := context.WithCancel(t.Context())
	return &recorder{TB: t, name: name, ctx: ctx, cancel: cancel}
}

func (r *recorder) Name() string                 { return r.name }
func (r *recorder) Helper()                      {}
func (r *recorder) Context() context.Context     { return r.ctx }
func (r *recorder) Log(args ...any)              { r.log(fmt.Sprint(args...)) }
func (r *recorder) Logf(format string, a ...any) { r.log(fmt.Sprintf(format, a...)) }
func (r *recorder) Error(args ...any)            { r.Log(args...); r.Fail() }
func (r *recorder) Errorf(f string, a ...any)    { r.Logf(f, a...); r.Fail() }
func (r *recorder) Fatal(args ...any)            { r.Log(args...); r.FailNow() }
func (r *recorder) Fatalf(f string, a ...any)    { r.Logf(f, a...); r.FailNow() }
func (r *recorder) Skip(args ...any)             { r.Log(args...); r.SkipNow() }
func (r *recorder) Skipf(f string, a ...any)     { r.Logf(f, a...); r.SkipNow() }

func (r *recorder) log(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, s)
}

func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) FailNow() { r.Fail(); runtime.Goexit() }

func (r *recorder) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// Run runs f as the subtest name, to its end, and reports whether it
// passed. A failed subtest fails r.
func (r *recorder) Run(name string, f func(*recorder)) bool {
	if r.only != "" && name != r.only {
		return true
	}
	sub := newRecorder(r.TB, r.name+"/"+name)
	r.mu.Lock()
	r.subs = append(r.subs, sub)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sub.finish()
		f(sub)
	}()
	<-done
	if sub.Failed() {
		r.Fail()
		return false
	}
	return true
}

// finish ends the test: its context, then its cleanups, last first.
func (r *recorder) finish() {
	r.cancel()
	r.mu.Lock()
	cs := slices.Clone(r.cleanups)
	r.mu.Unlock()
	for _, f := range slices.Backward(cs) {
		f()
	}
}

// verdicts returns the verdict of each subtest by its last name element:
// "FAIL", "SKIP" or "PASS", with what it logged.
func (r *recorder) verdicts() map[string]verdict {
	out := make(map[string]verdict)
	for _, s := range r.subs {
		v := verdict{status: "PASS", logs: strings.Join(s.logs, "\n")}
		switch {
		case s.Failed():
			v.status = "FAIL"
		case s.Skipped():
			v.status = "SKIP"
		}
		out[historyName(s)] = v
	}
	return out
}

type verdict struct {
	status string
	logs   string
}

// runRecorded runs the kit on res under a recorder, to its end, and returns
// the verdict of each history. only, if not empty, names the one history
// to run.
func runRecorded(t *testing.T, res Resource, only string) map[string]verdict {
	t.Helper()
	rec := newRecorder(t, t.Name())
	rec.only = only
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rec.finish()
		run(rec, res)
	}()
	<-done
	if len(rec.subs) == 0 {
		t.Fatalf("the kit ran no history: %s", strings.Join(rec.logs, "\n"))
	}
	return rec.verdicts()
}

// expect checks the verdicts of a recorded run: the histories in fail
// failed, each with a message that starts with its name and contains every
// phrase of fail[name]; those in skip were skipped; every other passed.
func expect(t *testing.T, got map[string]verdict, fail map[string][]string, skip ...string) {
	t.Helper()
	for name, v := range got {
		want := "PASS"
		if _, ok := fail[name]; ok {
			want = "FAIL"
		} else if slices.Contains(skip, name) {
			want = "SKIP"
		}
		if v.status != want {
			t.Errorf("history %s: %s, want %s; it logged:\n%s", name, v.status, want, v.logs)
			continue
		}
		if want != "FAIL" {
			continue
		}
		if !strings.Contains(v.logs, name+": ") {
			t.Errorf("history %s failed, but no message names it:\n%s", name, v.logs)
		}
		for _, phrase := range fail[name] {
			if !strings.Contains(v.logs, phrase) {
				t.Errorf("history %s failed, but no message says %q:\n%s", name, phrase, v.logs)
			}
		}
	}
	for name := range fail {
		if _, ok := got[name]; !ok {
			t.Errorf("history %s did not run", name)
		}
	}
}
