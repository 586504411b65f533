package testserver_test

import (
	"errors"
	"net"
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

// bench runs its ZooKeeper on a ServerJVM, which takes no flags of
// QuickJVM's: it must start and serve all the same.
func TestZooKeeperOnAServerJVM(t *testing.T) {
	zks, err := testserver.LaunchZooKeeperOn(t.TempDir(), 1, testserver.ServerJVM)
	if errors.Is(err, testserver.ErrNotInstalled) {
		testserver.Missing(t, "ZooKeeper (with a Java runtime)", testserver.ZooKeeperInstall)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer zks[0].Stop()
	if out, err := testserver.FourLetter(zks[0].Addr, "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok = %q, %v", out, err)
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

// Every client of a test server comes from 127.0.0.1: the server takes more
// connections from one address than ZooKeeper's default of 60 (bench opens
// one per contender, 128 and more).
func TestZooKeeperTakesManyConnectionsFromOneAddress(t *testing.T) {
	zk := testserver.StartZooKeeper(t)
	for range 80 {
		c, err := net.Dial("tcp", zk.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if out, err := testserver.FourLetter(zk.Addr, "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok with 80 connections open = %q, %v", out, err)
	}
}
