package fencetest

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unknown (what a handler's plain error becomes) and Internal (a failed
// response, a broken stream, a recovered panic) say nothing of whether the
// write was applied, as HTTP 500 does not: the kit must allow both. The
// guard's own refusals, before its handler runs, are definite; Unavailable
// stays open, as a transport may answer it for a call that reached the
// resource.
func TestGRPCErrorsLeaveOutcomeOpen(t *testing.T) {
	for code, want := range map[codes.Code]outcome{
		codes.Unknown:            unknown,
		codes.Internal:           unknown,
		codes.Unavailable:        unknown,
		codes.Canceled:           unknown,
		codes.DeadlineExceeded:   unknown,
		codes.FailedPrecondition: stale,
		codes.PermissionDenied:   refused,
		codes.InvalidArgument:    refused,
		codes.ResourceExhausted:  refused,
	} {
		if got := outcomeOf(grpcRefusal(status.Error(code, "message"))); got != want {
			t.Errorf("gRPC %v: outcome %d, want %d", code, got, want)
		}
	}
	if got := outcomeOf(grpcRefusal(errors.New("not a status"))); got != unknown {
		t.Errorf("a non-status error: outcome %d, want %d", got, unknown)
	}
}

// The verdict that depends on it: a correct resource applies a write, then
// its handler fails (an audit log it writes after the data is down) and the
// call ends with codes.Unknown; a read then sees the write. ManyOwners' model
// must find that history linearizable, as it does for an HTTP 500.
func TestWriteFailedAfterApplyingIsNoViolation(t *testing.T) {
	for name, err := range map[string]error{
		"gRPC Unknown":  grpcRefusal(status.Error(codes.Unknown, "audit log: connection refused")),
		"gRPC Internal": grpcRefusal(status.Error(codes.Internal, "grpc: error while marshaling")),
		"HTTP 500":      httpRefusal(500, "audit log: connection refused"),
	} {
		w := op{owner: 0, write: true, token: 1, value: "owner 0 (token 1)", out: outcomeOf(err), err: err, call: 1, ret: 2}
		if w.out == unknown {
			w.ret = math.MaxInt64 // as manyOwners records an open outcome
		}
		r := op{owner: 1, token: 1, value: "owner 0 (token 1)", out: applied, call: 3, ret: 4}
		var history []porcupine.Operation
		for _, o := range []op{w, r} {
			in := o
			in.value = ""
			history = append(history, porcupine.Operation{ClientId: o.owner, Input: in, Call: o.call, Output: o, Return: o.ret})
		}
		if res, _ := porcupine.CheckOperationsVerbose(fencedRegister(false), history, 10*time.Second); res != porcupine.Ok {
			t.Errorf("%s: a write applied before its handler failed, then read back: the model says %v, want ok (%v)", name, res, w)
		}
	}
}
