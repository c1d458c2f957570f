// Package prereq is how tests say what they need from the machine: a
// program, FUSE, root, network namespaces. Where it is missing the test
// is skipped, except under CI=true, where a missing prerequisite is a
// failure: `make test` installs everything the tests need (TEST_DEBS in
// the Makefile), so a skip there would hide a broken install step.
package prereq

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run under CI=true.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing ends t because a prerequisite is missing: Skip normally, Fatal
// under CI=true. The message says what is missing and why it matters.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
}

// Tool returns the path of the program name, a client or peer no one
// here wrote (fio, nbdkit, nbdinfo, …), or ends t through Missing.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s is not installed; make deps installs it", name)
	}
	return p
}

// FUSE ends t through Missing unless this process can mount FUSE file
// systems: /dev/fuse is there and so is fusermount3 (package fuse3).
func FUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Missing(t, "FUSE mounts need /dev/fuse: %v", err)
	}
	Tool(t, "fusermount3")
}

// Root ends t through Missing unless this process runs as root; why says
// what needs it.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "%s needs root", why)
	}
}
