package trainer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Bounds of a dataset.
const (
	// MaxRowIDLen bounds a row id: it is part of every rollout id and
	// workflow ID of its group.
	MaxRowIDLen = 64
	// MaxRepeats bounds the repeats of one row (a GRPO group size).
	MaxRepeats = rollout.MaxGroupSize
	// maxRowBytes bounds one JSONL line, so a file without newlines cannot
	// be read into memory whole.
	maxRowBytes = 16 << 20
	// maxReportedErrors bounds the errors one read reports: enough to see
	// every kind of mistake, not a wall of text for a file in a wrong format.
	maxReportedErrors = 100
)

// DatasetRow is one row of a dataset: a task of an environment, rolled out
// Repeats times as one group. Only Env and Task are required.
type DatasetRow struct {
	// ID names the row (the group id of its rollouts); empty means
	// "row<line>". Same charset as a set name.
	ID   string          `json:"id,omitempty"`
	Env  string          `json:"env"`
	Task json.RawMessage `json:"task"`
	// Seed, when set, is the seed of repeat 0; repeat r runs with Seed+r so
	// the repeats of a group differ. Unset, seeds derive from (set, row id,
	// repeat) (DatasetSeed).
	Seed *int64 `json:"seed,omitempty"`
	// Policy overrides the request's policy; an empty model or base URL
	// falls back to the request's.
	Policy   *rollout.PolicyRef `json:"policy,omitempty"`
	Sampling *rollout.Sampling  `json:"sampling,omitempty"`
	// MaxTurns overrides the request's limit; 0 keeps it.
	MaxTurns int `json:"max_turns,omitempty"`
	// Line is the row's line in its file, for messages (ReadDataset sets
	// it); rows built in code leave it 0 and are numbered by position.
	Line int `json:"-"`
}

// RowError is what is wrong with one row.
type RowError struct {
	Line int
	Err  error
}

func (e RowError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e RowError) Unwrap() error { return e.Err }

// Summary is the row's problem in general terms, by line number and field
// name, never quoting the row: what a reader of a file it did not write
// may be told.
func (e RowError) Summary() string {
	var p *rowProblem
	if errors.As(e.Err, &p) {
		return fmt.Sprintf("line %d: %s", e.Line, p.summary)
	}
	return fmt.Sprintf("line %d: not a valid row", e.Line)
}

// rowProblem is a row error with its summary (RowError.Summary).
type rowProblem struct {
	summary string
	err     error
}

func (p *rowProblem) Error() string { return p.err.Error() }

func (p *rowProblem) Unwrap() error { return p.err }

// problem is err with its summary.
func problem(summary string, err error) error { return &rowProblem{summary: summary, err: err} }

// DatasetError lists every bad row of a dataset, so a user fixes a file in
// one pass instead of one error per submit.
type DatasetError struct {
	Rows []RowError
	// More counts errors beyond those listed.
	More int
}

func (e *DatasetError) Error() string { return e.text(RowError.Error) }

// Summary is the error in general terms: each bad row by its line number
// and what was wrong (RowError.Summary), quoting none of them.
func (e *DatasetError) Summary() string { return e.text(RowError.Summary) }

func (e *DatasetError) text(line func(RowError) string) string {
	var b strings.Builder
	n, rows := len(e.Rows)+e.More, "rows"
	if n == 1 {
		rows = "row"
	}
	fmt.Fprintf(&b, "dataset has %d bad %s; nothing was started:", n, rows)
	for _, r := range e.Rows {
		b.WriteString("\n  ")
		b.WriteString(line(r))
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  … and %d more", e.More)
	}
	return b.String()
}

// add records one bad row.
func (e *DatasetError) add(line int, err error) {
	if len(e.Rows) >= maxReportedErrors {
		e.More++
		return
	}
	e.Rows = append(e.Rows, RowError{Line: line, Err: err})
}

func (e *DatasetError) orNil() error {
	if len(e.Rows) == 0 {
		return nil
	}
	return e
}

