package workplace

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// Tool names.
const (
	ToolGetCurrentDate      = "get_current_date"
	ToolEmailSearch         = "email_search"
	ToolEmailRead           = "email_read"
	ToolEmailSend           = "email_send"
	ToolEmailReply          = "email_reply"
	ToolEmailForward        = "email_forward"
	ToolEmailDelete         = "email_delete"
	ToolCalendarSearch      = "calendar_search"
	ToolCalendarCreateEvent = "calendar_create_event"
	ToolCalendarUpdateEvent = "calendar_update_event"
	ToolCalendarDeleteEvent = "calendar_delete_event"
	ToolCustomerSearch      = "customer_search"
	ToolCustomerCreate      = "customer_create"
	ToolCustomerUpdate      = "customer_update"
	ToolCustomerDelete      = "customer_delete"
	ToolAnalyticsQuery      = "analytics_query"
	ToolAnalyticsSummary    = "analytics_summary"
	ToolTaskSearch          = "task_search"
	ToolTaskCreate          = "task_create"
	ToolTaskUpdate          = "task_update"
	ToolTaskComplete        = "task_complete"
	ToolTaskDelete          = "task_delete"
)

// clock is the session's fixed "now": the environment has no wall clock, so
// sent emails carry the task's time and replays are exact.
type clock struct {
	Date string
	Time string
}

func (c clock) stamp() string { return c.Date + "T" + c.Time }

// toolDef is one operation: its schema and its rule.
type toolDef struct {
	Name    string
	Desc    string
	Params  []param
	Mutates bool
	// Run applies the operation to w (a private copy) and returns the
	// observation value. An error leaves the caller's world untouched.
	Run func(w *world, now clock, a callArgs) (any, error)
}

