package markstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// syncs records the fsyncs of the File stores under one directory through
// syncHook, failing those fail says to fail.
type syncs struct {
	mu    sync.Mutex
	under string
	paths []string
	fail  func(path string) bool
}

var errSyncFailed = errors.New("fsync failed (injected)")

// recordSyncs makes the stores' fsyncs of paths under dir go through a new
// syncs, until the test ends.
func recordSyncs(t *testing.T, dir string) *syncs {
	s := &syncs{under: dir}
	syncHook = func(path string) error {
		if path != dir && !strings.HasPrefix(path, dir+string(filepath.Separator)) && !strings.HasPrefix(dir, path+string(filepath.Separator)) {
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fail != nil && s.fail(path) {
			return errSyncFailed
		}
		s.paths = append(s.paths, path)
		return nil
	}
	t.Cleanup(func() { syncHook = nil })
	return s
}

// synced reports how many times path was fsynced.
func (s *syncs) synced(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.paths {
		if p == path {
			n++
		}
	}
	return n
}

// TestNewFileSyncsTheDirectoriesItMakes: the directory NewFile creates,
// and those it creates above it, are entries of their parents: NewFile
// fsyncs each parent before it returns, so that after a crash of the
// machine the directory, and the marks fsynced into it, are still there.
func TestNewFileSyncsTheDirectoriesItMakes(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "a", "marks")
	s := recordSyncs(t, dir)
	if _, err := NewFile(dir); err != nil {
		t.Fatal(err)
	}
	for _, parent := range []string{top, filepath.Join(top, "a")} {
		if s.synced(parent) == 0 {
			t.Errorf("NewFile(%s) created a directory in %s and did not fsync %s", dir, parent, parent)
		}
	}
}

// TestFileReportsOnlySyncedMarks: a raise whose fsync of the directory
// failed has renamed the new mark into place, not durably. A later
// RaiseLoad (or Raise) that finds that mark must not report it, and a
// guard accept a token by it, before it is durable: it fsyncs the
// directory first.
func TestFileReportsOnlySyncedMarks(t *testing.T) {
	dir := t.TempDir()
	s := recordSyncs(t, dir)
	f, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.fail = func(path string) bool { return path == dir }
	if _, err := f.RaiseLoad(ctx, "/a", 5); !errors.Is(err, errSyncFailed) {
		t.Fatalf("RaiseLoad(5) with the directory's fsync failing: %v", err)
	}
	s.fail = nil
	before := s.synced(dir)
	if m, err := f.RaiseLoad(ctx, "/a", 5); err != nil || m != 5 {
		t.Fatalf("RaiseLoad(5) again = %d, %v; want 5", m, err)
	}
	if s.synced(dir) == before {
		t.Fatalf("RaiseLoad(5) reported the mark 5, which a failed raise left unsynced, without fsyncing %s", dir)
	}
	s.fail = func(path string) bool { return path == dir }
	if m, err := f.RaiseLoad(ctx, "/a", 4); err == nil {
		t.Fatalf("RaiseLoad(4) with the directory's fsync failing = %d, nil; want the fsync's error", m)
	}
}

// TestFileLoadReportsOnlySyncedMarks: a raise killed (or failed) after
// its rename and before its fsync of the directory leaves a mark that a
// crash of the machine may take back; so does a raise of another process
// still under way. A guard accepts a token equal to a mark it loaded with
// no write of its own, so Load must not report such a mark before it is
// durable: it fsyncs the directory first (and fails if it cannot). A mark
// it knows to be durable costs no fsync.
func TestFileLoadReportsOnlySyncedMarks(t *testing.T) {
	dir := t.TempDir()
	s := recordSyncs(t, dir)
	w, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.fail = func(path string) bool { return path == dir }
	if err := w.Raise(ctx, "/a", 5); !errors.Is(err, errSyncFailed) {
		t.Fatalf("Raise(5) with the directory's fsync failing: %v", err)
	}
	f, err := NewFile(dir) // the resource, restarted
	if err != nil {
		t.Fatal(err)
	}
	if m, err := f.Load(ctx, "/a"); err == nil {
		t.Fatalf("Load with the directory's fsync failing = %d, nil; want the fsync's error (the mark 5 is not durable)", m)
	}
	s.fail = nil
	before := s.synced(dir)
	if m, err := f.Load(ctx, "/a"); err != nil || m != 5 {
		t.Fatalf("Load = %d, %v; want 5", m, err)
	}
	if s.synced(dir) == before {
		t.Fatalf("Load reported the mark 5, which a failed raise left unsynced, without fsyncing %s", dir)
	}
	before = s.synced(dir)
	if m, err := f.Load(ctx, "/a"); err != nil || m != 5 {
		t.Fatalf("Load again = %d, %v; want 5", m, err)
	}
	if m, err := f.Load(ctx, "/none"); err != nil || m != 0 {
		t.Fatalf("Load of a scope never raised = %d, %v; want 0", m, err)
	}
	if n := s.synced(dir) - before; n != 0 {
		t.Errorf("Loads of a mark Load made durable, and of no mark, fsynced %s %d times, want 0", dir, n)
	}
	if err := f.Raise(ctx, "/b", 7); err != nil {
		t.Fatal(err)
	}
	before = s.synced(dir)
	if m, err := f.Load(ctx, "/b"); err != nil || m != 7 {
		t.Fatalf("Load(/b) = %d, %v; want 7", m, err)
	}
	if n := s.synced(dir) - before; n != 0 {
		t.Errorf("Load of a mark this store raised durably fsynced %s %d times, want 0", dir, n)
	}
}
