package fencetest_test

import "testing"

// TestExampleHandler runs the test that Example_handler shows, so that the
// example is seen to pass.
func TestExampleHandler(t *testing.T) { testOrdersFence(t) }
