package workplace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// snapshot is the exported state, typed for assertions.
type snapshot struct {
	SchemaVersion int                `json:"schema_version"`
	Task          workplace.Task     `json:"task"`
	Counters      workplace.Counters `json:"counters"`
	Tables        workplace.Tables   `json:"tables"`
}

func export(t *testing.T, s envs.Session) (json.RawMessage, snapshot) {
	t.Helper()
	raw, err := s.Export()
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	var snap snapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		t.Fatalf("decode export: %v", err)
	}
	return raw, snap
}

func fixture(t *testing.T) envs.Session {
	t.Helper()
	s, _, err := workplace.New().Start(0, workplace.GenerateTask(7, 0))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSpec(t *testing.T) {
	spec := workplace.New().Spec()
	if spec.Name != "workplace" || spec.Mode != envs.ModeExportRestore || spec.Style != envs.StyleTools {
		t.Fatalf("spec header %+v", spec)
	}
	if len(spec.Tools) < 20 {
		t.Fatalf("%d tools, want 20+", len(spec.Tools))
	}
	names := map[string]bool{}
	for _, tool := range spec.Tools {
		if names[tool.Name] {
			t.Fatalf("duplicate tool %s", tool.Name)
		}
		names[tool.Name] = true
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema.Type != "object" || tool.Description == "" {
			t.Fatalf("tool %s: schema %s (%v)", tool.Name, tool.Parameters, err)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Fatalf("tool %s requires undeclared %s", tool.Name, r)
			}
		}
	}
	for _, want := range []string{"get_current_date", "email_search", "email_reply", "calendar_update_event", "customer_update", "analytics_query", "task_complete"} {
		if !names[want] {
			t.Fatalf("missing tool %s", want)
		}
	}
}

