package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPerfTwoProcesses runs `target perf serve` in one process and
// `target perf run` in others, over iwarp and shm, for every operation.
func TestPerfTwoProcesses(t *testing.T) {
	shm := fmt.Sprintf("shm://perf-it-%d", os.Getpid())
	d := startDaemon(t, "capsule perf ready", "perf", "serve", "--listen", "iwarp://127.0.0.1:0", "--listen", shm)
	listeners := strings.Split(field(d.ready, "listeners"), ",")
	require.Len(t, listeners, 2, d.ready)
	require.True(t, strings.HasPrefix(listeners[0], "iwarp://127.0.0.1:"), d.ready)
	require.NotEqual(t, "iwarp://127.0.0.1:0", listeners[0], "the ready line names the real port")
	require.Equal(t, shm, listeners[1])

	for _, url := range listeners {
		for _, op := range []string{"write", "read", "send"} {
			t.Run(strings.SplitN(url, ":", 2)[0]+"/"+op, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				out := runTarget(ctx, t, "perf", "run", "--connect", url, "--op", op,
					"--size", "64KiB", "--qd", "4", "--duration", "300ms", "--warmup", "50ms")
				assert.Equal(t, op, field(out, "op"), out)
				ops, err := strconv.Atoi(field(out, "ops"))
				require.NoError(t, err, out)
				assert.Positive(t, ops, out)
				assert.NotEmpty(t, field(out, "p99"), out)
			})
		}
	}
	d.stop(t)
}
