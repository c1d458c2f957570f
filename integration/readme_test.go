package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeAddress is the target address the README's programs dial: where
// `make run` serves.
const readmeAddress = "iwarp://127.0.0.1:4420"

// readmeGoBlocks returns the ```go blocks of README.md, in order.
func readmeGoBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		switch trimmed := strings.TrimSpace(line); {
		case cur == nil && trimmed == "```go":
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	require.Nil(t, cur, "README.md: a ```go block is not closed")
	return blocks
}

// buildSnippet builds src, a complete main package, as a package of this
// module (through a build overlay, so nothing is written to the source
// tree), and returns the binary.
func buildSnippet(t *testing.T, i int, src string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(file, []byte(src), 0o644))
	virtual := filepath.Join(root, "integration", fmt.Sprintf("readme-snippet-%d", i), "main.go")
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{virtual: file}})
	require.NoError(t, err)
	ov := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(ov, overlay, 0o644))
	bin := filepath.Join(dir, "snippet")
	cmd := exec.Command("go", "build", "-overlay", ov, "-o", bin, "./"+filepath.ToSlash(filepath.Join("integration", filepath.Base(filepath.Dir(virtual)))))
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "README.md Go block %d does not build:\n%s\n%s", i, out, src)
	return bin
}

// TestReadmeGoSnippets builds every ```go block of README.md as the
// program it is and runs it against `target serve` with the flags `make
// run` uses, on a fresh store, as a new user would after `make run`. The
// one change made to a program is the port: it dials the test's target
// instead of 127.0.0.1:4420, which the test cannot count on having to
// itself. Each program runs twice, as a user runs an example again.
func TestReadmeGoSnippets(t *testing.T) {
	blocks := readmeGoBlocks(t)
	require.Len(t, blocks, 2, "README.md's Go programs: the host library's and the file client's; a new one needs its expected output here")
	want := []string{
		"hello, capsule: namespace 1, 67108864 bytes\n",
		"hello\n",
	}

	data := t.TempDir()
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0", "--data", data,
		"--namespace", "ec:vol0:64MiB", "--scrub-rate", "0")
	var url string
	for _, l := range strings.Split(field(d.ready, "listeners"), ",") {
		if strings.HasPrefix(l, "iwarp://") {
			url = l
		}
	}
	require.NotEmpty(t, url, d.ready)

	for i, src := range blocks {
		t.Run(fmt.Sprintf("block%d", i+1), func(t *testing.T) {
			require.Contains(t, src, readmeAddress, "the program dials where `make run` serves")
			formatted, err := format.Source([]byte(src))
			require.NoError(t, err)
			require.Equal(t, string(formatted), src, "README.md Go block %d is not gofmt-formatted", i+1)
			bin := buildSnippet(t, i+1, strings.ReplaceAll(src, readmeAddress, url))
			for run := range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, bin)
				cmd.Dir = t.TempDir()
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				cancel()
				require.NoError(t, err, "run %d:\nstdout:\n%s\nstderr:\n%s", run+1, out, stderr.String())
				assert.Equal(t, want[i], string(out), "run %d; stderr:\n%s", run+1, stderr.String())
			}
		})
	}
}
