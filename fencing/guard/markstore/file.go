package markstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ahrtr/disco/fencing"
)

// ErrInvalidArgument is wrapped by the errors of constructors given bad
// input.
var ErrInvalidArgument = errors.New("markstore: invalid argument")

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
// One File (one process) per directory: Raise orders the raises of a scope
// within the process; two processes raising one scope in one directory
// could lower its mark.
type File struct {
	dir   string
	locks [64]sync.Mutex // striped by scope: raises of one scope are serial
}

const tmpPrefix = "tmp-"

// NewFile returns a File store in dir, creating the directory if needed and
// removing temporary files a killed process left behind.
func NewFile(dir string) (*File, error) {
	if dir == "" {
		return nil, fmt.Errorf("markstore: NewFile: empty directory: %w", ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("markstore: NewFile: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("markstore: NewFile: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return &File{dir: dir}, nil
}

func (f *File) name(scope string) (string, *sync.Mutex) {
	sum := sha256.Sum256([]byte(scope))
	return "mark-" + hex.EncodeToString(sum[:]), &f.locks[sum[0]%byte(len(f.locks))]
}

// Load returns the mark of scope, 0 if it has none. A file it cannot parse
// gives an error wrapping ErrCorrupt.
func (f *File) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name, _ := f.name(scope)
	return f.read(name)
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
		return 0, fmt.Errorf("markstore: %s: %w: %w", name, ErrCorrupt, err)
	}
	return t, nil
}

// Raise sets the mark of scope to t if t is above it, durably (see File).
func (f *File) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if t <= 0 {
		return fmt.Errorf("markstore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name, mu := f.name(scope)
	mu.Lock()
	defer mu.Unlock()
	cur, err := f.read(name)
	if err != nil {
		return err // never overwrite a mark it cannot read: it might be higher
	}
	if t <= cur {
		return nil
	}
	return f.write(name, t)
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
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), filepath.Join(f.dir, name)); err != nil {
		return err
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
