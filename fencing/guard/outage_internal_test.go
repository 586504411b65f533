package guard

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestOutageLogSummarises: in a long outage, after its first line, the
// log has at most one line per outageLogEvery, counting the rejections
// since the last line; the line once the dependency answers counts them
// all and says how long the outage lasted; an answer outside an outage
// logs nothing.
func TestOutageLogSummarises(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	l := zap.New(core)
	var o outageLog
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err := errors.New("store down")
	o.answered(l, "the mark store", func() time.Time { return t0 })
	for i := range 1000 { // 1000 rejections in 1 s
		o.reject(l, err, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("1000 rejections within %v logged %d lines, want 1", outageLogEvery, n)
	}
	o.reject(l, err, t0.Add(outageLogEvery))
	o.reject(l, err, t0.Add(outageLogEvery+time.Second))
	end := t0.Add(outageLogEvery + 2*time.Second)
	o.answered(l, "the mark store", func() time.Time { return end })
	o.answered(l, "the mark store", func() time.Time { return end })
	got := logs.All()
	if len(got) != 3 {
		t.Fatalf("logged %d lines, want 3: %v", len(got), got)
	}
	if c := got[1].ContextMap(); got[1].Level != zap.WarnLevel || c["rejected"] != int64(1000) || c["outage"] != outageLogEvery {
		t.Errorf("the line after %v: %s %q %v, want a warning of 1000 rejections in an outage of %v", outageLogEvery, got[1].Level, got[1].Message, c, outageLogEvery)
	}
	if c := got[2].ContextMap(); got[2].Level != zap.InfoLevel || c["rejected"] != int64(1002) || c["outage"] != end.Sub(t0) {
		t.Errorf("the line once the store answers: %s %q %v, want Info of 1002 rejections in %v", got[2].Level, got[2].Message, c, end.Sub(t0))
	}
}
