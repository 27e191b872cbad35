package workplace

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// Task names one generated episode. Everything else (tables, instruction,
// ground truth) is derived from Seed and Index, so a task travels as these
// three fields and can be regenerated anywhere: by the environment at Start
// and Verify, and by the scripted policy.
type Task struct {
	TaskID string `json:"task_id"`
	Seed   int64  `json:"seed"`
	Index  int    `json:"index"`
}

// TaskLinePrefix starts the line of the start observation that carries the
// task as JSON.
const TaskLinePrefix = "TASK "

// taskID is the canonical id of (seed, index).
func taskID(seed int64, index int) string { return fmt.Sprintf("workplace-%d-%d", seed, index) }

// GenerateTask returns the task JSON for (seed, index). index must be >= 0;
// a negative index is clamped to 0 so the result is always a valid task.
func GenerateTask(seed int64, index int) json.RawMessage {
	if index < 0 {
		index = 0
	}
	b, _ := json.Marshal(Task{TaskID: taskID(seed, index), Seed: seed, Index: index}) // cannot fail
	return b
}

// ParseTask decodes and checks a task strictly: all three fields, nothing
// else, and an id that matches seed and index.
func ParseTask(raw json.RawMessage) (Task, error) {
	var t Task
	if err := decodeObject(raw, "task", &t); err != nil {
		return Task{}, envs.Errorf(envs.CodeBadTask, "%v", err)
	}
	if t.Index < 0 {
		return Task{}, envs.Errorf(envs.CodeBadTask, "task: index %d is negative", t.Index)
	}
	if want := taskID(t.Seed, t.Index); t.TaskID != want {
		return Task{}, envs.Errorf(envs.CodeBadTask, "task: task_id %q does not match seed and index (want %q)", t.TaskID, want)
	}
	return t, nil
}

// Call is one tool call of a plan.
type Call struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// Plan returns the ordered tool calls that take the task's initial state to
// its ground truth. Reads are included, as an agent would make them.
func Plan(task json.RawMessage) ([]Call, error) {
	t, err := ParseTask(task)
	if err != nil {
		return nil, err
	}
	ep, err := generate(t)
	if err != nil {
		return nil, err
	}
	return ep.Plan, nil
}

// episode is everything derived from a task.
type episode struct {
	Task        Task
	Template    string
	Instruction string
	Now         clock
	Initial     world
	Plan        []Call
	Expected    Tables
}

// First ids of each table; the calendar starts at "00000301".
const (
	firstEmailID    = 101
	firstEventID    = 301
	firstCustomerID = 501
	firstMetricsID  = 701
	firstTaskID     = 901
)

