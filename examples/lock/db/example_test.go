package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func TestZombieWriteRejectedByDatabase(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbFile := filepath.Join(t.TempDir(), "resource.db")

	var out bytes.Buffer
	o, err := run(ctx, &out, etcdtest.Endpoints(), dbFile)
	t.Logf("story:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}

	if o.TokenB <= o.TokenA {
		t.Errorf("B's token %d not above A's %d", o.TokenB, o.TokenA)
	}
	if !errors.Is(o.ZombieErr, fencing.ErrTokenStale) {
		t.Errorf("zombie write: %v, want an error wrapping ErrTokenStale", o.ZombieErr)
	}

	// Look at the row ourselves rather than trusting the story.
	db, err := openDB(ctx, dbFile)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	body, tok, err := read(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if body != valueB || tok != o.TokenB {
		t.Errorf("row = (%q, %d), want B's (%q, %d)", body, tok, valueB, o.TokenB)
	}
	for _, want := range []string{"Lost", "rejected by the database", "ended as promised"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("story does not mention %q", want)
		}
	}
}

// TestFencedWrite checks the single-statement check-and-write on its own.
func TestFencedWrite(t *testing.T) {
	ctx := context.Background()
	db, err := openDB(ctx, filepath.Join(t.TempDir(), "resource.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	steps := []struct {
		token fencing.Token
		stale bool
	}{{5, false}, {5, false}, {9, false}, {7, true}, {9, false}, {10, false}, {1, true}}
	for _, s := range steps {
		err := write(ctx, db, "v"+s.token.String(), s.token)
		if s.stale != errors.Is(err, fencing.ErrTokenStale) || (!s.stale && err != nil) {
			t.Fatalf("write with token %d: %v (want stale: %v)", s.token, err, s.stale)
		}
	}
	if body, tok, err := read(ctx, db); err != nil || body != "v10" || tok != 10 {
		t.Fatalf("row = (%q, %d, %v), want (v10, 10)", body, tok, err)
	}
}