// toolDefs returns every tool in a fixed order.
func toolDefs() []toolDef {
	emailID := param{Name: "email_id", Type: typeString, Format: formatID, Required: true, Desc: "id of the email"}
	eventID := param{Name: "event_id", Type: typeString, Format: formatID, Required: true, Desc: "id of the event"}
	customerID := param{Name: "customer_id", Type: typeString, Format: formatID, Required: true, Desc: "id of the customer"}
	taskID := param{Name: "task_id", Type: typeString, Format: formatID, Required: true, Desc: "id of the task"}
	return []toolDef{
		{Name: ToolGetCurrentDate, Desc: "Return today's date, the current time and the weekday.", Run: getCurrentDate},
		{Name: ToolEmailSearch, Desc: "Search emails, newest first. All filters are optional and combine.", Run: emailSearch, Params: []param{
			{Name: "query", Type: typeString, Desc: "case-insensitive text in subject or body"},
			{Name: "from", Type: typeString, Format: formatEmail, Desc: "sender address"},
			{Name: "to", Type: typeString, Format: formatEmail, Desc: "recipient address"},
			{Name: "folder", Type: typeString, Enum: folders, Desc: "inbox or sent"},
			{Name: "limit", Type: typeInteger, Desc: "maximum results, 1-100 (default 10)"},
		}},
		{Name: ToolEmailRead, Desc: "Read one email in full.", Run: emailRead, Params: []param{emailID}},
		{Name: ToolEmailSend, Desc: "Send a new email from the user's mailbox.", Mutates: true, Run: emailSend, Params: []param{
			{Name: "to", Type: typeString, Format: formatEmail, Required: true, Desc: "recipient address"},
			{Name: "subject", Type: typeString, Required: true, Desc: "subject line"},
			{Name: "body", Type: typeString, Required: true, Desc: "message text"},
		}},
		{Name: ToolEmailReply, Desc: "Reply to an email; the subject becomes \"Re: <subject>\".", Mutates: true, Run: emailReply, Params: []param{
			emailID,
			{Name: "body", Type: typeString, Required: true, Desc: "reply text"},
		}},
		{Name: ToolEmailForward, Desc: "Forward an email to another address.", Mutates: true, Run: emailForward, Params: []param{
			emailID,
			{Name: "to", Type: typeString, Format: formatEmail, Required: true, Desc: "recipient address"},
			{Name: "body", Type: typeString, Desc: "optional note above the forwarded message"},
		}},
		{Name: ToolEmailDelete, Desc: "Delete an email.", Mutates: true, Run: emailDelete, Params: []param{emailID}},
		{Name: ToolCalendarSearch, Desc: "Search calendar events in date and time order. All filters are optional.", Run: calendarSearch, Params: []param{
			{Name: "date", Type: typeString, Format: formatDate, Desc: "events on this date"},
			{Name: "query", Type: typeString, Desc: "case-insensitive text in title or location"},
			{Name: "attendee", Type: typeString, Format: formatEmail, Desc: "events with this attendee"},
		}},
		{Name: ToolCalendarCreateEvent, Desc: "Create a calendar event.", Mutates: true, Run: calendarCreate, Params: []param{
			{Name: "title", Type: typeString, Required: true, Desc: "event title"},
			{Name: "date", Type: typeString, Format: formatDate, Required: true, Desc: "YYYY-MM-DD"},
			{Name: "start_time", Type: typeString, Format: formatTime, Required: true, Desc: "HH:MM"},
			{Name: "end_time", Type: typeString, Format: formatTime, Required: true, Desc: "HH:MM, after start_time"},
			{Name: "attendees", Type: typeArray, Desc: "attendee email addresses"},
			{Name: "location", Type: typeString, Desc: "room or link"},
		}},
		{Name: ToolCalendarUpdateEvent, Desc: "Change fields of an event; omitted fields stay as they are.", Mutates: true, Run: calendarUpdate, Params: []param{
			eventID,
			{Name: "title", Type: typeString, Desc: "new title"},
			{Name: "date", Type: typeString, Format: formatDate, Desc: "new date"},
			{Name: "start_time", Type: typeString, Format: formatTime, Desc: "new start"},
			{Name: "end_time", Type: typeString, Format: formatTime, Desc: "new end"},
			{Name: "attendees", Type: typeArray, Desc: "new attendee list (replaces the old one)"},
			{Name: "location", Type: typeString, Desc: "new location"},
		}},
		{Name: ToolCalendarDeleteEvent, Desc: "Delete an event.", Mutates: true, Run: calendarDelete, Params: []param{eventID}},
		{Name: ToolCustomerSearch, Desc: "Search CRM customer records. All filters are optional.", Run: customerSearch, Params: []param{
			{Name: "query", Type: typeString, Desc: "case-insensitive text in name, company or email"},
			{Name: "status", Type: typeString, Enum: customerStatuses, Desc: "lead, active or churned"},
			{Name: "owner", Type: typeString, Format: formatEmail, Desc: "account owner address"},
		}},
		{Name: ToolCustomerCreate, Desc: "Create a customer record.", Mutates: true, Run: customerCreate, Params: []param{
			{Name: "name", Type: typeString, Required: true, Desc: "contact name"},
			{Name: "company", Type: typeString, Required: true, Desc: "company name"},
			{Name: "email", Type: typeString, Format: formatEmail, Required: true, Desc: "contact address, unique"},
			{Name: "owner", Type: typeString, Format: formatEmail, Required: true, Desc: "account owner address"},
			{Name: "status", Type: typeString, Enum: customerStatuses, Desc: "default lead"},
			{Name: "value", Type: typeInteger, Desc: "annual contract value in dollars, >= 0 (default 0)"},
			{Name: "notes", Type: typeString, Desc: "free text"},
		}},
		{Name: ToolCustomerUpdate, Desc: "Change fields of a customer record; omitted fields stay as they are.", Mutates: true, Run: customerUpdate, Params: []param{
			customerID,
			{Name: "name", Type: typeString, Desc: "new contact name"},
			{Name: "company", Type: typeString, Desc: "new company"},
			{Name: "email", Type: typeString, Format: formatEmail, Desc: "new contact address"},
			{Name: "status", Type: typeString, Enum: customerStatuses, Desc: "new status"},
			{Name: "owner", Type: typeString, Format: formatEmail, Desc: "new account owner"},
			{Name: "value", Type: typeInteger, Desc: "new annual contract value, >= 0"},
			{Name: "notes", Type: typeString, Desc: "new notes"},
		}},
		{Name: ToolCustomerDelete, Desc: "Delete a customer record.", Mutates: true, Run: customerDelete, Params: []param{customerID}},
		{Name: ToolAnalyticsQuery, Desc: "Daily website analytics rows between two dates (inclusive).", Run: analyticsQuery, Params: []param{
			{Name: "start_date", Type: typeString, Format: formatDate, Required: true, Desc: "first day"},
			{Name: "end_date", Type: typeString, Format: formatDate, Required: true, Desc: "last day"},
			{Name: "metric", Type: typeString, Enum: metrics, Desc: "only this metric"},
		}},
		{Name: ToolAnalyticsSummary, Desc: "Total, mean, min and max of one metric between two dates (inclusive).", Run: analyticsSummary, Params: []param{
			{Name: "metric", Type: typeString, Enum: metrics, Required: true, Desc: "visits, signups or revenue"},
			{Name: "start_date", Type: typeString, Format: formatDate, Required: true, Desc: "first day"},
			{Name: "end_date", Type: typeString, Format: formatDate, Required: true, Desc: "last day"},
		}},
		{Name: ToolTaskSearch, Desc: "Search project tasks by due date. All filters are optional.", Run: taskSearch, Params: []param{
			{Name: "query", Type: typeString, Desc: "case-insensitive text in the title"},
			{Name: "assignee", Type: typeString, Format: formatEmail, Desc: "assignee address"},
			{Name: "status", Type: typeString, Enum: taskStatuses, Desc: "todo, in_progress or done"},
			{Name: "due_before", Type: typeString, Format: formatDate, Desc: "due strictly before this date"},
		}},
		{Name: ToolTaskCreate, Desc: "Create a project task with status todo.", Mutates: true, Run: taskCreate, Params: []param{
			{Name: "title", Type: typeString, Required: true, Desc: "what to do"},
			{Name: "assignee", Type: typeString, Format: formatEmail, Required: true, Desc: "assignee address"},
			{Name: "due", Type: typeString, Format: formatDate, Required: true, Desc: "due date"},
			{Name: "priority", Type: typeString, Enum: priorities, Desc: "default medium"},
		}},
		{Name: ToolTaskUpdate, Desc: "Change fields of a task; omitted fields stay as they are.", Mutates: true, Run: taskUpdate, Params: []param{
			taskID,
			{Name: "title", Type: typeString, Desc: "new title"},
			{Name: "assignee", Type: typeString, Format: formatEmail, Desc: "new assignee"},
			{Name: "due", Type: typeString, Format: formatDate, Desc: "new due date"},
			{Name: "priority", Type: typeString, Enum: priorities, Desc: "new priority"},
			{Name: "status", Type: typeString, Enum: taskStatuses, Desc: "new status"},
		}},
		{Name: ToolTaskComplete, Desc: "Mark a task done.", Mutates: true, Run: taskComplete, Params: []param{taskID}},
		{Name: ToolTaskDelete, Desc: "Delete a task.", Mutates: true, Run: taskDelete, Params: []param{taskID}},
	}
}

