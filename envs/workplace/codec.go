package workplace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the version of the exported state. Restore refuses any
// other: an old binary must not guess at a newer layout.
const SchemaVersion = 1

// exported is the layout of Session.Export.
type exported struct {
	SchemaVersion int      `json:"schema_version"`
	Task          Task     `json:"task"`
	Counters      Counters `json:"counters"`
	Tables        Tables   `json:"tables"`
}

// wire mirrors exported with the nested objects left raw, so each level is
// checked strictly (exact key set, no nulls) before it is typed.
type wire struct {
	SchemaVersion int             `json:"schema_version"`
	Task          json.RawMessage `json:"task"`
	Counters      json.RawMessage `json:"counters"`
	Tables        json.RawMessage `json:"tables"`
}

type wireTables struct {
	Emails    []json.RawMessage `json:"emails"`
	Events    []json.RawMessage `json:"events"`
	Customers []json.RawMessage `json:"customers"`
	Analytics []json.RawMessage `json:"analytics"`
	Tasks     []json.RawMessage `json:"tasks"`
}

// encodeState renders the exported state; equal sessions give equal bytes.
func encodeState(t Task, w world) (json.RawMessage, error) {
	b, err := json.Marshal(exported{SchemaVersion: SchemaVersion, Task: t, Counters: w.Counters, Tables: w.Tables})
	if err != nil {
		return nil, fmt.Errorf("encode workplace state: %w", err)
	}
	return b, nil
}

// decodeState parses and validates exported state. The caller installs the
// result only when the error is nil.
func decodeState(raw json.RawMessage) (Task, world, error) {
	var top wire
	if err := decodeObject(raw, "state", &top); err != nil {
		return Task{}, world{}, err
	}
	if top.SchemaVersion != SchemaVersion {
		return Task{}, world{}, fmt.Errorf("state: unknown schema_version %d (this build reads %d)", top.SchemaVersion, SchemaVersion)
	}
	t, err := ParseTask(top.Task)
	if err != nil {
		return Task{}, world{}, fmt.Errorf("state: %w", err)
	}
	var w world
	if err := decodeObject(top.Counters, "counters", &w.Counters); err != nil {
		return Task{}, world{}, err
	}
	var wt wireTables
	if err := decodeObject(top.Tables, "tables", &wt); err != nil {
		return Task{}, world{}, err
	}
	if w.Tables.Emails, err = decodeRows[Email](wt.Emails, TableEmails, w.Counters.Emails, validEmail); err != nil {
		return Task{}, world{}, err
	}
	if w.Tables.Events, err = decodeRows[Event](wt.Events, TableEvents, w.Counters.Events, validEvent); err != nil {
		return Task{}, world{}, err
	}
	if w.Tables.Customers, err = decodeRows[Customer](wt.Customers, TableCustomers, w.Counters.Customers, validCustomer); err != nil {
		return Task{}, world{}, err
	}
	if w.Tables.Analytics, err = decodeRows[Metrics](wt.Analytics, TableAnalytics, w.Counters.Analytics, validMetrics); err != nil {
		return Task{}, world{}, err
	}
	if w.Tables.Tasks, err = decodeRows[ProjectTask](wt.Tasks, TableTasks, w.Counters.Tasks, validTask); err != nil {
		return Task{}, world{}, err
	}
	if err := validCustomerEmails(w.Tables.Customers); err != nil {
		return Task{}, world{}, err
	}
	return t, w, nil
}