// Pools the generator draws from.
var (
	colleagues = []string{
		"Priya Shah", "Tom Becker", "Lena Fischer", "Omar Haddad", "Grace Kim", "Diego Alvarez",
		"Hannah Cole", "Yuki Tanaka", "Samuel Okafor", "Ines Moreau", "Victor Lind", "Maya Patel",
	}
	contacts = []struct{ Name, Company string }{
		{"Ada Brooks", "Northwind"}, {"Ben Carter", "Globex"}, {"Chloe Dunn", "Initech"}, {"Dan Evans", "Umbrella"},
		{"Eva Green", "Hooli"}, {"Felix Hart", "Stark Supply"}, {"Gina Ivers", "Wayne Logistics"}, {"Hugo Jones", "Acme Retail"},
		{"Iris Klein", "Soylent"}, {"Jack Lee", "Vandelay"}, {"Kara Mills", "Pied Piper"}, {"Liam Nash", "Cyberdyne"},
		{"Mia Ortiz", "Tyrell"}, {"Noah Price", "Oscorp"}, {"Olga Quinn", "Massive Dynamic"}, {"Paul Reyes", "Aperture"},
		{"Rosa Silva", "Gringotts"}, {"Sven Toll", "Monarch"}, {"Tara Underwood", "Blue Sun"}, {"Uma Vance", "Nakatomi"},
	}
	subjects = []string{
		"Quarterly numbers", "Offsite planning", "Contract draft", "Invoice question", "Roadmap review",
		"Hiring update", "Security audit", "Pricing proposal", "Onboarding checklist", "Budget request",
		"Support escalation", "Launch timeline", "Vendor shortlist", "Renewal terms", "Team lunch",
	}
	bodies = []string{
		"Can you take a look when you have a minute?", "Please see the attached notes.",
		"Let me know what you think by Friday.", "Following up on our conversation.",
		"Here is the latest version for review.", "Could we discuss this in our next sync?",
	}
	replies = []string{
		"Thanks, I will review it today.", "Sounds good, let's go ahead.", "I can't make it, can we reschedule?",
		"Received, I'll get back to you tomorrow.", "Looks great, approved.", "Please send me the final numbers.",
		"Let's discuss this at the team meeting.", "I'll loop in finance.",
	}
	eventTitles = []string{
		"Standup", "1:1", "Design review", "Sprint planning", "Customer call", "Interview", "All hands", "Retro",
	}
	topics = []string{
		"Renewal", "Kickoff", "Pricing", "Integration", "Escalation", "Roadmap", "Security", "Onboarding",
	}
	rooms     = []string{"Room Aurora", "Room Borealis", "Room Cirrus", "Video call"}
	taskTitle = []string{
		"Update the sales deck", "Review pull requests", "Write release notes", "Prepare board slides",
		"Clean up the CRM", "Plan the offsite", "Draft the newsletter", "Audit access rights",
	}
)

func address(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@acme.example"
}

func contactAddress(name, company string) string {
	first := strings.ToLower(strings.Fields(name)[0])
	domain := strings.ToLower(strings.ReplaceAll(company, " ", ""))
	return first + "@" + domain + ".example"
}

// taskRand is the generator of one task: independent of everything but
// (seed, index).
func taskRand(t Task) *rand.Rand {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.Seed))
	binary.BigEndian.PutUint64(b[8:], uint64(t.Index))
	h.Write([]byte("workplace-task/v1"))
	h.Write(b[:])
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])))
}

func pick[T any](r *rand.Rand, list []T) T { return list[r.IntN(len(list))] }

func addDays(date string, n int) string {
	d, err := time.Parse(dateLayout, date)
	if err != nil {
		panic("workplace: generator date " + date) // generator-made dates always parse
	}
	return d.AddDate(0, 0, n).Format(dateLayout)
}

func addMinutes(clockTime string, n int) string {
	t, err := time.Parse(clockLayout, clockTime)
	if err != nil {
		panic("workplace: generator time " + clockTime)
	}
	return t.Add(time.Duration(n) * time.Minute).Format(clockLayout)
}

// minutesBefore returns the timestamp n minutes before now.
func minutesBefore(now clock, n int) string {
	t, err := time.Parse(timeLayout, now.stamp())
	if err != nil {
		panic("workplace: generator clock " + now.stamp())
	}
	return t.Add(-time.Duration(n) * time.Minute).Format(timeLayout)
}

func slot(r *rand.Rand) string { return fmt.Sprintf("%02d:%02d", 9+r.IntN(8), 30*r.IntN(2)) }

func call(tool string, args map[string]any) Call {
	b, err := json.Marshal(args)
	if err != nil {
		panic("workplace: plan arguments do not encode: " + err.Error())
	}
	return Call{Tool: tool, Arguments: b}
}

// gen holds the state of one generation run.
type gen struct {
	r            *rand.Rand
	now          clock
	w            world
	usedContacts map[int]bool
}

func (g *gen) inbox(from, subject, body string, minutesAgo int) Email {
	e := Email{ID: next(&g.w.Counters.Emails), Folder: FolderInbox, From: from, To: UserAddress,
		Subject: subject, Body: body, Time: minutesBefore(g.now, minutesAgo)}
	g.w.Tables.Emails = append(g.w.Tables.Emails, e)
	return e
}

