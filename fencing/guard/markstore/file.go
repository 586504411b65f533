package markstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// ErrInvalidArgument is wrapped by the errors of constructors given bad
// input, of a raise to a token <= 0, of the methods of a nil or zero
// File or SQL (one that NewFile or NewSQL did not make), and of every
// method, and NewSQL, given a nil context.Context (an error that says "nil
// context"; nothing is read or written). It wraps
// primitives.ErrInvalidArgument.
var ErrInvalidArgument = fmt.Errorf("markstore: %w", primitives.ErrInvalidArgument)

// ErrCorrupt is wrapped by the errors of a Load that finds a stored mark it
// cannot read: the store never guesses a mark.
var ErrCorrupt = errors.New("markstore: corrupt mark")

// File keeps marks in a directory, one file per scope, named after a SHA-256
// of the scope and holding the mark in decimal.
//
// Raise writes the new mark to a temporary file in the directory, fsyncs it,
// renames it over the scope's file (atomic on POSIX file systems) and fsyncs
// the directory, and returns only then. So whenever the process is killed,
// between any two of those system calls, the scope's file holds either the
// old mark or the new one, never a partial write, and a mark Raise returned
// for is there after a crash of the machine too. Leftover temporary files
// are ignored by Load and removed by NewFile.
//
// Load reports only durable marks: a mark renamed into place whose
// directory was not fsynced yet (a raise of another process under way, or
// one killed or failed between its rename and that fsync) might be gone
// after a crash of the machine, and a guard accepts a token equal to a
// mark it loaded without writing anything. So Load fsyncs the directory
// before it reports a mark it does not know to be durable. It knows those
// that it (or a Raise or RaiseLoad of the same File) wrote or fsynced, for
// the last few thousand scopes; those cost no fsync.
//
// Several processes on one host may share a directory (the replicas of a
// resource, each with its own guard: see guard.WithStore): each raise of a
// scope holds an exclusive lock on the scope's lock file (flock(2), a file
// named lock-<the same hash>, kept in the directory) from its read of the
// mark to its rename, so raises of one scope never interleave and never
// lower its mark, whichever processes make them. Such locks hold on a local
// file system only: on a network file system (NFS, SMB) two hosts' locks
// may not exclude each other, and one host's raise could lower the mark
// another host's raise set. Use a SQL or etcd store for replicas on
// several hosts.
type File struct {
	dir   string
	locks [64]sync.Mutex // striped by scope: raises of one scope are serial in the process

	// synced holds, by file name, a mark known to be durable in the file
	// (at most maxSynced of them): a Load that reads at most that mark
	// need not fsync the directory.
	syncedMu sync.Mutex
	synced   map[string]fencing.Token
}

const (
	tmpPrefix  = "tmp-"
	markPrefix = "mark-"
	lockPrefix = "lock-"
	// lockRetry is how often a raise tries again for a scope's lock that
	// another process holds.
	lockRetry = 2 * time.Millisecond
	// maxSynced bounds the marks a File remembers as durable (File.synced).
	maxSynced = 4096
)

// NewFile returns a File store in dir, creating the directory if needed and
// removing temporary files a killed process left behind (those of a scope
// whose lock no process holds). When it creates dir (or directories above
// it), it fsyncs the directory that holds each one, so that dir is there
// after a crash of the machine.
func NewFile(dir string) (*File, error) {
	if dir == "" {
		return nil, fmt.Errorf("markstore: NewFile: empty directory: %w", ErrInvalidArgument)
	}
	if err := mkdirDurable(dir); err != nil {
		return nil, fmt.Errorf("markstore: NewFile: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("markstore: NewFile: %w", err)
	}
	f := &File{dir: dir, synced: make(map[string]fencing.Token)}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), tmpPrefix+markPrefix)
		if !ok || len(rest) < sha256.Size*2 {
			continue
		}
		// A raise in progress in another process holds the scope's lock:
		// its temporary file is not left behind.
		fl := flock.New(filepath.Join(dir, lockPrefix+rest[:sha256.Size*2]))
		if locked, err := fl.TryLock(); err == nil && locked {
			_ = os.Remove(filepath.Join(dir, e.Name()))
			_ = fl.Unlock()
		}
	}
	return f, nil
}

// mkdirDurable is os.MkdirAll(dir), then fsyncs the parent of each
// directory it created: a directory's entry is its parent's, and a mark
// fsynced into a directory that a crash took away would be lost with it.
func mkdirDurable(dir string) error {
	var made []string
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := syncDir(filepath.Dir(made[i])); err != nil {
			return err
		}
	}
	return nil
}

// check refuses a File that NewFile did not make: nil (a NewFile error
// ignored) or a zero File, which has no directory and would write to the
// process's working directory; and a nil ctx.
func (f *File) check(ctx context.Context, method string) error {
	if f == nil || f.dir == "" {
		return fmt.Errorf("markstore: File.%s on a File not made by NewFile: %w", method, ErrInvalidArgument)
	}
	if ctx == nil {
		return nilContext("File." + method)
	}
	return nil
}

// nilContext is the error of fn given a nil context.
func nilContext(fn string) error {
	return fmt.Errorf("markstore: %s: nil context: %w", fn, ErrInvalidArgument)
}