// findTool returns the definition of name.
func findTool(name string) (toolDef, bool) {
	for _, d := range toolDefs() {
		if d.Name == name {
			return d, true
		}
	}
	return toolDef{}, false
}

// Tools returns the tool descriptions of the environment's Spec.
func Tools() []envs.Tool {
	defs := toolDefs()
	out := make([]envs.Tool, 0, len(defs))
	for _, d := range defs {
		out = append(out, envs.Tool{Name: d.Name, Description: d.Desc, Parameters: schema(d.Params)})
	}
	return out
}

// IsMutation reports whether tool changes state (false for reads and for
// unknown names).
func IsMutation(tool string) bool {
	d, ok := findTool(tool)
	return ok && d.Mutates
}

// apply runs one operation on w. On error w is unchanged: the rule runs on a
// copy that replaces w only on success.
func apply(w *world, now clock, tool string, args json.RawMessage) (string, error) {
	def, ok := findTool(tool)
	if !ok {
		return "", envs.Errorf(envs.CodeUnknownTool, "unknown tool %q", tool)
	}
	a, err := parseArgs(tool, def.Params, args)
	if err != nil {
		return "", err
	}
	work := w.clone()
	result, err := def.Run(&work, now, a)
	if err != nil {
		return "", err
	}
	obs, err := json.Marshal(result)
	if err != nil {
		return "", fmt.Errorf("%s: encode observation: %w", tool, err)
	}
	if def.Mutates {
		*w = work
	}
	return string(obs), nil
}

func illegal(format string, args ...any) error {
	return envs.Errorf(envs.CodeIllegalAction, format, args...)
}