// eventSpec is a calendar entry as a generator describes it: a length
// instead of an end time, and no id yet.
type eventSpec struct {
	title, date, start string
	minutes            int
	attendees          []string
	location           string
}

// event adds s to the calendar. The calls in a composite literal run left to
// right, so callers that draw the fields from g.r must keep them in the order
// title, date, start, minutes, attendees, location: another order changes
// every generated task.
func (g *gen) event(s eventSpec) Event {
	e := Event{ID: next(&g.w.Counters.Events), Title: s.title, Date: s.date, Start: s.start,
		End: addMinutes(s.start, s.minutes), Attendees: s.attendees, Location: s.location}
	g.w.Tables.Events = append(g.w.Tables.Events, e)
	return e
}

// customer adds a CRM record for an unused contact.
func (g *gen) customer(status, owner string) Customer {
	i := g.r.IntN(len(contacts))
	for g.usedContacts[i] {
		i = (i + 1) % len(contacts)
	}
	g.usedContacts[i] = true
	ct := contacts[i]
	c := Customer{ID: next(&g.w.Counters.Customers), Name: ct.Name, Company: ct.Company,
		Email: contactAddress(ct.Name, ct.Company), Status: status, Owner: owner,
		Value: int64(5+g.r.IntN(95)) * 1000, Notes: ""}
	g.w.Tables.Customers = append(g.w.Tables.Customers, c)
	return c
}

func (g *gen) task(title, assignee, due, status string) ProjectTask {
	t := ProjectTask{ID: next(&g.w.Counters.Tasks), Title: title, Assignee: assignee, Due: due,
		Status: status, Priority: pick(g.r, priorities)}
	g.w.Tables.Tasks = append(g.w.Tables.Tasks, t)
	return t
}

func (g *gen) background() {
	r := g.r
	for i := 0; i < 8; i++ {
		g.customer(pick(r, customerStatuses), address(pick(r, colleagues)))
	}
	for i := 0; i < 10; i++ {
		from := address(pick(r, colleagues))
		if r.IntN(3) == 0 {
			c := pick(r, g.w.Tables.Customers)
			from = c.Email
		}
		g.inbox(from, pick(r, subjects), pick(r, bodies), 1+r.IntN(7*24*60))
	}
	for i := 0; i < 3; i++ {
		e := Email{ID: next(&g.w.Counters.Emails), Folder: FolderSent, From: UserAddress, To: address(pick(r, colleagues)),
			Subject: pick(r, subjects), Body: pick(r, bodies), Time: minutesBefore(g.now, 1+r.IntN(7*24*60))}
		g.w.Tables.Emails = append(g.w.Tables.Emails, e)
	}
	for i := 0; i < 8; i++ {
		g.event(eventSpec{title: pick(r, eventTitles), date: addDays(g.now.Date, r.IntN(10)), start: slot(r),
			minutes: 30 * (1 + r.IntN(2)), attendees: []string{address(pick(r, colleagues))}, location: pick(r, rooms)})
	}
	for d := 28; d >= 1; d-- {
		m := Metrics{ID: next(&g.w.Counters.Analytics), Date: addDays(g.now.Date, -d),
			Visits: int64(800 + r.IntN(1200)), Signups: int64(10 + r.IntN(70)), Revenue: int64(1000 + r.IntN(8000))}
		g.w.Tables.Analytics = append(g.w.Tables.Analytics, m)
	}
	for i := 0; i < 8; i++ {
		g.task(pick(r, taskTitle), address(pick(r, colleagues)), addDays(g.now.Date, r.IntN(20)-5), pick(r, taskStatuses))
	}
}

// template builds one kind of task on top of the background: it may add rows
// the task needs, and returns the instruction and the plan.
type template struct {
	Name  string
	Build func(g *gen) (string, []Call)
}

