// Package stack starts, watches and stops the real processes of a turnstile
// stack (the Temporal dev server, environment and policy servers, workers)
// on loopback: the one launcher behind the integration tests, the bench and
// the soak. Every process logs to its own file, is stopped by its PID (never
// by name) and is waited for by polling its readiness, never by sleeping a
// fixed time.
package stack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one process a Launcher started.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // path of the file its stdout and stderr go to
	done chan struct{}
	err  error
}

// PID is the process id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Done is closed once the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process ended; meaningful once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs.
func (p *Proc) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Tail is the last n lines of the process's log.
func (p *Proc) Tail(n int) string {
	data, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPU is the process's user+system CPU time so far, read from /proc (zero
// where there is none: the figure is then absent, not wrong).
func (p *Proc) CPU() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th of them.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clockTicks
}

// Launcher starts processes with their logs under Dir and remembers them
// so they can all be stopped.
type Launcher struct {
	Dir   string
	mu    sync.Mutex
	procs []*Proc
}

// Start starts bin with args and the current environment plus env, in a
// process group of its own (a SIGKILL of the test's group does not reach
// it, and its children are its own), logging to a new file under Dir.
func (l *Launcher) Start(name, bin string, args []string, env ...string) (*Proc, error) {
	logPath := filepath.Join(l.Dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// Procs are the processes started so far, oldest first.
func (l *Launcher) Procs() []*Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Proc(nil), l.procs...)
}

// Live are the processes named name that have not ended.
func (l *Launcher) Live(name string) []*Proc {
	var out []*Proc
	for _, p := range l.Procs() {
		if done, _ := p.Exited(); p.Name == name && !done {
			out = append(out, p)
		}
	}
	return out
}

// StopAll stops every process, newest first (so the dev server, started
// first, goes last), each with grace before a SIGKILL; grace 0 SIGKILLs.
func (l *Launcher) StopAll(grace time.Duration) {
	procs := l.Procs()
	for i := len(procs) - 1; i >= 0; i-- {
		if grace == 0 {
			procs[i].Kill()
		} else {
			procs[i].Stop(grace)
		}
	}
}
