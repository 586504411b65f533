package testserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testserver"
)

func TestZooKeeperStartsAndStops(t *testing.T) {
	zk := testserver.StartZooKeeper(t)
	out, err := testserver.FourLetter(zk.Addr, "ruok")
	if err != nil || out != "imok" {
		t.Fatalf("ruok = %q, %v", out, err)
	}
	zk.Stop()
	if _, err := testserver.FourLetter(zk.Addr, "ruok"); err == nil {
		t.Fatal("server answers after Stop")
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	zks := testserver.StartZooKeeperEnsemble(t, 3)
	leaders := 0
	for _, zk := range zks {
		out, err := testserver.FourLetter(zk.Addr, "srvr")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "Mode: leader") {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders in a 3-server ensemble", leaders)
	}
}

func TestZooKeeperEnsembleSurvivesLeaderLoss(t *testing.T) {
	zks := testserver.StartZooKeeperEnsemble(t, 3)
	var rest []*testserver.ZooKeeper
	for _, zk := range zks {
		out, _ := testserver.FourLetter(zk.Addr, "srvr")
		if strings.Contains(out, "Mode: leader") {
			zk.Stop()
		} else {
			rest = append(rest, zk)
		}
	}
	// A new leader is usually elected within seconds; three JVMs on a
	// loaded 2-core machine (CI runs packages in parallel) have taken over
	// 20.
	deadline := time.Now().Add(60 * time.Second)
	for _, zk := range rest {
		for {
			out, err := testserver.FourLetter(zk.Addr, "srvr")
			if err == nil && strings.Contains(out, "Mode: ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not serving after the leader died: %q, %v\n%s", zk.Addr, out, err, zk.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
