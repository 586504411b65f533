package safety

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// scenario is one round's primitive and fault.
type scenario struct {
	kind  kind
	fault fault
}

// defaultScenarios run in every plain "go test": each fault at least once,
// each primitive under a client fault.
var defaultScenarios = []scenario{
	{kindLock, faultPartition},
	{kindRWLock, faultPause},
	{kindElection, faultKillLeader},
	{kindLock, faultPause},
	{kindElection, faultPartition},
	{kindRWLock, faultKillFollower},
	{kindLock, faultDelay},
	{kindRWLock, faultPartition},
	{kindLock, faultKillLeader},
	{kindElection, faultPause},
}

// TestSafetyFaults runs one round of each default scenario with the fixed
// seed (or DISCO_SAFETY_SEED).
func TestSafetyFaults(t *testing.T) {
	if longMode() {
		t.Skip("DISCO_SAFETY_LONG is set: TestSafetyLong runs instead")
	}
	c := cluster(t)
	sd := seed()
	t.Logf("seed %d (set DISCO_SAFETY_SEED to change); cluster started in %v", sd, shared.started.Round(time.Millisecond))
	sq := openSQLRegister(t)
	start := time.Now()
	var total stats
	for i, sc := range defaultScenarios {
		rs := time.Now()
		st := runRound(t, c, sq, fmt.Sprintf("default-%d", sd), sd, i, sc.kind, sc.fault)
		total.add(st)
		t.Logf("round %d: %s under %s: %v, %d requests (%d stale), %d holds (%d ended involuntarily), recovery %v",
			i, sc.kind, sc.fault, time.Since(rs).Round(time.Millisecond), st.httpAttempted, st.httpStale,
			st.holds, st.lostHolds, st.maxRecovery.Round(time.Millisecond))
		if t.Failed() {
			break
		}
	}
	restoreCluster(t, c)
	if !t.Failed() {
		t.Log("\n" + total.report(sd, time.Since(start)))
	}
}

// TestSafetyLong runs DISCO_SAFETY_ROUNDS rounds (default 200) of random
// scenarios when DISCO_SAFETY_LONG is set, and prints a report.
func TestSafetyLong(t *testing.T) {
	if !longMode() {
		t.Skip("set DISCO_SAFETY_LONG=1 to run the long fault run")
	}
	rounds := int(envInt("DISCO_SAFETY_ROUNDS", 200))
	c := cluster(t)
	sd := seed()
	t.Logf("seed %d, %d rounds", sd, rounds)
	sq := openSQLRegister(t)
	rng := rand.New(rand.NewPCG(sd, 0))
	start := time.Now()
	var total stats
	var order []int
	for i := range rounds {
		// Every fault equally often, in a random order; the primitive at random.
		if i%int(numFaults) == 0 {
			order = rng.Perm(int(numFaults))
		}
		f := fault(order[i%int(numFaults)])
		k := kind(rng.IntN(int(numKinds)))
		rs := time.Now()
		st := runRound(t, c, sq, fmt.Sprintf("long-%d", sd), sd, i, k, f)
		total.add(st)
		if testing.Verbose() {
			fmt.Printf("round %d/%d: %s under %s: %v, %d requests (%d stale), %d holds (%d ended involuntarily)\n",
				i+1, rounds, k, f, time.Since(rs).Round(time.Millisecond), st.httpAttempted, st.httpStale, st.holds, st.lostHolds)
		}
		if t.Failed() {
			break
		}
	}
	restoreCluster(t, c)
	report := total.report(sd, time.Since(start))
	if t.Failed() {
		report = "FAILED after " + fmt.Sprint(total.rounds) + " rounds; partial " + report
	}
	fmt.Println(report)
}