func badArg(tool, name, problem string) error {
	return envs.Errorf(envs.CodeBadArguments, "%s: argument %q %s", tool, name, problem)
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// --- date ---

func getCurrentDate(_ *world, now clock, _ callArgs) (any, error) {
	d, err := time.Parse(dateLayout, now.Date)
	if err != nil {
		return nil, fmt.Errorf("session clock: %w", err)
	}
	return map[string]string{"date": now.Date, "time": now.Time, "weekday": d.Weekday().String()}, nil
}

// --- email ---

type emailSummary struct {
	ID      string `json:"id"`
	Folder  string `json:"folder"`
	From    string `json:"from"`
	To      string `json:"to"`
	Subject string `json:"subject"`
	Time    string `json:"time"`
}

func findEmail(w *world, id string) (int, error) {
	for i, e := range w.Tables.Emails {
		if e.ID == id {
			return i, nil
		}
	}
	return -1, illegal("no email with id %s", id)
}

func emailSearch(w *world, _ clock, a callArgs) (any, error) {
	limit := a.int("limit", 10)
	if limit < 1 || limit > 100 {
		return nil, badArg(ToolEmailSearch, "limit", "must be between 1 and 100")
	}
	var hits []Email
	for _, e := range w.Tables.Emails {
		if q := a.str("query"); q != "" && !containsFold(e.Subject, q) && !containsFold(e.Body, q) {
			continue
		}
		if f := a.str("from"); f != "" && !strings.EqualFold(e.From, f) {
			continue
		}
		if t := a.str("to"); t != "" && !strings.EqualFold(e.To, t) {
			continue
		}
		if f := a.str("folder"); f != "" && e.Folder != f {
			continue
		}
		hits = append(hits, e)
	}
	sortEmailsNewestFirst(hits)
	out := []emailSummary{}
	for i, e := range hits {
		if int64(i) == limit {
			break
		}
		out = append(out, emailSummary{ID: e.ID, Folder: e.Folder, From: e.From, To: e.To, Subject: e.Subject, Time: e.Time})
	}
	return map[string]any{"count": len(hits), "emails": out}, nil
}

// sortEmailsNewestFirst orders by time, newest first; ties by id, highest
// first, so the order is total.
func sortEmailsNewestFirst(es []Email) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Time != es[j].Time {
			return es[i].Time > es[j].Time
		}
		return es[i].ID > es[j].ID
	})
}

func emailRead(w *world, _ clock, a callArgs) (any, error) {
	i, err := findEmail(w, a.str("email_id"))
	if err != nil {
		return nil, err
	}
	return w.Tables.Emails[i], nil
}

// draft is what the user writes in an email; newSent adds what the mail
// system sets (id, folder, sender, time).
type draft struct {
	to, subject, body string
	inReplyTo         string // id of the answered email, or ""
}

func newSent(w *world, now clock, d draft) Email {
	e := Email{ID: next(&w.Counters.Emails), Folder: FolderSent, From: UserAddress, To: d.to,
		Subject: d.subject, Body: d.body, Time: now.stamp(), InReplyTo: d.inReplyTo}
	w.Tables.Emails = append(w.Tables.Emails, e)
	return e
}

func emailSend(w *world, now clock, a callArgs) (any, error) {
	e := newSent(w, now, draft{to: a.str("to"), subject: a.str("subject"), body: a.str("body")})
	return map[string]string{"status": "sent", "email_id": e.ID}, nil
}

func emailReply(w *world, now clock, a callArgs) (any, error) {
	i, err := findEmail(w, a.str("email_id"))
	if err != nil {
		return nil, err
	}
	orig := w.Tables.Emails[i]
	to := orig.From
	if orig.Folder == FolderSent {
		to = orig.To
	}
	subject := orig.Subject
	if !strings.HasPrefix(subject, "Re: ") {
		subject = "Re: " + subject
	}
	e := newSent(w, now, draft{to: to, subject: subject, body: a.str("body"), inReplyTo: orig.ID})
	return map[string]string{"status": "sent", "email_id": e.ID, "to": e.To, "subject": e.Subject}, nil
}

func emailForward(w *world, now clock, a callArgs) (any, error) {
	i, err := findEmail(w, a.str("email_id"))
	if err != nil {
		return nil, err
	}
	orig := w.Tables.Emails[i]
	body := fmt.Sprintf("---------- Forwarded message ----------\nFrom: %s\nDate: %s\nSubject: %s\n\n%s",
		orig.From, orig.Time, orig.Subject, orig.Body)
	if note := a.str("body"); note != "" {
		body = note + "\n\n" + body
	}
	e := newSent(w, now, draft{to: a.str("to"), subject: "Fwd: " + orig.Subject, body: body})
	return map[string]string{"status": "sent", "email_id": e.ID, "to": e.To, "subject": e.Subject}, nil
}