// decodeObject decodes one JSON object into v (a pointer to a struct) and
// refuses unknown keys, missing keys, null values, case-folded key matches
// and trailing data.
func decodeObject(raw json.RawMessage, what string, v any) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return fmt.Errorf("%s: not a JSON object", what)
	}
	want := jsonFields(reflect.TypeOf(v).Elem())
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(want, k) {
			return fmt.Errorf("%s: unknown field %q", what, k)
		}
		if bytes.Equal(bytes.TrimSpace(fields[k]), []byte("null")) {
			return fmt.Errorf("%s: field %q is null", what, k)
		}
	}
	for _, k := range want {
		if _, ok := fields[k]; !ok {
			return fmt.Errorf("%s: missing field %q", what, k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// decodeRows decodes one table: every row strictly, ids well-formed,
// ascending (so unique) and below the table's counter.
func decodeRows[T any](raws []json.RawMessage, table string, counter int64, valid func(T) error) ([]T, error) {
	rows := make([]T, 0, len(raws))
	seen := map[string]bool{}
	var last int64 = -1
	for i, raw := range raws {
		what := fmt.Sprintf("%s[%d]", table, i)
		var row T
		if err := decodeObject(raw, what, &row); err != nil {
			return nil, err
		}
		id := reflect.ValueOf(row).FieldByName("ID").String()
		n, ok := parseID(id)
		if !ok {
			return nil, fmt.Errorf("%s: id %q is not 8 digits", what, id)
		}
		if seen[id] {
			return nil, fmt.Errorf("%s: duplicate id %s", what, id)
		}
		seen[id] = true
		if n <= last {
			return nil, fmt.Errorf("%s: id %s out of order (rows must ascend by id)", what, id)
		}
		last = n
		if n >= counter {
			return nil, fmt.Errorf("%s: id %s is not below the table's counter %d", what, id, counter)
		}
		if err := valid(row); err != nil {
			return nil, fmt.Errorf("%s (id %s): %w", what, id, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func need(field, value string) error {
	if value == "" {
		return fmt.Errorf("%s is empty", field)
	}
	return nil
}

func oneOf(field, value string, allowed []string) error {
	if !contains(allowed, value) {
		return fmt.Errorf("%s %q is not one of %s", field, value, strings.Join(allowed, ", "))
	}
	return nil
}

func layout(field, value, l string) error {
	if _, err := time.Parse(l, value); err != nil {
		return fmt.Errorf("%s %q does not match %s", field, value, l)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func validEmail(e Email) error {
	return firstErr(oneOf("folder", e.Folder, folders), need("from", e.From), need("to", e.To),
		layout("time", e.Time, timeLayout), idOrEmpty("in_reply_to", e.InReplyTo))
}

func idOrEmpty(field, id string) error {
	if id == "" {
		return nil
	}
	if _, ok := parseID(id); !ok {
		return fmt.Errorf("%s %q is not 8 digits", field, id)
	}
	return nil
}

func validEvent(e Event) error {
	if err := firstErr(need("title", e.Title), layout("date", e.Date, dateLayout),
		layout("start", e.Start, clockLayout), layout("end", e.End, clockLayout)); err != nil {
		return err
	}
	if e.End <= e.Start {
		return fmt.Errorf("end %s is not after start %s", e.End, e.Start)
	}
	return nil
}

func validCustomer(c Customer) error {
	if c.Value < 0 {
		return fmt.Errorf("value %d is negative", c.Value)
	}
	return firstErr(need("name", c.Name), need("company", c.Company), need("email", c.Email),
		need("owner", c.Owner), oneOf("status", c.Status, customerStatuses))
}

func validMetrics(m Metrics) error {
	if m.Visits < 0 || m.Signups < 0 || m.Revenue < 0 {
		return fmt.Errorf("negative metric")
	}
	return layout("date", m.Date, dateLayout)
}

func validTask(t ProjectTask) error {
	return firstErr(need("title", t.Title), need("assignee", t.Assignee), layout("due", t.Due, dateLayout),
		oneOf("status", t.Status, taskStatuses), oneOf("priority", t.Priority, priorities))
}

func validCustomerEmails(cs []Customer) error {
	seen := map[string]string{}
	for _, c := range cs {
		k := strings.ToLower(c.Email)
		if other, ok := seen[k]; ok {
			return fmt.Errorf("customers: %s and %s share email %s", other, c.ID, c.Email)
		}
		seen[k] = c.ID
	}
	return nil
}
