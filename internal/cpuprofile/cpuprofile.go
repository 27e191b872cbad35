// Package cpuprofile writes a CPU profile of the running process, for
// the worker's TURNSTILE_CPU_PROFILE and the bench's -cpuprofile.
package cpuprofile

import (
	"os"
	"runtime/pprof"
)

// Start profiles the process into path until the returned stop is
// called; an empty path profiles nothing.
func Start(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