func emailDelete(w *world, _ clock, a callArgs) (any, error) {
	i, err := findEmail(w, a.str("email_id"))
	if err != nil {
		return nil, err
	}
	id := w.Tables.Emails[i].ID
	w.Tables.Emails = append(w.Tables.Emails[:i], w.Tables.Emails[i+1:]...)
	return map[string]string{"status": "deleted", "email_id": id}, nil
}

// --- calendar ---

func findEvent(w *world, id string) (int, error) {
	for i, e := range w.Tables.Events {
		if e.ID == id {
			return i, nil
		}
	}
	return -1, illegal("no event with id %s", id)
}

func sortEvents(es []Event) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Date != b.Date {
			return a.Date < b.Date
		}
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		return a.ID < b.ID
	})
}

func calendarSearch(w *world, _ clock, a callArgs) (any, error) {
	hits := []Event{}
	for _, e := range w.Tables.Events {
		if d := a.str("date"); d != "" && e.Date != d {
			continue
		}
		if q := a.str("query"); q != "" && !containsFold(e.Title, q) && !containsFold(e.Location, q) {
			continue
		}
		if at := a.str("attendee"); at != "" && !containsEqualFold(e.Attendees, at) {
			continue
		}
		hits = append(hits, e)
	}
	sortEvents(hits)
	return map[string]any{"count": len(hits), "events": hits}, nil
}

func containsEqualFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func checkSpan(tool string, start, end string) error {
	if end <= start {
		return badArg(tool, "end_time", fmt.Sprintf("must be after start_time (%s-%s)", start, end))
	}
	return nil
}

func calendarCreate(w *world, _ clock, a callArgs) (any, error) {
	e := Event{Title: a.str("title"), Date: a.str("date"), Start: a.str("start_time"), End: a.str("end_time"),
		Attendees: a.list("attendees"), Location: a.str("location")}
	if err := checkSpan(ToolCalendarCreateEvent, e.Start, e.End); err != nil {
		return nil, err
	}
	e.ID = next(&w.Counters.Events)
	w.Tables.Events = append(w.Tables.Events, e)
	return map[string]any{"status": "created", "event": e}, nil
}

func calendarUpdate(w *world, _ clock, a callArgs) (any, error) {
	i, err := findEvent(w, a.str("event_id"))
	if err != nil {
		return nil, err
	}
	e := &w.Tables.Events[i]
	changed := false
	set := func(name string, field *string) {
		if a.has(name) {
			*field = a.str(name)
			changed = true
		}
	}
	set("title", &e.Title)
	set("date", &e.Date)
	set("start_time", &e.Start)
	set("end_time", &e.End)
	set("location", &e.Location)
	if a.has("attendees") {
		e.Attendees = a.list("attendees")
		changed = true
	}
	if !changed {
		return nil, envs.Errorf(envs.CodeBadArguments, "%s: nothing to update: give at least one field besides event_id", ToolCalendarUpdateEvent)
	}
	if err := checkSpan(ToolCalendarUpdateEvent, e.Start, e.End); err != nil {
		return nil, err
	}
	return map[string]any{"status": "updated", "event": *e}, nil
}

func calendarDelete(w *world, _ clock, a callArgs) (any, error) {
	i, err := findEvent(w, a.str("event_id"))
	if err != nil {
		return nil, err
	}
	id := w.Tables.Events[i].ID
	w.Tables.Events = append(w.Tables.Events[:i], w.Tables.Events[i+1:]...)
	return map[string]string{"status": "deleted", "event_id": id}, nil
}

// --- customers ---

func findCustomer(w *world, id string) (int, error) {
	for i, c := range w.Tables.Customers {
		if c.ID == id {
			return i, nil
		}
	}
	return -1, illegal("no customer with id %s", id)
}

func customerSearch(w *world, _ clock, a callArgs) (any, error) {
	hits := []Customer{}
	for _, c := range w.Tables.Customers {
		if q := a.str("query"); q != "" && !containsFold(c.Name, q) && !containsFold(c.Company, q) && !containsFold(c.Email, q) {
			continue
		}
		if s := a.str("status"); s != "" && c.Status != s {
			continue
		}
		if o := a.str("owner"); o != "" && !strings.EqualFold(c.Owner, o) {
			continue
		}
		hits = append(hits, c)
	}
	return map[string]any{"count": len(hits), "customers": hits}, nil
}

