// Package profenv starts the profiles a capsule command was asked for in
// its environment, for `go tool pprof` and `go tool trace`:
//
//	CAPSULE_CPUPROFILE=FILE  a CPU profile of the whole run (runtime/pprof)
//	CAPSULE_TRACE=FILE       an execution trace of the whole run
//	                         (runtime/trace): where goroutines wait to run,
//	                         block and make system calls
//
// A file that cannot be created is skipped: profiling never stops a
// command from running.
package profenv

import (
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Start starts what the environment asks for and returns the function
// that stops it and writes the files out, to be called before the
// command exits.
func Start() (stop func()) {
	var stops []func()
	if path := os.Getenv("CAPSULE_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
			} else {
				f.Close()
			}
		}
	}
	if path := os.Getenv("CAPSULE_TRACE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if trace.Start(f) == nil {
				stops = append(stops, func() { trace.Stop(); f.Close() })
			} else {
				f.Close()
			}
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