// TestToolRules drives each tool once on a fresh fixture. Successful
// mutations must change the state; reads and refusals must not.
func TestToolRules(t *testing.T) {
	type obs = map[string]any
	cases := []struct {
		name, tool, args string
		code             string // expected error code; "" for success
		errNames         string // the refusal must mention this
		check            func(t *testing.T, before, after snapshot, o obs)
	}{
		{name: "unknown tool", tool: "email_burn", args: `{}`, code: envs.CodeUnknownTool, errNames: "email_burn"},
		{name: "arguments not an object", tool: "email_read", args: `[1]`, code: envs.CodeBadArguments, errNames: "JSON object"},
		{name: "missing argument", tool: "email_read", args: `{}`, code: envs.CodeBadArguments, errNames: "email_id"},
		{name: "malformed id", tool: "email_read", args: `{"email_id":"12"}`, code: envs.CodeBadArguments, errNames: "email_id"},
		{name: "unknown id", tool: "email_read", args: `{"email_id":"09999999"}`, code: envs.CodeIllegalAction, errNames: "09999999"},
		{name: "unknown argument", tool: "email_send", args: `{"to":"a@b.example","subject":"s","body":"b","cc":"x@y.example"}`, code: envs.CodeBadArguments, errNames: "cc"},
		{name: "wrong type", tool: "email_send", args: `{"to":"a@b.example","subject":5,"body":"b"}`, code: envs.CodeBadArguments, errNames: "subject"},
		{name: "bad address", tool: "email_send", args: `{"to":"nobody","subject":"s","body":"b"}`, code: envs.CodeBadArguments, errNames: "to"},
		{name: "empty required", tool: "email_send", args: `{"to":"a@b.example","subject":"","body":"b"}`, code: envs.CodeBadArguments, errNames: "subject"},
		{name: "search limit", tool: "email_search", args: `{"limit":0}`, code: envs.CodeBadArguments, errNames: "limit"},
		{name: "fractional limit", tool: "email_search", args: `{"limit":1.5}`, code: envs.CodeBadArguments, errNames: "limit"},
		{name: "current date", tool: "get_current_date", args: ``, check: func(t *testing.T, b, a snapshot, o obs) {
			if len(o["date"].(string)) != 10 || o["weekday"] == "" {
				t.Fatalf("date observation %v", o)
			}
		}},
		{name: "email search newest first", tool: "email_search", args: `{"folder":"inbox","limit":3}`, check: func(t *testing.T, b, a snapshot, o obs) {
			es := o["emails"].([]any)
			if len(es) != 3 || o["count"].(float64) < 3 {
				t.Fatalf("search %v", o)
			}
			for i := 1; i < len(es); i++ {
				if es[i-1].(obs)["time"].(string) < es[i].(obs)["time"].(string) {
					t.Fatalf("not newest first: %v", es)
				}
			}
		}},
		{name: "email read", tool: "email_read", args: `{"email_id":"00000101"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if o["id"] != "00000101" || o["body"] != b.Tables.Emails[0].Body {
				t.Fatalf("read %v", o)
			}
		}},
		{name: "email send", tool: "email_send", args: `{"to":"a@b.example","subject":"Hi","body":"Hello"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			last := a.Tables.Emails[len(a.Tables.Emails)-1]
			if last.Folder != workplace.FolderSent || last.From != workplace.UserAddress || last.To != "a@b.example" ||
				o["email_id"] != last.ID || a.Counters.Emails != b.Counters.Emails+1 {
				t.Fatalf("sent %+v obs %v", last, o)
			}
		}},
		{name: "email reply", tool: "email_reply", args: `{"email_id":"00000101","body":"Thanks"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			orig, last := b.Tables.Emails[0], a.Tables.Emails[len(a.Tables.Emails)-1]
			if last.To != orig.From || last.Subject != "Re: "+orig.Subject || last.InReplyTo != orig.ID || last.Body != "Thanks" {
				t.Fatalf("reply %+v to %+v", last, orig)
			}
		}},
		{name: "email forward", tool: "email_forward", args: `{"email_id":"00000101","to":"z@q.example","body":"FYI"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			orig, last := b.Tables.Emails[0], a.Tables.Emails[len(a.Tables.Emails)-1]
			if last.To != "z@q.example" || last.Subject != "Fwd: "+orig.Subject || !strings.HasPrefix(last.Body, "FYI") || !strings.Contains(last.Body, orig.Body) {
				t.Fatalf("forward %+v", last)
			}
		}},
		{name: "email delete", tool: "email_delete", args: `{"email_id":"00000101"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if len(a.Tables.Emails) != len(b.Tables.Emails)-1 || a.Tables.Emails[0].ID == "00000101" {
				t.Fatalf("not deleted")
			}
		}},
		{name: "event end before start", tool: "calendar_create_event", args: `{"title":"x","date":"2026-05-01","start_time":"10:00","end_time":"09:00"}`, code: envs.CodeBadArguments, errNames: "end_time"},
		{name: "event bad date", tool: "calendar_create_event", args: `{"title":"x","date":"2026-13-01","start_time":"10:00","end_time":"11:00"}`, code: envs.CodeBadArguments, errNames: "date"},
		{name: "event create", tool: "calendar_create_event", args: `{"title":"Lunch","date":"2026-05-01","start_time":"12:00","end_time":"13:00"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			last := a.Tables.Events[len(a.Tables.Events)-1]
			if last.Title != "Lunch" || last.Attendees == nil || a.Counters.Events != b.Counters.Events+1 {
				t.Fatalf("created %+v", last)
			}
		}},
		{name: "event update nothing", tool: "calendar_update_event", args: `{"event_id":"00000301"}`, code: envs.CodeBadArguments, errNames: "nothing to update"},
		{name: "event update bad span", tool: "calendar_update_event", args: `{"event_id":"00000301","end_time":"00:30"}`, code: envs.CodeBadArguments, errNames: "end_time"},
		{name: "event update", tool: "calendar_update_event", args: `{"event_id":"00000301","start_time":"07:00","location":"Roof"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			e := a.Tables.Events[0]
			if e.Start != "07:00" || e.Location != "Roof" || e.Title != b.Tables.Events[0].Title {
				t.Fatalf("updated %+v", e)
			}
		}},
		{name: "event delete unknown", tool: "calendar_delete_event", args: `{"event_id":"00000001"}`, code: envs.CodeIllegalAction, errNames: "00000001"},
		{name: "event delete", tool: "calendar_delete_event", args: `{"event_id":"00000301"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if len(a.Tables.Events) != len(b.Tables.Events)-1 {
				t.Fatal("not deleted")
			}
		}},
		{name: "calendar search by date", tool: "calendar_search", args: `{"date":"2026-01-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if o["count"].(float64) != 0 {
				t.Fatalf("events on an empty day: %v", o)
			}
		}},
		{name: "customer duplicate email", tool: "customer_create", args: `{"name":"N","company":"C","email":"EMAIL","owner":"o@acme.example"}`, code: envs.CodeIllegalAction, errNames: "already has email"},
		{name: "customer negative value", tool: "customer_create", args: `{"name":"N","company":"C","email":"n@c.example","owner":"o@acme.example","value":-1}`, code: envs.CodeBadArguments, errNames: "value"},
		{name: "customer create", tool: "customer_create", args: `{"name":"N","company":"C","email":"n@c.example","owner":"o@acme.example"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			c := a.Tables.Customers[len(a.Tables.Customers)-1]
			if c.Status != workplace.StatusLead || c.Value != 0 || c.ID != o["customer"].(obs)["id"] {
				t.Fatalf("created %+v", c)
			}
		}},
		{name: "customer bad status", tool: "customer_update", args: `{"customer_id":"00000501","status":"gone"}`, code: envs.CodeBadArguments, errNames: "status"},
		{name: "customer update", tool: "customer_update", args: `{"customer_id":"00000501","status":"churned","notes":"left"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			c := a.Tables.Customers[0]
			if c.Status != workplace.StatusChurned || c.Notes != "left" || c.Owner != b.Tables.Customers[0].Owner {
				t.Fatalf("updated %+v", c)
			}
		}},
		{name: "customer delete", tool: "customer_delete", args: `{"customer_id":"00000501"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if len(a.Tables.Customers) != len(b.Tables.Customers)-1 {
				t.Fatal("not deleted")
			}
		}},
		{name: "customer search", tool: "customer_search", args: `{"query":"NAME"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if o["count"].(float64) < 1 {
				t.Fatalf("search %v", o)
			}
		}},
		{name: "analytics reversed range", tool: "analytics_query", args: `{"start_date":"2026-03-10","end_date":"2026-03-01"}`, code: envs.CodeBadArguments, errNames: "end_date"},
		{name: "analytics bad metric", tool: "analytics_summary", args: `{"metric":"likes","start_date":"2026-01-01","end_date":"2026-12-31"}`, code: envs.CodeBadArguments, errNames: "metric"},
		{name: "analytics query", tool: "analytics_query", args: `{"start_date":"2000-01-01","end_date":"2100-01-01","metric":"signups"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if int(o["count"].(float64)) != len(b.Tables.Analytics) {
				t.Fatalf("query %v", o)
			}
		}},
		{name: "analytics summary", tool: "analytics_summary", args: `{"metric":"revenue","start_date":"2000-01-01","end_date":"2100-01-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			var total int64
			for _, m := range b.Tables.Analytics {
				total += m.Revenue
			}
			if int64(o["total"].(float64)) != total || int(o["days"].(float64)) != len(b.Tables.Analytics) {
				t.Fatalf("summary %v, want total %d", o, total)
			}
		}},
		{name: "task create", tool: "task_create", args: `{"title":"T","assignee":"a@acme.example","due":"2026-06-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			tk := a.Tables.Tasks[len(a.Tables.Tasks)-1]
			if tk.Priority != "medium" || tk.Status != workplace.TaskTodo || a.Counters.Tasks != b.Counters.Tasks+1 {
				t.Fatalf("created %+v", tk)
			}
		}},
		{name: "task update", tool: "task_update", args: `{"task_id":"00000901","status":"in_progress","priority":"high"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			tk := a.Tables.Tasks[0]
			if tk.Status != workplace.TaskInProgress || tk.Priority != "high" {
				t.Fatalf("updated %+v", tk)
			}
		}},
		{name: "task complete", tool: "task_complete", args: `{"task_id":"OPEN"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if o["task"].(obs)["status"] != workplace.TaskDone {
				t.Fatalf("complete %v", o)
			}
		}},
		{name: "task complete twice", tool: "task_complete", args: `{"task_id":"DONE"}`, code: envs.CodeIllegalAction, errNames: "already done"},
		{name: "task delete", tool: "task_delete", args: `{"task_id":"00000901"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			if len(a.Tables.Tasks) != len(b.Tables.Tasks)-1 {
				t.Fatal("not deleted")
			}
		}},
		{name: "task search", tool: "task_search", args: `{"status":"done"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			for _, tk := range o["tasks"].([]any) {
				if tk.(obs)["status"] != "done" {
					t.Fatalf("search %v", o)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fixture(t)
			beforeRaw, before := export(t, s)
			args := tc.args
			// Placeholders name rows of the fixture without hard-coding them.
			c0 := before.Tables.Customers[0]
			args = strings.ReplaceAll(args, "EMAIL", c0.Email)
			args = strings.ReplaceAll(args, "NAME", c0.Name)
			if strings.Contains(args, "OPEN") || strings.Contains(args, "DONE") {
				var open, done string
				for _, tk := range before.Tables.Tasks {
					if tk.Status == workplace.TaskDone && done == "" {
						done = tk.ID
					}
					if tk.Status != workplace.TaskDone && open == "" {
						open = tk.ID
					}
				}
				if open == "" || done == "" {
					t.Fatalf("fixture lacks an open and a done task: %+v", before.Tables.Tasks)
				}
				args = strings.ReplaceAll(strings.ReplaceAll(args, "OPEN", open), "DONE", done)
			}
			out, err := s.Apply(tc.tool, json.RawMessage(args))
			afterRaw, after := export(t, s)
			if tc.code != "" {
				if envs.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.errNames) {
					t.Fatalf("Apply(%s, %s) err = %v; want %s naming %q", tc.tool, args, err, tc.code, tc.errNames)
				}
				if string(afterRaw) != string(beforeRaw) {
					t.Fatal("a refused operation changed the state")
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply(%s, %s): %v", tc.tool, args, err)
			}
			var o map[string]any
			if err := json.Unmarshal([]byte(out.Observation), &o); err != nil {
				t.Fatalf("observation %q is not a JSON object: %v", out.Observation, err)
			}
			if changed := string(afterRaw) != string(beforeRaw); changed != workplace.IsMutation(tc.tool) {
				t.Fatalf("%s: state changed = %v, mutation = %v", tc.tool, changed, workplace.IsMutation(tc.tool))
			}
			tc.check(t, before, after, o)
		})
	}
}

// TestNewIDsNeverReuseDeletedOnes: ids come from counters, not table sizes.
func TestNewIDsNeverReuseDeletedOnes(t *testing.T) {
	s := fixture(t)
	_, before := export(t, s)
	last := before.Tables.Tasks[len(before.Tables.Tasks)-1].ID
	if _, err := s.Apply("task_delete", json.RawMessage(`{"task_id":"`+last+`"}`)); err != nil {
		t.Fatal(err)
	}
	out, err := s.Apply("task_create", json.RawMessage(`{"title":"T","assignee":"a@acme.example","due":"2026-06-01"}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.Observation, `"id":"`+last+`"`) {
		t.Fatalf("id %s reused: %s", last, out.Observation)
	}
}
