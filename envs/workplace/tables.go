package workplace

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Table names, as they appear in exported state and in verify details.
const (
	TableEmails    = "emails"
	TableEvents    = "events"
	TableCustomers = "customers"
	TableAnalytics = "analytics"
	TableTasks     = "tasks"
)

// tableNames lists the tables in their canonical order.
var tableNames = []string{TableEmails, TableEvents, TableCustomers, TableAnalytics, TableTasks}

// Enumerations of the row fields. Kept as constant tables so the tool schemas,
// the argument checks and the restore validation agree.
const (
	FolderInbox = "inbox"
	FolderSent  = "sent"

	StatusLead    = "lead"
	StatusActive  = "active"
	StatusChurned = "churned"

	TaskTodo       = "todo"
	TaskInProgress = "in_progress"
	TaskDone       = "done"

	MetricVisits  = "visits"
	MetricSignups = "signups"
	MetricRevenue = "revenue"
)

var (
	folders          = []string{FolderInbox, FolderSent}
	customerStatuses = []string{StatusLead, StatusActive, StatusChurned}
	taskStatuses     = []string{TaskTodo, TaskInProgress, TaskDone}
	priorities       = []string{"low", "medium", "high"}
	metrics          = []string{MetricVisits, MetricSignups, MetricRevenue}
)

// UserAddress is the mailbox the assistant works for: every sent email is
// from it.
const UserAddress = "alex.morgan@acme.example"

// Email is one message in the inbox or the sent folder.
type Email struct {
	ID        string `json:"id"`
	Folder    string `json:"folder"`
	From      string `json:"from"`
	To        string `json:"to"`
	Subject   string `json:"subject"`
	Body      string `json:"body"`
	Time      string `json:"time"`        // "2026-03-02T09:15"
	InReplyTo string `json:"in_reply_to"` // id of the answered email, or ""
}

// Event is one calendar entry.
type Event struct {
	ID        string   `json:"id"`
	Title     string   `json:"title"`
	Date      string   `json:"date"`  // "2026-03-02"
	Start     string   `json:"start"` // "09:00"
	End       string   `json:"end"`
	Attendees []string `json:"attendees"`
	Location  string   `json:"location"`
}

// Customer is one CRM record.
type Customer struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Company string `json:"company"`
	Email   string `json:"email"`
	Status  string `json:"status"`
	Owner   string `json:"owner"` // email address of the account owner
	Value   int64  `json:"value"` // annual contract value in dollars
	Notes   string `json:"notes"`
}

// Metrics is one day of analytics. The tools only read this table.
type Metrics struct {
	ID      string `json:"id"`
	Date    string `json:"date"`
	Visits  int64  `json:"visits"`
	Signups int64  `json:"signups"`
	Revenue int64  `json:"revenue"`
}

func (m Metrics) value(metric string) int64 {
	switch metric {
	case MetricSignups:
		return m.Signups
	case MetricRevenue:
		return m.Revenue
	default:
		return m.Visits
	}
}

// ProjectTask is one item of the project task list.
type ProjectTask struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Assignee string `json:"assignee"`
	Due      string `json:"due"`
	Status   string `json:"status"`
	Priority string `json:"priority"`
}

// Counters are the next id number of each table. They only grow, so an id is
// never reused, also across export and restore.
type Counters struct {
	Emails    int64 `json:"emails"`
	Events    int64 `json:"events"`
	Customers int64 `json:"customers"`
	Analytics int64 `json:"analytics"`
	Tasks     int64 `json:"tasks"`
}

// Tables is the whole mutable world of one session. Every slice is kept in
// ascending id order, so its JSON is canonical.
type Tables struct {
	Emails    []Email       `json:"emails"`
	Events    []Event       `json:"events"`
	Customers []Customer    `json:"customers"`
	Analytics []Metrics     `json:"analytics"`
	Tasks     []ProjectTask `json:"tasks"`
}

// world is tables plus the counters that name new rows.
type world struct {
	Tables   Tables
	Counters Counters
}

// idString renders an id number as the 8-digit string the tools use.
func idString(n int64) string { return fmt.Sprintf("%08d", n) }

// parseID returns the number of an 8-digit id, or false.
func parseID(id string) (int64, bool) {
	if len(id) != 8 {
		return 0, false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil
}

// next takes the next id from counter c.
func next(c *int64) string {
	id := idString(*c)
	*c++
	return id
}

// clone deep-copies the world so a failed operation can be discarded whole.
func (w world) clone() world {
	out := world{Counters: w.Counters}
	out.Tables.Emails = append([]Email{}, w.Tables.Emails...)
	out.Tables.Events = make([]Event, len(w.Tables.Events))
	for i, e := range w.Tables.Events {
		e.Attendees = append([]string{}, e.Attendees...)
		out.Tables.Events[i] = e
	}
	out.Tables.Customers = append([]Customer{}, w.Tables.Customers...)
	out.Tables.Analytics = append([]Metrics{}, w.Tables.Analytics...)
	out.Tables.Tasks = append([]ProjectTask{}, w.Tables.Tasks...)
	return out
}

// tableJSON returns the canonical JSON of each table by name.
func (t Tables) tableJSON() (map[string][]byte, error) {
	parts := map[string]any{
		TableEmails:    t.Emails,
		TableEvents:    t.Events,
		TableCustomers: t.Customers,
		TableAnalytics: t.Analytics,
		TableTasks:     t.Tasks,
	}
	out := make(map[string][]byte, len(parts))
	for _, name := range tableNames {
		b, err := json.Marshal(parts[name])
		if err != nil {
			return nil, fmt.Errorf("encode table %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