func uniqueCustomerEmail(w *world, email, exceptID string) error {
	for _, c := range w.Tables.Customers {
		if c.ID != exceptID && strings.EqualFold(c.Email, email) {
			return illegal("customer %s already has email %s", c.ID, email)
		}
	}
	return nil
}

func customerCreate(w *world, _ clock, a callArgs) (any, error) {
	c := Customer{Name: a.str("name"), Company: a.str("company"), Email: a.str("email"), Owner: a.str("owner"),
		Status: StatusLead, Value: a.int("value", 0), Notes: a.str("notes")}
	if a.has("status") {
		c.Status = a.str("status")
	}
	if c.Value < 0 {
		return nil, badArg(ToolCustomerCreate, "value", "must be >= 0")
	}
	if err := uniqueCustomerEmail(w, c.Email, ""); err != nil {
		return nil, err
	}
	c.ID = next(&w.Counters.Customers)
	w.Tables.Customers = append(w.Tables.Customers, c)
	return map[string]any{"status": "created", "customer": c}, nil
}

func customerUpdate(w *world, _ clock, a callArgs) (any, error) {
	i, err := findCustomer(w, a.str("customer_id"))
	if err != nil {
		return nil, err
	}
	c := &w.Tables.Customers[i]
	changed := false
	set := func(name string, field *string) {
		if a.has(name) {
			*field = a.str(name)
			changed = true
		}
	}
	for _, f := range []struct {
		name  string
		field *string
	}{{"name", &c.Name}, {"company", &c.Company}, {"email", &c.Email}, {"status", &c.Status}, {"owner", &c.Owner}, {"notes", &c.Notes}} {
		set(f.name, f.field)
	}
	if a.has("value") {
		c.Value = a.int("value", 0)
		changed = true
		if c.Value < 0 {
			return nil, badArg(ToolCustomerUpdate, "value", "must be >= 0")
		}
	}
	if !changed {
		return nil, envs.Errorf(envs.CodeBadArguments, "%s: nothing to update: give at least one field besides customer_id", ToolCustomerUpdate)
	}
	if c.Name == "" || c.Company == "" {
		return nil, envs.Errorf(envs.CodeBadArguments, "%s: name and company must not be empty", ToolCustomerUpdate)
	}
	if err := uniqueCustomerEmail(w, c.Email, c.ID); err != nil {
		return nil, err
	}
	return map[string]any{"status": "updated", "customer": *c}, nil
}

func customerDelete(w *world, _ clock, a callArgs) (any, error) {
	i, err := findCustomer(w, a.str("customer_id"))
	if err != nil {
		return nil, err
	}
	id := w.Tables.Customers[i].ID
	w.Tables.Customers = append(w.Tables.Customers[:i], w.Tables.Customers[i+1:]...)
	return map[string]string{"status": "deleted", "customer_id": id}, nil
}

// --- analytics (read only) ---

func dateRange(tool string, a callArgs) (string, string, error) {
	start, end := a.str("start_date"), a.str("end_date")
	if end < start {
		return "", "", badArg(tool, "end_date", fmt.Sprintf("must not be before start_date (%s > %s)", start, end))
	}
	return start, end, nil
}

func metricRows(w *world, start, end string) []Metrics {
	var rows []Metrics
	for _, m := range w.Tables.Analytics {
		if m.Date >= start && m.Date <= end {
			rows = append(rows, m)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Date < rows[j].Date })
	return rows
}

func analyticsQuery(w *world, _ clock, a callArgs) (any, error) {
	start, end, err := dateRange(ToolAnalyticsQuery, a)
	if err != nil {
		return nil, err
	}
	rows := metricRows(w, start, end)
	if metric := a.str("metric"); metric != "" {
		type point struct {
			Date  string `json:"date"`
			Value int64  `json:"value"`
		}
		pts := []point{}
		for _, m := range rows {
			pts = append(pts, point{Date: m.Date, Value: m.value(metric)})
		}
		return map[string]any{"metric": metric, "count": len(pts), "rows": pts}, nil
	}
	if rows == nil {
		rows = []Metrics{}
	}
	return map[string]any{"count": len(rows), "rows": rows}, nil
}