func templates() []template {
	return []template{
		{"reply_latest", buildReplyLatest},
		{"move_meeting", buildMoveMeeting},
		{"churn_customer", buildChurnCustomer},
		{"create_task", buildCreateTask},
		{"delete_events_on_date", buildDeleteEventsOnDate},
		{"forward_email", buildForwardEmail},
		{"complete_overdue_tasks", buildCompleteOverdue},
		{"analytics_report", buildAnalyticsReport},
		{"reassign_customers", buildReassignCustomers},
		{"delete_emails_from", buildDeleteEmailsFrom},
		{"schedule_meeting", buildScheduleMeeting},
	}
}

// TemplateCount is the number of task templates; index % TemplateCount
// picks one.
func TemplateCount() int { return len(templates()) }

func buildReplyLatest(g *gen) (string, []Call) {
	name := pick(g.r, colleagues)
	addr := address(name)
	g.inbox(addr, pick(g.r, subjects), pick(g.r, bodies), 60+g.r.IntN(3000))
	g.inbox(addr, pick(g.r, subjects), pick(g.r, bodies), 60+g.r.IntN(3000))
	var from []Email
	for _, e := range g.w.Tables.Emails {
		if e.Folder == FolderInbox && e.From == addr {
			from = append(from, e)
		}
	}
	sortEmailsNewestFirst(from)
	text := pick(g.r, replies)
	return fmt.Sprintf("Reply to the latest email from %s (%s) saying: %q", name, addr, text), []Call{
		call(ToolEmailSearch, map[string]any{"from": addr, "folder": FolderInbox}),
		call(ToolEmailReply, map[string]any{"email_id": from[0].ID, "body": text}),
	}
}

func buildMoveMeeting(g *gen) (string, []Call) {
	c := pick(g.r, g.w.Tables.Customers)
	title := fmt.Sprintf("%s meeting with %s", pick(g.r, topics), c.Company)
	minutes := 30 * (1 + g.r.IntN(3))
	e := g.event(eventSpec{title: title, date: addDays(g.now.Date, 1+g.r.IntN(6)), start: slot(g.r),
		minutes: minutes, attendees: []string{c.Email}, location: pick(g.r, rooms)})
	newDate := addDays(e.Date, 1+g.r.IntN(3))
	newStart := slot(g.r)
	return fmt.Sprintf("Move the meeting %q on %s to %s at %s, keeping its length.", title, e.Date, newDate, newStart), []Call{
		call(ToolCalendarSearch, map[string]any{"query": title}),
		call(ToolCalendarUpdateEvent, map[string]any{"event_id": e.ID, "date": newDate, "start_time": newStart,
			"end_time": addMinutes(newStart, minutes)}),
	}
}

func buildChurnCustomer(g *gen) (string, []Call) {
	c := g.customer(StatusActive, address(pick(g.r, colleagues)))
	subject := "Churned: " + c.Company
	body := fmt.Sprintf("%s of %s has churned.", c.Name, c.Company)
	return fmt.Sprintf("Mark customer %s of %s as churned in the CRM and email their account owner with subject %q and body %q.",
			c.Name, c.Company, subject, body), []Call{
			call(ToolCustomerSearch, map[string]any{"query": c.Name}),
			call(ToolCustomerUpdate, map[string]any{"customer_id": c.ID, "status": StatusChurned}),
			call(ToolEmailSend, map[string]any{"to": c.Owner, "subject": subject, "body": body}),
		}
}

func buildCreateTask(g *gen) (string, []Call) {
	name := pick(g.r, colleagues)
	c := pick(g.r, g.w.Tables.Customers)
	title := fmt.Sprintf("%s follow-up for %s", pick(g.r, topics), c.Company)
	due := addDays(g.now.Date, 1+g.r.IntN(21))
	prio := pick(g.r, priorities)
	return fmt.Sprintf("Create a %s-priority task %q assigned to %s (%s), due %s.", prio, title, name, address(name), due), []Call{
		call(ToolTaskCreate, map[string]any{"title": title, "assignee": address(name), "due": due, "priority": prio}),
	}
}

