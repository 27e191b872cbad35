package workplace_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

type run struct {
	observations []string
	export       string
	verdict      envs.Verdict
}

// play applies calls, cutting after the first cut calls (cut < 0: never):
// the session is exported, the process "dies", and a fresh environment
// restores it and goes on.
func play(t *testing.T, task json.RawMessage, calls []workplace.Call, cut int) run {
	t.Helper()
	s, _, err := workplace.New().Start(0, task)
	require.NoError(t, err)
	var r run
	for i := 0; i <= len(calls); i++ {
		if i == cut {
			state, err := s.Export()
			require.NoError(t, err)
			require.NoError(t, s.Close())
			s, err = workplace.New().Restore(append(json.RawMessage{}, state...))
			require.NoError(t, err, "restore at cut %d", cut)
		}
		if i == len(calls) {
			break
		}
		out, err := s.Apply(calls[i].Tool, calls[i].Arguments)
		if err != nil {
			r.observations = append(r.observations, "error: "+err.Error())
			continue
		}
		r.observations = append(r.observations, out.Observation)
	}
	raw, err := s.Export()
	require.NoError(t, err)
	r.export = string(raw)
	r.verdict, err = s.Verify()
	require.NoError(t, err)
	return r
}

func c(tool, args string) workplace.Call {
	return workplace.Call{Tool: tool, Arguments: json.RawMessage(args)}
}

// TestRestoredSessionContinuesExactly is the Go form of NeMo Gym's
// test_a_restored_session_continues_exactly_like_an_uncheckpointed_run: at
// every cut, the next observation, new ids, searches over pre-cut rows, the
// end state and the reward equal the uninterrupted run.
func TestRestoredSessionContinuesExactly(t *testing.T) {
	scenarios := map[string]struct {
		task   json.RawMessage
		calls  []workplace.Call
		reward float64
	}{}
	for i := 0; i < workplace.TemplateCount(); i++ {
		task := workplace.GenerateTask(11, i)
		plan, err := workplace.Plan(task)
		require.NoError(t, err)
		scenarios["plan-"+string(task)] = struct {
			task   json.RawMessage
			calls  []workplace.Call
			reward float64
		}{task, plan, 1}
	}
	scenarios["ids and searches"] = struct {
		task   json.RawMessage
		calls  []workplace.Call
		reward float64
	}{workplace.GenerateTask(11, 0), []workplace.Call{
		c("calendar_create_event", `{"title":"Cut probe","date":"2026-07-01","start_time":"10:00","end_time":"11:00"}`),
		c("task_create", `{"title":"Probe task","assignee":"a@acme.example","due":"2026-07-02"}`),
		c("email_send", `{"to":"a@b.example","subject":"Probe mail","body":"x"}`),
		c("calendar_search", `{"query":"Cut probe"}`),
		c("task_search", `{"query":"Probe task"}`),
		c("email_search", `{"query":"Probe mail"}`),
		c("calendar_delete_event", `{"event_id":"00000999"}`),
		c("calendar_create_event", `{"title":"After","date":"2026-07-03","start_time":"10:00","end_time":"11:00"}`),
		c("customer_create", `{"name":"N","company":"C","email":"n@c.example","owner":"o@acme.example"}`),
		c("email_search", `{"from":"`+workplace.UserAddress+`"}`),
	}, 0}

	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) {
			ref := play(t, sc.task, sc.calls, -1)
			require.Equal(t, sc.reward, ref.verdict.Reward, "reference reward %v, want %v (%s)", ref.verdict.Reward, sc.reward, ref.verdict.Details)
			for cut := 0; cut <= len(sc.calls); cut++ {
				got := play(t, sc.task, sc.calls, cut)
				for i := range ref.observations {
					require.Equal(t, ref.observations[i], got.observations[i], "cut %d: observation %d = %s, uninterrupted %s", cut, i, got.observations[i], ref.observations[i])
				}
				require.Equal(t, ref.export, got.export, "cut %d: end state differs", cut)
				require.Equal(t, ref.verdict.Reward, got.verdict.Reward, "cut %d: verdict %+v, uninterrupted %+v", cut, got.verdict, ref.verdict)
				require.Equal(t, string(ref.verdict.Details), string(got.verdict.Details), "cut %d: verdict %+v, uninterrupted %+v", cut, got.verdict, ref.verdict)
			}
		})
	}
}

func TestExportRestoreRoundTrip(t *testing.T) {
	for i := 0; i < workplace.TemplateCount(); i++ {
		task := workplace.GenerateTask(5, i)
		s, _ := runPlan(t, task)
		a, err := s.Export()
		require.NoError(t, err)
		r, err := workplace.New().Restore(a)
		require.NoError(t, err, "restore")
		b, err := r.Export()
		require.NoError(t, err)
		require.Equal(t, string(b), string(a), "round trip differs:\n%s\n%s", a, b)
		a2, _ := s.Export()
		require.Equal(t, string(a), string(a2), "export is not deterministic")
	}
}

