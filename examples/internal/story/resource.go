package story

import (
	"context"
	"sync"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// Resource is an in-memory value protected by a fencing guard: every read
// and write must carry a token that is not below the highest seen so far.
type Resource struct {
	Guard *guard.Guard
	mu    sync.Mutex
	value string
}

// NewResource returns a Resource holding value behind a fresh guard.
func NewResource(value string) *Resource { return &Resource{Guard: guard.New(), value: value} }

// Write stores v if the guard admits t.
func (r *Resource) Write(ctx context.Context, t fencing.Token, v string) error {
	_, done, err := r.Guard.Admit(ctx, t)
	if err != nil {
		return err
	}
	defer done()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.value = v
	return nil
}

// Read returns the value if the guard admits t.
func (r *Resource) Read(ctx context.Context, t fencing.Token) (string, error) {
	_, done, err := r.Guard.Admit(ctx, t)
	if err != nil {
		return "", err
	}
	defer done()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, nil
}
