package workplace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	require.NoError(t, err, "export")
	var snap snapshot
	require.NoError(t, json.Unmarshal(raw, &snap), "decode export")
	return raw, snap
}

func fixture(t *testing.T) envs.Session {
	t.Helper()
	s, _, err := workplace.New().Start(0, workplace.GenerateTask(7, 0))
	require.NoError(t, err)
	return s
}

func TestSpec(t *testing.T) {
	spec := workplace.New().Spec()
	require.Equal(t, "workplace", spec.Name, "spec header %+v", spec)
	require.Equal(t, envs.ModeExportRestore, spec.Mode, "spec header %+v", spec)
	require.Equal(t, envs.StyleTools, spec.Style, "spec header %+v", spec)
	require.GreaterOrEqual(t, len(spec.Tools), 20, "%d tools, want 20+", len(spec.Tools))
	names := map[string]bool{}
	for _, tool := range spec.Tools {
		require.False(t, names[tool.Name], "duplicate tool %s", tool.Name)
		names[tool.Name] = true
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		err := json.Unmarshal(tool.Parameters, &schema)
		require.NoError(t, err, "tool %s: schema %s (%v)", tool.Name, tool.Parameters, err)
		require.Equal(t, "object", schema.Type, "tool %s: schema %s (%v)", tool.Name, tool.Parameters, err)
		require.NotEqual(t, "", tool.Description, "tool %s: schema %s (%v)", tool.Name, tool.Parameters, err)
		for _, r := range schema.Required {
			_, ok := schema.Properties[r]
			require.True(t, ok, "tool %s requires undeclared %s", tool.Name, r)
		}
	}
	for _, want := range []string{"get_current_date", "email_search", "email_reply", "calendar_update_event", "customer_update", "analytics_query", "task_complete"} {
		require.True(t, names[want], "missing tool %s", want)
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
			require.Len(t, o["date"].(string), 10, "date observation %v", o)
			require.NotEqual(t, "", o["weekday"], "date observation %v", o)
		}},
		{name: "email search newest first", tool: "email_search", args: `{"folder":"inbox","limit":3}`, check: func(t *testing.T, b, a snapshot, o obs) {
			es := o["emails"].([]any)
			require.Len(t, es, 3, "search %v", o)
			require.GreaterOrEqual(t, o["count"].(float64), float64(3), "search %v", o)
			for i := 1; i < len(es); i++ {
				require.GreaterOrEqual(t, es[i-1].(obs)["time"].(string), es[i].(obs)["time"].(string), "not newest first: %v", es)
			}
		}},
		{name: "email read", tool: "email_read", args: `{"email_id":"00000101"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Equal(t, "00000101", o["id"], "read %v", o)
			require.Equal(t, b.Tables.Emails[0].Body, o["body"], "read %v", o)
		}},
		{name: "email send", tool: "email_send", args: `{"to":"a@b.example","subject":"Hi","body":"Hello"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			last := a.Tables.Emails[len(a.Tables.Emails)-1]
			require.Equal(t, workplace.FolderSent, last.Folder, "sent %+v obs %v", last, o)
			require.Equal(t, workplace.UserAddress, last.From, "sent %+v obs %v", last, o)
			require.Equal(t, "a@b.example", last.To, "sent %+v obs %v", last, o)
			require.Equal(t, last.ID, o["email_id"], "sent %+v obs %v", last, o)
			require.Equal(t, b.Counters.Emails+1, a.Counters.Emails, "sent %+v obs %v", last, o)
		}},
		{name: "email reply", tool: "email_reply", args: `{"email_id":"00000101","body":"Thanks"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			orig, last := b.Tables.Emails[0], a.Tables.Emails[len(a.Tables.Emails)-1]
			require.Equal(t, orig.From, last.To, "reply %+v to %+v", last, orig)
			require.Equal(t, "Re: "+orig.Subject, last.Subject, "reply %+v to %+v", last, orig)
			require.Equal(t, orig.ID, last.InReplyTo, "reply %+v to %+v", last, orig)
			require.Equal(t, "Thanks", last.Body, "reply %+v to %+v", last, orig)
		}},
		{name: "email forward", tool: "email_forward", args: `{"email_id":"00000101","to":"z@q.example","body":"FYI"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			orig, last := b.Tables.Emails[0], a.Tables.Emails[len(a.Tables.Emails)-1]
			require.Equal(t, "z@q.example", last.To, "forward %+v", last)
			require.Equal(t, "Fwd: "+orig.Subject, last.Subject, "forward %+v", last)
			require.True(t, strings.HasPrefix(last.Body, "FYI"), "forward %+v", last)
			require.Contains(t, last.Body, orig.Body, "forward %+v", last)
		}},
		{name: "email delete", tool: "email_delete", args: `{"email_id":"00000101"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Len(t, a.Tables.Emails, len(b.Tables.Emails)-1, "not deleted")
			require.NotEqual(t, "00000101", a.Tables.Emails[0].ID, "not deleted")
		}},
		{name: "event end before start", tool: "calendar_create_event", args: `{"title":"x","date":"2026-05-01","start_time":"10:00","end_time":"09:00"}`, code: envs.CodeBadArguments, errNames: "end_time"},
		{name: "event bad date", tool: "calendar_create_event", args: `{"title":"x","date":"2026-13-01","start_time":"10:00","end_time":"11:00"}`, code: envs.CodeBadArguments, errNames: "date"},
		{name: "event create", tool: "calendar_create_event", args: `{"title":"Lunch","date":"2026-05-01","start_time":"12:00","end_time":"13:00"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			last := a.Tables.Events[len(a.Tables.Events)-1]
			require.Equal(t, "Lunch", last.Title, "created %+v", last)
			require.NotNil(t, last.Attendees, "created %+v", last)
			require.Equal(t, b.Counters.Events+1, a.Counters.Events, "created %+v", last)
		}},
		{name: "event update nothing", tool: "calendar_update_event", args: `{"event_id":"00000301"}`, code: envs.CodeBadArguments, errNames: "nothing to update"},
		{name: "event update bad span", tool: "calendar_update_event", args: `{"event_id":"00000301","end_time":"00:30"}`, code: envs.CodeBadArguments, errNames: "end_time"},
		{name: "event update", tool: "calendar_update_event", args: `{"event_id":"00000301","start_time":"07:00","location":"Roof"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			e := a.Tables.Events[0]
			require.Equal(t, "07:00", e.Start, "updated %+v", e)
			require.Equal(t, "Roof", e.Location, "updated %+v", e)
			require.Equal(t, b.Tables.Events[0].Title, e.Title, "updated %+v", e)
		}},
		{name: "event delete unknown", tool: "calendar_delete_event", args: `{"event_id":"00000001"}`, code: envs.CodeIllegalAction, errNames: "00000001"},
		{name: "event delete", tool: "calendar_delete_event", args: `{"event_id":"00000301"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Len(t, a.Tables.Events, len(b.Tables.Events)-1, "not deleted")
		}},
		{name: "calendar search by date", tool: "calendar_search", args: `{"date":"2026-01-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Equal(t, float64(0), o["count"].(float64), "events on an empty day: %v", o)
		}},
		{name: "customer duplicate email", tool: "customer_create", args: `{"name":"N","company":"C","email":"EMAIL","owner":"o@acme.example"}`, code: envs.CodeIllegalAction, errNames: "already has email"},
		{name: "customer negative value", tool: "customer_create", args: `{"name":"N","company":"C","email":"n@c.example","owner":"o@acme.example","value":-1}`, code: envs.CodeBadArguments, errNames: "value"},
		{name: "customer create", tool: "customer_create", args: `{"name":"N","company":"C","email":"n@c.example","owner":"o@acme.example"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			c := a.Tables.Customers[len(a.Tables.Customers)-1]
			require.Equal(t, workplace.StatusLead, c.Status, "created %+v", c)
			require.Equal(t, int64(0), c.Value, "created %+v", c)
			require.Equal(t, o["customer"].(obs)["id"], c.ID, "created %+v", c)
		}},
		{name: "customer bad status", tool: "customer_update", args: `{"customer_id":"00000501","status":"gone"}`, code: envs.CodeBadArguments, errNames: "status"},
		{name: "customer update", tool: "customer_update", args: `{"customer_id":"00000501","status":"churned","notes":"left"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			c := a.Tables.Customers[0]
			require.Equal(t, workplace.StatusChurned, c.Status, "updated %+v", c)
			require.Equal(t, "left", c.Notes, "updated %+v", c)
			require.Equal(t, b.Tables.Customers[0].Owner, c.Owner, "updated %+v", c)
		}},
		{name: "customer delete", tool: "customer_delete", args: `{"customer_id":"00000501"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Len(t, a.Tables.Customers, len(b.Tables.Customers)-1, "not deleted")
		}},
		{name: "customer search", tool: "customer_search", args: `{"query":"NAME"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.GreaterOrEqual(t, o["count"].(float64), float64(1), "search %v", o)
		}},
		{name: "analytics reversed range", tool: "analytics_query", args: `{"start_date":"2026-03-10","end_date":"2026-03-01"}`, code: envs.CodeBadArguments, errNames: "end_date"},
		{name: "analytics bad metric", tool: "analytics_summary", args: `{"metric":"likes","start_date":"2026-01-01","end_date":"2026-12-31"}`, code: envs.CodeBadArguments, errNames: "metric"},
		{name: "analytics query", tool: "analytics_query", args: `{"start_date":"2000-01-01","end_date":"2100-01-01","metric":"signups"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Equal(t, len(b.Tables.Analytics), int(o["count"].(float64)), "query %v", o)
		}},
		{name: "analytics summary", tool: "analytics_summary", args: `{"metric":"revenue","start_date":"2000-01-01","end_date":"2100-01-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			var total int64
			for _, m := range b.Tables.Analytics {
				total += m.Revenue
			}
			require.Equal(t, total, int64(o["total"].(float64)), "summary %v, want total %d", o, total)
			require.Equal(t, len(b.Tables.Analytics), int(o["days"].(float64)), "summary %v, want total %d", o, total)
		}},
		{name: "task create", tool: "task_create", args: `{"title":"T","assignee":"a@acme.example","due":"2026-06-01"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			tk := a.Tables.Tasks[len(a.Tables.Tasks)-1]
			require.Equal(t, "medium", tk.Priority, "created %+v", tk)
			require.Equal(t, workplace.TaskTodo, tk.Status, "created %+v", tk)
			require.Equal(t, b.Counters.Tasks+1, a.Counters.Tasks, "created %+v", tk)
		}},
		{name: "task update", tool: "task_update", args: `{"task_id":"00000901","status":"in_progress","priority":"high"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			tk := a.Tables.Tasks[0]
			require.Equal(t, workplace.TaskInProgress, tk.Status, "updated %+v", tk)
			require.Equal(t, "high", tk.Priority, "updated %+v", tk)
		}},
		{name: "task complete", tool: "task_complete", args: `{"task_id":"OPEN"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Equal(t, workplace.TaskDone, o["task"].(obs)["status"], "complete %v", o)
		}},
		{name: "task complete twice", tool: "task_complete", args: `{"task_id":"DONE"}`, code: envs.CodeIllegalAction, errNames: "already done"},
		{name: "task delete", tool: "task_delete", args: `{"task_id":"00000901"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			require.Len(t, a.Tables.Tasks, len(b.Tables.Tasks)-1, "not deleted")
		}},
		{name: "task search", tool: "task_search", args: `{"status":"done"}`, check: func(t *testing.T, b, a snapshot, o obs) {
			for _, tk := range o["tasks"].([]any) {
				require.Equal(t, "done", tk.(obs)["status"], "search %v", o)
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
				require.NotEqual(t, "", open, "fixture lacks an open and a done task: %+v", before.Tables.Tasks)
				require.NotEqual(t, "", done, "fixture lacks an open and a done task: %+v", before.Tables.Tasks)
				args = strings.ReplaceAll(strings.ReplaceAll(args, "OPEN", open), "DONE", done)
			}
			out, err := s.Apply(tc.tool, json.RawMessage(args))
			afterRaw, after := export(t, s)
			if tc.code != "" {
				require.Equal(t, tc.code, envs.CodeOf(err), "Apply(%s, %s) err = %v; want %s naming %q", tc.tool, args, err, tc.code, tc.errNames)
				require.ErrorContains(t, err, tc.errNames, "Apply(%s, %s) err = %v; want %s naming %q", tc.tool, args, err, tc.code, tc.errNames)
				require.Equal(t, string(beforeRaw), string(afterRaw), "a refused operation changed the state")
				return
			}
			require.NoError(t, err, "Apply(%s, %s)", tc.tool, args)
			var o map[string]any
			require.NoError(t, json.Unmarshal([]byte(out.Observation), &o), "observation %q is not a JSON object", out.Observation)
			changed := string(afterRaw) != string(beforeRaw)
			require.Equal(t, workplace.IsMutation(tc.tool), changed, "%s: state changed = %v, mutation = %v", tc.tool, changed, workplace.IsMutation(tc.tool))
			tc.check(t, before, after, o)
		})
	}
}

// TestNewIDsNeverReuseDeletedOnes: ids come from counters, not table sizes.
func TestNewIDsNeverReuseDeletedOnes(t *testing.T) {
	s := fixture(t)
	_, before := export(t, s)
	last := before.Tables.Tasks[len(before.Tables.Tasks)-1].ID
	_, err := s.Apply("task_delete", json.RawMessage(`{"task_id":"`+last+`"}`))
	require.NoError(t, err)
	out, err := s.Apply("task_create", json.RawMessage(`{"title":"T","assignee":"a@acme.example","due":"2026-06-01"}`))
	require.NoError(t, err)
	require.NotContains(t, out.Observation, `"id":"`+last+`"`, "id %s reused: %s", last, out.Observation)
}