// name returns the file name of scope's mark, the path of its lock file,
// and its mutex in the process.
func (f *File) name(scope string) (string, string, *sync.Mutex) {
	sum := sha256.Sum256([]byte(scope))
	h := hex.EncodeToString(sum[:])
	return markPrefix + h, filepath.Join(f.dir, lockPrefix+h), &f.locks[sum[0]%byte(len(f.locks))]
}

// Load returns the mark of scope, 0 if it has none, once it is durable
// (see File): it fsyncs the directory first unless it knows the mark to
// be durable, and returns the fsync's error if that fails. A file it
// cannot parse gives an error wrapping ErrCorrupt.
func (f *File) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if err := f.check(ctx, "Load"); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name, _, _ := f.name(scope)
	m, err := f.read(name)
	if err != nil || m == 0 || f.isSynced(name, m) {
		return m, err
	}
	// The fsync follows the read, so it makes durable the rename that
	// put m in place.
	if err := syncDir(f.dir); err != nil {
		return 0, fmt.Errorf("markstore: syncing the mark of %q: %w", scope, err)
	}
	f.setSynced(name, m)
	return m, nil
}

// isSynced reports whether a mark of at least m is known to be durable in
// the file name: marks only rise, so m is then durable or superseded by a
// durable higher one.
func (f *File) isSynced(name string, m fencing.Token) bool {
	f.syncedMu.Lock()
	defer f.syncedMu.Unlock()
	return m <= f.synced[name]
}

// setSynced records that the mark m is durable in the file name,
// forgetting another file's mark if it knows maxSynced already.
func (f *File) setSynced(name string, m fencing.Token) {
	f.syncedMu.Lock()
	defer f.syncedMu.Unlock()
	if m <= f.synced[name] {
		return
	}
	if _, ok := f.synced[name]; !ok && len(f.synced) >= maxSynced {
		for other := range f.synced {
			delete(f.synced, other)
			break
		}
	}
	f.synced[name] = m
}

func (f *File) read(name string) (fencing.Token, error) {
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("markstore: reading %s: %w", name, err)
	}
	t, err := fencing.ParseToken(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		// err (fencing's parse error) is told, not wrapped: it wraps
		// fencing.ErrNoToken, and it is no client's token that is bad.
		return 0, fmt.Errorf("markstore: %s: %w: %v", name, ErrCorrupt, err)
	}
	return t, nil
}

// Raise sets the mark of scope to t if t is above it, durably (see File).
func (f *File) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if err := f.check(ctx, "Raise"); err != nil {
		return err
	}
	_, err := f.RaiseLoad(ctx, scope, t)
	return err
}

// RaiseLoad is Raise, and returns the mark of scope after it (at least t),
// read under the scope's lock (guard.RaiseLoader). A mark at or above t
// that it finds is made durable too (the directory fsynced) before it is
// reported: a raise that failed, or a process killed, after renaming the
// mark into place may have left it unsynced.
func (f *File) RaiseLoad(ctx context.Context, scope string, t fencing.Token) (fencing.Token, error) {
	if err := f.check(ctx, "RaiseLoad"); err != nil {
		return 0, err
	}
	if t <= 0 {
		return 0, fmt.Errorf("markstore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name, lockPath, mu := f.name(scope)
	mu.Lock()
	defer mu.Unlock()
	fl := flock.New(lockPath)
	if _, err := fl.TryLockContext(ctx, lockRetry); err != nil {
		return 0, fmt.Errorf("markstore: locking the mark of %q: %w", scope, err)
	}
	defer fl.Unlock() //nolint:errcheck // closing the lock file unlocks it anyway
	cur, err := f.read(name)
	if err != nil {
		return 0, err // never overwrite a mark it cannot read: it might be higher
	}
	if t <= cur {
		// cur may not be durable yet: a raise that failed to fsync the
		// directory after its rename (or a process killed in between)
		// left it. Reported, it lets a guard accept tokens by it.
		if err := syncDir(f.dir); err != nil {
			return 0, fmt.Errorf("markstore: syncing the mark of %q: %w", scope, err)
		}
		f.setSynced(name, cur)
		return cur, nil
	}
	if err := f.write(name, t); err != nil {
		return 0, err
	}
	f.setSynced(name, t)
	return t, nil
}

func (f *File) write(name string, t fencing.Token) (err error) {
	tmp, err := os.CreateTemp(f.dir, tmpPrefix+name+"-")
	if err != nil {
		return fmt.Errorf("markstore: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			err = fmt.Errorf("markstore: writing %s: %w", name, err)
		}
	}()
	if _, err = tmp.WriteString(t.String() + "\n"); err != nil {
		return err
	}
	if err = fsync(tmp); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), filepath.Join(f.dir, name)); err != nil {
		return err
	}
	return syncDir(f.dir)
}

// syncHook, if set (by this package's tests), is called before each fsync
// of a File store with the path of the file or directory, and an error it
// returns is that of the fsync.
var syncHook func(path string) error

// fsync fsyncs f (see syncHook).
func fsync(f *os.File) error {
	if syncHook != nil {
		if err := syncHook(f.Name()); err != nil {
			return err
		}
	}
	return f.Sync()
}

// syncDir fsyncs the directory dir: the entries it holds (a file created
// or renamed into it) are durable then.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return fsync(d)
}