func buildDeleteEventsOnDate(g *gen) (string, []Call) {
	date := addDays(g.now.Date, 1+g.r.IntN(9))
	for i := 0; i < 2; i++ {
		g.event(eventSpec{title: pick(g.r, eventTitles), date: date, start: slot(g.r),
			minutes: 30, attendees: []string{address(pick(g.r, colleagues))}, location: pick(g.r, rooms)})
	}
	var on []Event
	for _, e := range g.w.Tables.Events {
		if e.Date == date {
			on = append(on, e)
		}
	}
	sortEvents(on)
	plan := []Call{call(ToolCalendarSearch, map[string]any{"date": date})}
	for _, e := range on {
		plan = append(plan, call(ToolCalendarDeleteEvent, map[string]any{"event_id": e.ID}))
	}
	return fmt.Sprintf("Delete all calendar events on %s.", date), plan
}

func buildForwardEmail(g *gen) (string, []Call) {
	c := pick(g.r, g.w.Tables.Customers)
	subject := fmt.Sprintf("%s request from %s #%d", pick(g.r, topics), c.Company, 100+g.r.IntN(900))
	e := g.inbox(c.Email, subject, pick(g.r, bodies), 1+g.r.IntN(2000))
	name := pick(g.r, colleagues)
	return fmt.Sprintf("Forward the email with subject %q to %s (%s).", subject, name, address(name)), []Call{
		call(ToolEmailSearch, map[string]any{"query": subject}),
		call(ToolEmailForward, map[string]any{"email_id": e.ID, "to": address(name)}),
	}
}

func buildCompleteOverdue(g *gen) (string, []Call) {
	name := pick(g.r, colleagues)
	addr := address(name)
	g.task(pick(g.r, taskTitle), addr, addDays(g.now.Date, -1-g.r.IntN(5)), TaskTodo)
	g.task(pick(g.r, taskTitle), addr, addDays(g.now.Date, -1-g.r.IntN(5)), TaskInProgress)
	var open []ProjectTask
	for _, t := range g.w.Tables.Tasks {
		if t.Assignee == addr && t.Due < g.now.Date && t.Status != TaskDone {
			open = append(open, t)
		}
	}
	sort.SliceStable(open, func(i, j int) bool {
		if open[i].Due != open[j].Due {
			return open[i].Due < open[j].Due
		}
		return open[i].ID < open[j].ID
	})
	plan := []Call{call(ToolTaskSearch, map[string]any{"assignee": addr, "due_before": g.now.Date})}
	for _, t := range open {
		plan = append(plan, call(ToolTaskComplete, map[string]any{"task_id": t.ID}))
	}
	return fmt.Sprintf("Mark every open task assigned to %s (%s) that is due before %s as done.", name, addr, g.now.Date), plan
}

func buildAnalyticsReport(g *gen) (string, []Call) {
	metric := pick(g.r, metrics)
	days := 3 + g.r.IntN(12)
	end := addDays(g.now.Date, -1-g.r.IntN(7))
	start := addDays(end, -(days - 1))
	name := pick(g.r, colleagues)
	s := summarize(&g.w, metric, start, end)
	subject := fmt.Sprintf("Total %s %s to %s", metric, start, end)
	return fmt.Sprintf("Email %s (%s) the total %s from %s to %s (inclusive), with subject %q and body \"Total %s from %s to %s: <total>.\"",
			name, address(name), metric, start, end, subject, metric, start, end), []Call{
			call(ToolAnalyticsSummary, map[string]any{"metric": metric, "start_date": start, "end_date": end}),
			call(ToolEmailSend, map[string]any{"to": address(name), "subject": subject,
				"body": fmt.Sprintf("Total %s from %s to %s: %d.", metric, start, end, s.Total)}),
		}
}

func buildReassignCustomers(g *gen) (string, []Call) {
	from := pick(g.r, colleagues)
	to := pick(g.r, colleagues)
	for to == from {
		to = pick(g.r, colleagues)
	}
	g.customer(StatusActive, address(from))
	plan := []Call{call(ToolCustomerSearch, map[string]any{"owner": address(from), "status": StatusActive})}
	for _, c := range g.w.Tables.Customers {
		if c.Owner == address(from) && c.Status == StatusActive {
			plan = append(plan, call(ToolCustomerUpdate, map[string]any{"customer_id": c.ID, "owner": address(to)}))
		}
	}
	return fmt.Sprintf("Reassign all active customers owned by %s (%s) to %s (%s).", from, address(from), to, address(to)), plan
}

