package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ahrtr/disco/metrics"
)

// A loop woken with nothing left to drain (a Post's signal that came after
// an earlier drain took its message) is no drain of its mailbox: only
// drains that took messages are counted.
func TestDrainedCountsOnlyDrainsThatTookMessages(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Drained(0)
	m.Drained(3)
	m.Drained(0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var h *dto.Histogram
	for _, mf := range mfs {
		if mf.GetName() == "disco_loop_mailbox_depth" {
			h = mf.GetMetric()[0].GetHistogram()
		}
	}
	if h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Fatalf("disco_loop_mailbox_depth = %v, want one drain of 3", h)
	}
}
