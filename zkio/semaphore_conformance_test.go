package zkio_test

import (
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// TestSemaphoreConformance runs the suite's semaphore section against
// zkio, each owner on a session of its own.
func TestSemaphoreConformance(t *testing.T) {
	servers := startZooKeeper(t)
	testkit.NoLeaks(t)
	base, register := zkBackendOwners(t, servers)
	conformance.TestSemaphore(t, conformance.SemaphoreBackend{
		Backend: base,
		NewSemaphore: func(t *testing.T, name string, n int) (semaphore.Service, error) {
			t.Helper()
			var sem semaphore.Service
			var err error
			register(t, name, func(s *zkio.Session) any {
				sem, err = zkio.NewSemaphore(nil, "/conformance/"+name, n, zkio.WithSession(s))
				if err != nil {
					return new(int) // registers nothing a hook is given
				}
				t.Cleanup(func() { sem.Close() })
				return sem
			})
			return sem, err
		},
	})
}