// ReadDataset reads a JSONL dataset (one DatasetRow per line; blank lines
// are skipped) and checks every row (CheckRows). All bad rows, unreadable
// ones included, come back at once in a *DatasetError with their line
// numbers; the rows read are returned either way.
func ReadDataset(r io.Reader) ([]DatasetRow, error) {
	br := bufio.NewReader(r)
	var rows []DatasetRow
	bad := &DatasetError{}
	for line := 1; ; line++ {
		text, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return rows, fmt.Errorf("read dataset line %d: %w", line, err)
		}
		if len(bytes.TrimSpace(text)) > 0 {
			row, derr := decodeRow(text)
			if derr != nil {
				bad.add(line, derr)
			} else {
				row.Line = line
				rows = append(rows, row)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(rows) == 0 && len(bad.Rows) == 0 {
		return nil, errors.New("dataset has no rows")
	}
	for _, e := range CheckRows(rows) {
		bad.add(e.Line, e.Err)
	}
	sortRowErrors(bad.Rows)
	return rows, bad.orNil()
}

// readLine reads one line without its newline; io.EOF comes with the last
// line (possibly empty).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		line = append(line, chunk...)
		if len(line) > maxRowBytes {
			return nil, fmt.Errorf("line longer than %d bytes", maxRowBytes)
		}
		if err != nil || !isPrefix {
			return line, err
		}
	}
}

// decodeRow decodes one line strictly: an unknown field is a typo (say
// "sampeling") that would otherwise be silently dropped.
func decodeRow(text []byte) (DatasetRow, error) {
	var row DatasetRow
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&row); err != nil {
		return row, problem(jsonSummary(err), fmt.Errorf("bad JSON: %w", err))
	}
	if dec.More() {
		return row, problem("holds more than one JSON value", errors.New("bad JSON: more than one value on the line"))
	}
	return row, nil
}

// rowFields are the fields of a row, the only names a summary repeats.
var rowFields = []string{"id", "env", "task", "seed", "policy", "sampling", "max_turns"}

// jsonSummary is a decode error in general terms.
func jsonSummary(err error) string {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return "is not valid JSON"
	case errors.As(err, &typeErr):
		field, _, _ := strings.Cut(typeErr.Field, ".")
		if slices.Contains(rowFields, field) {
			return "field " + field + " has the wrong JSON type"
		}
		return "is not a JSON object of the row format"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "has a field the row format does not know"
	}
	return "is not a valid row"
}

// sortRowErrors orders errors by line (stable, so one row's errors keep
// their order): parse errors and row checks are collected in two passes.
func sortRowErrors(errs []RowError) {
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && errs[j].Line < errs[j-1].Line; j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}

// rowLine is the line a row is reported under.
func rowLine(row DatasetRow, i int) int {
	if row.Line > 0 {
		return row.Line
	}
	return i + 1
}

// RowID is the id of row i of a dataset: its own, else "row<line>".
func RowID(row DatasetRow, i int) string {
	if row.ID != "" {
		return row.ID
	}
	return "row" + strconv.Itoa(rowLine(row, i))
}

// DatasetRolloutID is the rollout id of repeat of row rowID of set:
// "<set>-<rowid>-r<repeat>". The same (set, row, repeat) always names the
// same rollout, so submitting a dataset twice is refused as a duplicate
// instead of running it twice.
func DatasetRolloutID(set, rowID string, repeat int) string {
	return rollout.GroupRolloutID(set, rowID, repeat)
}

// DatasetSeed is the seed of repeat of row rowID of set when the row sets
// none: a SHA-256 of the three, cut to 53 bits so it survives JSON readers
// that hold numbers as doubles (JavaScript, the Web UI).
func DatasetSeed(set, rowID string, repeat int) int64 {
	sum := sha256.Sum256([]byte(set + "\x00" + rowID + "\x00" + strconv.Itoa(repeat)))
	return int64(binary.BigEndian.Uint64(sum[:8]) & (1<<53 - 1))
}

// rowSeed is the seed of repeat of row.
func rowSeed(set string, row DatasetRow, rowID string, repeat int) int64 {
	if row.Seed != nil {
		return *row.Seed + int64(repeat)
	}
	return DatasetSeed(set, rowID, repeat)
}
