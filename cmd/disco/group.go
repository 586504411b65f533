//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CMD runs in a process group of its own, and nothing of that group may
// outlive the hold: disco kills the group before it releases the hold, and
// a watcher process kills it should disco die without doing so (even of
// SIGKILL, which a death signal would pass on to CMD alone).
//
// Both helpers are disco re-executed (/proc/self/exe) with envRole set:
//
//   - the watcher ("watch") reads CMD's process group from a pipe whose
//     write end only disco holds, then waits for "done" on it. End of file
//     instead means that disco died: it kills the group with SIGKILL.
//   - the gate ("exec") starts as the leader of CMD's new process group and
//     waits for a byte on a pipe before it executes CMD in its place, so that
//     CMD runs only once the watcher knows its group. If executing fails, it
//     writes why on a second pipe (closed on a successful exec) and exits
//     126 or 127.
const envRole = "DISCO_INTERNAL_ROLE"

const (
	roleWatch = "watch"
	roleExec  = "exec"
)

// self is disco's own binary, also when the file was replaced since it
// started.
const self = "/proc/self/exe"

// groupKillBound bounds the wait for the processes of CMD's group to end
// after SIGKILL (a process in uninterruptible sleep ends only when its
// system call does).
const groupKillBound = 5 * time.Second

// runRole runs the helper role and returns its exit status.
func runRole(role string) int {
	switch role {
	case roleWatch:
		return watchGroup()
	case roleExec:
		return execCommand()
	}
	fmt.Fprintf(os.Stderr, "disco: %s=%q: not a role of disco's\n", envRole, role)
	return exitUsage
}

// group is CMD, running in a process group of its own that a watcher
// process guards.
type group struct {
	cmd     *exec.Cmd // CMD (first the gate, which became CMD)
	pgid    int       // CMD's pid and its process group's id
	watcher *exec.Cmd
	tell    *os.File // the watcher's pipe: only disco holds this end
}

// startGroup starts the watcher, then CMD (argv, resolved as exec.Command
// does) in a new process group with env, and returns once CMD runs. Its
// errors are exitErrors: 127 if CMD was not found, 126 if it could not be
// executed, 1 if the watcher could not start.
func startGroup(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*group, error) {
	resolved := exec.Command(argv[0], argv[1:]...)
	if resolved.Err != nil {
		return nil, execError(resolved.Err)
	}
	g := &group{}
	if err := g.startWatcher(); err != nil {
		return nil, &exitError{code: exitFailure, err: fmt.Errorf("starting the watcher of CMD's process group: %w", err)}
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		g.release()
		return nil, &exitError{code: exitFailure, err: err}
	}
	defer goW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		goR.Close()
		g.release()
		return nil, &exitError{code: exitFailure, err: err}
	}
	defer statusR.Close()
	gate := exec.Command(self)
	gate.Args = append([]string{"disco-exec", resolved.Path}, argv...)
	gate.Env = append(env, envRole+"="+roleExec)
	gate.Stdin, gate.Stdout, gate.Stderr = stdin, stdout, stderr
	gate.ExtraFiles = []*os.File{goR, statusW} // fds 3 and 4
	// Pdeathsig: should disco die before the gate executes CMD.
	gate.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = gate.Start()
	goR.Close()
	statusW.Close()
	if err != nil {
		g.release()
		return nil, execError(err)
	}
	g.cmd, g.pgid = gate, gate.Process.Pid
	if _, err := fmt.Fprintf(g.tell, "%d\n", g.pgid); err != nil {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		_ = gate.Wait()
		g.release()
		return nil, &exitError{code: exitFailure, err: fmt.Errorf("telling the watcher CMD's process group: %w", err)}
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		_ = gate.Wait()
		g.release()
		return nil, &exitError{code: exitFailure, err: fmt.Errorf("starting CMD: %w", err)}
	}
	why, _ := io.ReadAll(statusR) // end of file at a successful exec
	if len(why) > 0 {
		err := gate.Wait()
		g.release()
		code := exitNoExec
		var xe *exec.ExitError
		if errors.As(err, &xe) && xe.ExitCode() == exitNotFound {
			code = exitNotFound
		}
		return nil, &exitError{code: code, err: errors.New(string(why))}
	}
	return g, nil
}

// execError is the exit error for CMD that could not be started.
func execError(err error) error {
	code := exitNoExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = exitNotFound
	}
	return &exitError{code: code, err: err}
}

// startWatcher starts the watcher process, in a process group of its own
// (so that no signal to CMD's group or the terminal's reaches it).
func (g *group) startWatcher() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	wt := exec.Command(self)
	wt.Args = []string{"disco-watcher"}
	wt.Env = []string{envRole + "=" + roleWatch}
	wt.ExtraFiles = []*os.File{r} // fd 3
	wt.Dir = "/"
	wt.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wt.Start(); err != nil {
		w.Close()
		return err
	}
	g.watcher, g.tell = wt, w
	return nil
}

// release tells the watcher to exit without killing anything, and reaps it.
func (g *group) release() {
	_, _ = io.WriteString(g.tell, "done\n")
	g.tell.Close()
	_ = g.watcher.Wait()
}

// signal sends sig to every process of CMD's group.
func (g *group) signal(sig syscall.Signal) { _ = syscall.Kill(-g.pgid, sig) }

// stop kills whatever is left of CMD's process group, waits until none of
// its processes runs (or says on w which still do after groupKillBound),
// and then lets the watcher go.
func (g *group) stop(w io.Writer) {
	g.signal(syscall.SIGKILL)
	deadline := time.Now().Add(groupKillBound)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		live := groupLive(g.pgid)
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(w, "disco: processes %v of CMD's process group %d still run %v after SIGKILL\n", live, g.pgid, groupKillBound)
			break
		}
		<-tick.C
	}
	g.release()
}

// groupLive returns the pids of the processes of group pgid that have not
// ended (zombies have), from /proc.
func groupLive(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pgid)
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it ended
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 3 || f[2] != want || f[0] == "Z" || f[0] == "X" {
			continue
		}
		live = append(live, pid)
	}
	return live
}

// watchGroup is the watcher: it kills CMD's process group if disco dies
// before it says "done".
func watchGroup() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	r := bufio.NewReader(os.NewFile(3, "disco"))
	line, err := r.ReadString('\n')
	pgid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil || pgid <= 0 {
		// CMD never ran: the gate waits for disco's word, and dies with
		// disco (its death signal).
		return 0
	}
	if line, _ := r.ReadString('\n'); line == "done\n" {
		return 0
	}
	// End of file: disco died.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return 0
}

// execCommand is the gate: once disco says so, it executes CMD in its
// place, in the process group it leads. os.Args holds the path of CMD,
// then CMD's argv.
func execCommand() int {
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	status := os.NewFile(4, "status")
	var b [1]byte
	if n, _ := os.NewFile(3, "go").Read(b[:]); n != 1 {
		return exitFailure // disco ended first
	}
	if len(os.Args) < 3 {
		fmt.Fprintf(status, "disco-exec: no command in %q", os.Args)
		return exitNoExec
	}
	env := withoutVar(os.Environ(), envRole+"=")
	err := syscall.Exec(os.Args[1], os.Args[2:], env)
	fmt.Fprintf(status, "exec %s: %v", os.Args[1], err)
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitNoExec
}

// withoutVar returns env without the variables that start with prefix.
func withoutVar(env []string, prefix string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
