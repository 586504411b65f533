package embedded

import "testing"

// BenchmarkStart measures how long a single member takes to become ready
// (and, included, to shut down).
func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		s, err := Start(WithUnsafeNoFsync())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkStartCluster measures how long a three-member cluster takes to
// become ready; shutting it down is not timed.
func BenchmarkStartCluster(b *testing.B) {
	for b.Loop() {
		c, err := StartCluster(3, WithUnsafeNoFsync())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