// TestCorruptStateIsRefused: every problem is CodeBadState, names what is
// wrong, and yields no session.
func TestCorruptStateIsRefused(t *testing.T) {
	s := fixture(t)
	_, err := s.Apply("email_delete", json.RawMessage(`{"email_id":"00000102"}`))
	require.NoError(t, err)
	good, err := s.Export()
	require.NoError(t, err)
	// edit decodes the good state into generic JSON, changes it and re-encodes.
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		require.NoError(t, json.Unmarshal(good, &m))
		f(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return string(b)
	}
	obj := func(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }
	rows := func(m map[string]any, table string) []any { return obj(m, "tables")[table].([]any) }
	row := func(m map[string]any, table string, i int) map[string]any { return rows(m, table)[i].(map[string]any) }

	cases := []struct{ name, state, names string }{
		{"empty", ``, "not a JSON object"},
		{"not json", `{"schema_version":`, "not a JSON object"},
		{"trailing data", string(good) + `{}`, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"unknown top field", edit(func(m map[string]any) { m["extra"] = 1 }), `unknown field "extra"`},
		{"unknown schema version", edit(func(m map[string]any) { m["schema_version"] = 2 }), "schema_version 2"},
		{"missing schema version", edit(func(m map[string]any) { delete(m, "schema_version") }), "schema_version"},
		{"missing table", edit(func(m map[string]any) { delete(obj(m, "tables"), "tasks") }), `missing field "tasks"`},
		{"null table", edit(func(m map[string]any) { obj(m, "tables")["events"] = nil }), `"events" is null`},
		{"unknown table", edit(func(m map[string]any) { obj(m, "tables")["notes"] = []any{} }), `unknown field "notes"`},
		{"missing counters", edit(func(m map[string]any) { delete(m, "counters") }), `missing field "counters"`},
		{"missing counter", edit(func(m map[string]any) { delete(obj(m, "counters"), "emails") }), `missing field "emails"`},
		{"bad task", edit(func(m map[string]any) { obj(m, "task")["index"] = 3 }), "task_id"},
		{"duplicate id", edit(func(m map[string]any) {
			obj(m, "tables")["tasks"] = append(rows(m, "tasks"), rows(m, "tasks")[0])
		}), "duplicate id"},
		{"id beyond counter", edit(func(m map[string]any) { obj(m, "counters")["events"] = 302 }), "counter"},
		{"ids out of order", edit(func(m map[string]any) {
			r := rows(m, "customers")
			r[0], r[1] = r[1], r[0]
		}), "out of order"},
		{"malformed id", edit(func(m map[string]any) { row(m, "emails", 0)["id"] = "abc" }), "8 digits"},
		{"wrong type", edit(func(m map[string]any) { row(m, "customers", 0)["value"] = "lots" }), "value"},
		{"fractional int", edit(func(m map[string]any) { row(m, "analytics", 0)["visits"] = 1.5 }), "visits"},
		{"unknown row field", edit(func(m map[string]any) { row(m, "tasks", 0)["color"] = "red" }), `unknown field "color"`},
		{"missing row field", edit(func(m map[string]any) { delete(row(m, "events", 0), "attendees") }), `missing field "attendees"`},
		{"case-folded key", edit(func(m map[string]any) {
			r := row(m, "tasks", 0)
			r["Title"] = r["title"]
			delete(r, "title")
		}), `unknown field "Title"`},
		{"bad enum", edit(func(m map[string]any) { row(m, "tasks", 0)["status"] = "someday" }), "status"},
		{"bad date", edit(func(m map[string]any) { row(m, "events", 0)["date"] = "tomorrow" }), "date"},
		{"event ends before start", edit(func(m map[string]any) { row(m, "events", 0)["end"] = "00:00" }), "not after start"},
		{"null row", edit(func(m map[string]any) { rows(m, "emails")[0] = nil }), "emails[0]"},
		{"shared customer email", edit(func(m map[string]any) {
			row(m, "customers", 1)["email"] = row(m, "customers", 0)["email"]
		}), "share email"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := workplace.New().Restore(json.RawMessage(tc.state))
			require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "Restore: session installed = %v, err = %v; want %s", sess != nil, err, envs.CodeBadState)
			require.True(t, sess == nil, "Restore: session installed = %v, err = %v; want %s", sess != nil, err, envs.CodeBadState)
			require.ErrorContains(t, err, tc.names, "error %q does not name %q", err, tc.names)
		})
	}
	// The untouched state still restores: the cases failed for their edit.
	_, err = workplace.New().Restore(json.RawMessage(edit(func(map[string]any) {})))
	require.NoError(t, err, "re-encoded good state refused")
}

// FuzzRestore: any input is either refused with CodeBadState or restores to
// a session whose export restores to the same bytes.
func FuzzRestore(f *testing.F) {
	s, _, err := workplace.New().Start(0, workplace.GenerateTask(1, 2))
	require.NoError(f, err)
	good, _ := s.Export()
	f.Add(string(good))
	f.Add(`{}`)
	f.Add(`{"schema_version":1}`)
	f.Fuzz(func(t *testing.T, state string) {
		sess, err := workplace.New().Restore(json.RawMessage(state))
		if err != nil {
			require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "refusal %v with session %v", err, sess)
			require.True(t, sess == nil, "refusal %v with session %v", err, sess)
			return
		}
		a, err := sess.Export()
		require.NoError(t, err)
		again, err := workplace.New().Restore(a)
		require.NoError(t, err, "own export refused")
		b, _ := again.Export()
		require.Equal(t, string(b), string(a), "export of a restored session does not round trip")
	})
}
