package safety

import (
	"testing"

	"github.com/ahrtr/disco/internal/faultsuite"
)

// TestSafetyFaults runs the fault suite's short schedule on a
// redis-server with appendfsync always (see package faultsuite).
func TestSafetyFaults(t *testing.T) {
	if faultsuite.LongRun() {
		t.Skip(faultsuite.LongEnv + " is set: TestSafetyLong runs instead")
	}
	faultsuite.Default(t, startRedis(t))
}

// TestSafetyLong runs the long schedule when DISCO_SAFETY_LONG is set.
func TestSafetyLong(t *testing.T) {
	if !faultsuite.LongRun() {
		t.Skip("set " + faultsuite.LongEnv + "=1 to run the long fault run")
	}
	faultsuite.Long(t, startRedis(t))
}
