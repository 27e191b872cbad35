package trainer

import (
	"fmt"
	"io"
	"sync"
)

// LogProgress prints "closed k/N rollouts" each time another tenth of the
// set has closed, so a log shows progress without a line per rollout.
type LogProgress struct {
	w      io.Writer
	total  int
	mu     sync.Mutex
	closed int
}

// NewLogProgress is a Progress for logs and pipes: a line each time
// another tenth of total rollouts has closed.
func NewLogProgress(w io.Writer, total int) *LogProgress { return &LogProgress{w: w, total: total} }

// lineSteps is how many lines a full LogProgress prints.
const lineSteps = 10

// Increment counts one more closed rollout.
func (l *LogProgress) Increment() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed++
	if l.closed*lineSteps/l.total != (l.closed-1)*lineSteps/l.total {
		fmt.Fprintf(l.w, "closed %d/%d rollouts\n", l.closed, l.total)
	}
}

// Finish prints nothing more: the last tenth already said "N/N".
func (l *LogProgress) Finish(bool) {}
