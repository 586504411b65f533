package faultsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Config from the environment.
const (
	// SeedEnv fixes the schedule's seed (default 20240508).
	SeedEnv = "DISCO_SAFETY_SEED"
	// LongEnv, when set, makes Long run (and Default skip).
	LongEnv = "DISCO_SAFETY_LONG"
	// RoundsEnv is how many rounds Long runs (default 200).
	RoundsEnv = "DISCO_SAFETY_ROUNDS"
)

const defaultSeed = 20240508

// Default runs the short schedule against c, unless LongEnv is set: every
// fault of c (and Pause) twice, each time under another primitive, with a
// fixed seed (or SeedEnv's). It logs the report.
func Default(t *testing.T, c Cluster) {
	if LongRun() {
		t.Skip(LongEnv + " is set: the long run runs instead")
	}
	faults := faultsOf(c)
	sd := seed()
	t.Logf("%s: seed %d (set %s to change)", c.Name(), sd, SeedEnv)
	sq := openSQLRegister(t)
	start := time.Now()
	var total stats
	for i := range 2 * len(faults) {
		f, k := faults[i%len(faults)], kind((i%len(faults)+i/len(faults))%int(numKinds))
		rs := time.Now()
		st := runRound(t, c, sq, fmt.Sprintf("default-%d", sd), sd, i, k, f)
		total.add(st)
		t.Logf("round %d: %s under %s: %v, %d requests (%d stale), %d holds (%d ended involuntarily), recovery %v",
			i, k, f.Name, time.Since(rs).Round(time.Millisecond), st.httpAttempted, st.httpStale,
			st.holds, st.lostHolds, st.maxRecovery.Round(time.Millisecond))
		if t.Failed() {
			break
		}
	}
	restore(t, c)
	if !t.Failed() {
		t.Log("\n" + total.report(c.Name(), faults, sd, time.Since(start)))
	}
}

// Long runs RoundsEnv rounds (default 200) of random scenarios against c
// when LongEnv is set, every fault equally often, and prints the report.
func Long(t *testing.T, c Cluster) {
	if !LongRun() {
		t.Skip("set " + LongEnv + "=1 to run the long fault run")
	}
	faults := faultsOf(c)
	rounds := int(envInt(RoundsEnv, 200))
	sd := seed()
	t.Logf("%s: seed %d, %d rounds", c.Name(), sd, rounds)
	sq := openSQLRegister(t)
	rng := rand.New(rand.NewPCG(sd, 0))
	start := time.Now()
	var total stats
	var order []int
	for i := range rounds {
		// Every fault equally often, in a random order; the primitive at random.
		if i%len(faults) == 0 {
			order = rng.Perm(len(faults))
		}
		f := faults[order[i%len(faults)]]
		k := kind(rng.IntN(int(numKinds)))
		rs := time.Now()
		st := runRound(t, c, sq, fmt.Sprintf("long-%d", sd), sd, i, k, f)
		total.add(st)
		if testing.Verbose() {
			fmt.Printf("round %d/%d: %s under %s: %v, %d requests (%d stale), %d holds (%d ended involuntarily)\n",
				i+1, rounds, k, f.Name, time.Since(rs).Round(time.Millisecond), st.httpAttempted, st.httpStale, st.holds, st.lostHolds)
		}
		if t.Failed() {
			break
		}
	}
	restore(t, c)
	report := total.report(c.Name(), faults, sd, time.Since(start))
	if t.Failed() {
		report = "FAILED after " + fmt.Sprint(total.rounds) + " rounds; partial " + report
	}
	fmt.Println(report)
}

func faultsOf(c Cluster) []Fault { return append(c.Faults(), Pause) }

func restore(t testing.TB, c Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Restore(ctx); err != nil {
		t.Fatalf("%s: restoring the cluster: %v", c.Name(), err)
	}
}

func envInt(name string, def int64) int64 {
	if s := os.Getenv(name); s != "" {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			return v
		}
	}
	return def
}

func seed() uint64 { return uint64(envInt(SeedEnv, defaultSeed)) }

// LongRun reports whether LongEnv is set: Long runs, Default skips. A test
// asks it before it starts servers it would not use.
func LongRun() bool { return os.Getenv(LongEnv) != "" }

// eventually polls cond until it holds or d passes, and reports which.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