// Summary is the observation of analytics_summary.
type Summary struct {
	Metric    string  `json:"metric"`
	StartDate string  `json:"start_date"`
	EndDate   string  `json:"end_date"`
	Days      int     `json:"days"`
	Total     int64   `json:"total"`
	Mean      float64 `json:"mean"`
	Min       int64   `json:"min"`
	Max       int64   `json:"max"`
}

func summarize(w *world, metric, start, end string) Summary {
	s := Summary{Metric: metric, StartDate: start, EndDate: end}
	for i, m := range metricRows(w, start, end) {
		v := m.value(metric)
		s.Total += v
		if i == 0 || v < s.Min {
			s.Min = v
		}
		if i == 0 || v > s.Max {
			s.Max = v
		}
		s.Days++
	}
	if s.Days > 0 {
		s.Mean = float64(s.Total) / float64(s.Days)
	}
	return s
}

func analyticsSummary(w *world, _ clock, a callArgs) (any, error) {
	start, end, err := dateRange(ToolAnalyticsSummary, a)
	if err != nil {
		return nil, err
	}
	return summarize(w, a.str("metric"), start, end), nil
}

// --- project tasks ---

func findTask(w *world, id string) (int, error) {
	for i, t := range w.Tables.Tasks {
		if t.ID == id {
			return i, nil
		}
	}
	return -1, illegal("no task with id %s", id)
}

func taskSearch(w *world, _ clock, a callArgs) (any, error) {
	hits := []ProjectTask{}
	for _, t := range w.Tables.Tasks {
		if q := a.str("query"); q != "" && !containsFold(t.Title, q) {
			continue
		}
		if as := a.str("assignee"); as != "" && !strings.EqualFold(t.Assignee, as) {
			continue
		}
		if s := a.str("status"); s != "" && t.Status != s {
			continue
		}
		if d := a.str("due_before"); d != "" && t.Due >= d {
			continue
		}
		hits = append(hits, t)
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Due != hits[j].Due {
			return hits[i].Due < hits[j].Due
		}
		return hits[i].ID < hits[j].ID
	})
	return map[string]any{"count": len(hits), "tasks": hits}, nil
}

func taskCreate(w *world, _ clock, a callArgs) (any, error) {
	t := ProjectTask{Title: a.str("title"), Assignee: a.str("assignee"), Due: a.str("due"), Status: TaskTodo, Priority: "medium"}
	if a.has("priority") {
		t.Priority = a.str("priority")
	}
	t.ID = next(&w.Counters.Tasks)
	w.Tables.Tasks = append(w.Tables.Tasks, t)
	return map[string]any{"status": "created", "task": t}, nil
}

func taskUpdate(w *world, _ clock, a callArgs) (any, error) {
	i, err := findTask(w, a.str("task_id"))
	if err != nil {
		return nil, err
	}
	t := &w.Tables.Tasks[i]
	changed := false
	for _, f := range []struct {
		name  string
		field *string
	}{{"title", &t.Title}, {"assignee", &t.Assignee}, {"due", &t.Due}, {"priority", &t.Priority}, {"status", &t.Status}} {
		if a.has(f.name) {
			*f.field = a.str(f.name)
			changed = true
		}
	}
	if !changed {
		return nil, envs.Errorf(envs.CodeBadArguments, "%s: nothing to update: give at least one field besides task_id", ToolTaskUpdate)
	}
	if t.Title == "" {
		return nil, badArg(ToolTaskUpdate, "title", "must not be empty")
	}
	return map[string]any{"status": "updated", "task": *t}, nil
}

func taskComplete(w *world, _ clock, a callArgs) (any, error) {
	i, err := findTask(w, a.str("task_id"))
	if err != nil {
		return nil, err
	}
	t := &w.Tables.Tasks[i]
	if t.Status == TaskDone {
		return nil, illegal("task %s is already done", t.ID)
	}
	t.Status = TaskDone
	return map[string]any{"status": "completed", "task": *t}, nil
}

func taskDelete(w *world, _ clock, a callArgs) (any, error) {
	i, err := findTask(w, a.str("task_id"))
	if err != nil {
		return nil, err
	}
	id := w.Tables.Tasks[i].ID
	w.Tables.Tasks = append(w.Tables.Tasks[:i], w.Tables.Tasks[i+1:]...)
	return map[string]string{"status": "deleted", "task_id": id}, nil
}