func buildDeleteEmailsFrom(g *gen) (string, []Call) {
	c := pick(g.r, g.w.Tables.Customers)
	for i := 0; i < 1+g.r.IntN(2); i++ {
		g.inbox(c.Email, pick(g.r, subjects), pick(g.r, bodies), 1+g.r.IntN(5000))
	}
	var from []Email
	for _, e := range g.w.Tables.Emails {
		if e.Folder == FolderInbox && e.From == c.Email {
			from = append(from, e)
		}
	}
	sortEmailsNewestFirst(from)
	plan := []Call{call(ToolEmailSearch, map[string]any{"from": c.Email, "folder": FolderInbox, "limit": 100})}
	for _, e := range from {
		plan = append(plan, call(ToolEmailDelete, map[string]any{"email_id": e.ID}))
	}
	return fmt.Sprintf("Delete every email in the inbox from %s (%s).", c.Name, c.Email), plan
}

func buildScheduleMeeting(g *gen) (string, []Call) {
	c := pick(g.r, g.w.Tables.Customers)
	title := fmt.Sprintf("%s call with %s", pick(g.r, topics), c.Company)
	date := addDays(g.now.Date, 1+g.r.IntN(14))
	start := slot(g.r)
	minutes := 30 * (1 + g.r.IntN(2))
	room := pick(g.r, rooms)
	return fmt.Sprintf("Schedule a %d-minute meeting %q with %s (%s) on %s at %s in %s.", minutes, title, c.Name, c.Email, date, start, room), []Call{
		call(ToolCalendarCreateEvent, map[string]any{"title": title, "date": date, "start_time": start,
			"end_time": addMinutes(start, minutes), "attendees": []string{c.Email}, "location": room}),
	}
}

// generate derives the episode of t: background tables, the template's rows,
// the plan, and the ground truth reached by applying the plan with the same
// rules the agent's calls go through.
func generate(t Task) (episode, error) {
	r := taskRand(t)
	now := clock{Date: addDays("2026-03-02", r.IntN(60)), Time: fmt.Sprintf("%02d:%02d", 8+r.IntN(2), 15*r.IntN(4))}
	g := &gen{r: r, now: now, usedContacts: map[int]bool{}, w: world{Counters: Counters{
		Emails: firstEmailID, Events: firstEventID, Customers: firstCustomerID, Analytics: firstMetricsID, Tasks: firstTaskID,
	}}}
	g.background()
	tpls := templates()
	tpl := tpls[t.Index%len(tpls)]
	instruction, plan := tpl.Build(g)
	ep := episode{Task: t, Template: tpl.Name, Instruction: instruction, Now: now, Initial: g.w.clone(), Plan: plan}
	end := g.w.clone()
	for i, c := range plan {
		if _, err := apply(&end, now, c.Tool, c.Arguments); err != nil {
			return episode{}, fmt.Errorf("task %s: plan step %d (%s) fails: %w", t.TaskID, i, c.Tool, err)
		}
	}
	ep.Expected = end.Tables
	return ep, nil
}

// startObservation is the instruction plus the machine-readable task line.
func startObservation(ep episode) string {
	b, _ := json.Marshal(ep.Task) // plain struct
	return ep.Instruction + "\n" + TaskLinePrefix + string(b)
}

// TaskFromObservation finds the TASK line in a start observation and returns
// its JSON.
func TaskFromObservation(text string) (json.RawMessage, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), TaskLinePrefix); ok {
			rest = strings.TrimSpace(rest)
			if json.Valid([]byte(rest)) && bytes.HasPrefix([]byte(rest), []byte("{")) {
				return json.RawMessage(rest), true
			}
		}
	}
	return nil, false
}
