package markstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/fencing/guard/storetest"
)

// raiserEnv makes this test binary a child that raises one scope of the
// File store in the directory it names: tokens start, start+2, start+4,
// ... up to raiserTop.
const (
	raiserEnv   = "DISCO_MARKSTORE_RAISER"
	raiserStart = "DISCO_MARKSTORE_RAISER_START"
	raiserTop   = 300
	raiserScope = "/raised/by/two"
)

// TestFileRaisesAcrossProcesses: two processes raise one scope of one
// directory at once, one the odd tokens, the other the even ones, while
// this one reads the mark. The mark never goes down, and ends at the
// highest token raised. (Without a lock across processes, a process that
// read 5 could write 7 over the 8 the other wrote in between.)
func TestFileRaisesAcrossProcesses(t *testing.T) {
	if dir := os.Getenv(raiserEnv); dir != "" {
		raiser(dir)
		return
	}
	dir := t.TempDir()
	s, err := markstore.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for start := 1; start <= 2; start++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileRaisesAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), raiserEnv+"="+dir, raiserStart+"="+strconv.Itoa(start))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(cmds))
	for i, cmd := range cmds {
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("raiser %d: %v: %s", i, err, outs[i].String())
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	ctx := context.Background()
	var last fencing.Token
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		m, err := s.Load(ctx, raiserScope)
		if err != nil {
			t.Fatal(err)
		}
		if m < last {
			t.Fatalf("the mark went down from %d to %d", last, m)
		}
		last = m
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m, err := s.Load(ctx, raiserScope); err != nil || m != raiserTop {
		t.Fatalf("mark %d, %v after raises up to %d", m, err, raiserTop)
	}
}

func raiser(dir string) {
	start, _ := strconv.Atoi(os.Getenv(raiserStart))
	s, err := markstore.NewFile(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for tok := start; tok <= raiserTop; tok += 2 {
		if err := s.Raise(context.Background(), raiserScope, fencing.Token(tok)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(0)
}

// TestFileFleet: two and three guards on one directory, in this process
// and in others, fence as one resource.
func TestFileFleet(t *testing.T) {
	storetest.Fleet(t, t.TempDir(), nil, openFile)
}
