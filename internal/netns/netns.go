// Package netns makes network namespaces joined to this one by a veth pair,
// for tests of true network partitions: a process started in a namespace is
// reachable only through the pair, and taking the pair's link down drops
// its packets (nothing is refused or reset) until the link is back.
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The names and addresses this package uses: namespaces named
// "ts-<pid>-<slot>" (the pid of the process that made them, the slot its
// /30 of Subnet), interfaces "tsn<slot>h" here and "tsn<slot>n" inside.
const (
	namePrefix = "ts-"
	// Subnet is where the pairs' addresses come from: 10.213.0.0/16, 16,384
	// /30s, on this machine only (each namespace has no other interface and
	// no default route, and this side holds a blackhole route for its /30,
	// so no packet of a test leaves the machine).
	Subnet = "10.213.0.0/16"
	slots  = 1 << 14
	// tries is how many slots New tries when others are taken.
	tries = 16
)

// Netns is a namespace and its veth pair. Cut takes the link down (a
// partition), Heal brings it back, Close removes it all.
type Netns struct {
	Name     string
	HostIf   string // the pair's end in this namespace
	NsIf     string // the pair's end in the namespace
	HostAddr string // address of HostIf
	NsAddr   string // address of NsIf: where a process inside listens
	slot     int
}

// Unsupported says why this machine cannot make network namespaces (not
// root, no ip command), or is nil.
func Unsupported() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root (ip netns add); run the partition tests as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need the ip command (iproute2)")
	}
	return nil
}

// New makes a namespace and its veth pair on a free /30 of Subnet, first
// removing what a process that no longer runs left behind (Sweep). Slots
// taken by live processes are skipped, so parallel tests (of this process
// or others) never share one.
func New(ctx context.Context) (*Netns, error) {
	if err := Unsupported(); err != nil {
		return nil, err
	}
	if err := Sweep(ctx); err != nil {
		return nil, fmt.Errorf("sweep leftover namespaces: %w", err)
	}
	start := int(time.Now().UnixNano()/1000+int64(os.Getpid())*7919) % slots
	var errs []error
	for i := range tries {
		n := at((start + i*977) % slots)
		err := n.create(ctx)
		if err == nil {
			return n, nil
		}
		errs = append(errs, err)
		if !taken(err) {
			break
		}
	}
	return nil, fmt.Errorf("make a network namespace: %w", errors.Join(errs...))
}

// at is the namespace of this process at slot.
func at(slot int) *Netns {
	base := slotBase(slot)
	return &Netns{
		Name:   fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), slot),
		HostIf: fmt.Sprintf("tsn%dh", slot), NsIf: fmt.Sprintf("tsn%dn", slot),
		HostAddr: addrPlus(base, 1), NsAddr: addrPlus(base, 2), slot: slot,
	}
}

// slotBase is the first address of slot's /30.
func slotBase(slot int) [4]int {
	return [4]int{10, 213, slot / 64, (slot % 64) * 4}
}

func addrPlus(b [4]int, d int) string { return fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3]+d) }

// subnet is the slot's /30.
func subnetOf(slot int) string { return addrPlus(slotBase(slot), 0) + "/30" }

// taken says whether err is a slot already in use (a name, link or route
// that exists).
func taken(err error) bool {
	return strings.Contains(err.Error(), "File exists") || strings.Contains(err.Error(), "already exists")
}

// create makes n; on failure it removes what it made.
func (n *Netns) create(ctx context.Context) error {
	// The route first: it claims the slot (a second claimant gets "File
	// exists" before touching anything).
	if err := ip(ctx, "route", "add", "blackhole", subnetOf(n.slot), "metric", "4096"); err != nil {
		return err
	}
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.NsIf},
		{"link", "set", n.NsIf, "netns", n.Name},
		{"addr", "add", n.HostAddr + "/30", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"netns", "exec", n.Name, "ip", "addr", "add", n.NsAddr + "/30", "dev", n.NsIf},
		{"netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "up"},
		{"netns", "exec", n.Name, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return errors.Join(err, n.Close())
		}
	}
	return nil
}

// ip runs the ip command with args.
func ip(ctx context.Context, args ...string) error {
	_, err := ipOut(ctx, args...)
	return err
}

func ipOut(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Wrap returns the command that runs bin with args inside the namespace.
// ip netns exec replaces itself with bin, so the process's PID is bin's.
func (n *Netns) Wrap(bin string, args []string) (string, []string) {
	return "ip", append([]string{"netns", "exec", n.Name, bin}, args...)
}

// Cut takes the namespace's end of the pair down: a partition. Packets to
// NsAddr are dropped (this side's route stays, without a carrier); nothing
// answers, nothing is refused.
func (n *Netns) Cut(ctx context.Context) error {
	return ip(ctx, "netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "down")
}

// Heal brings the namespace's end back up.
func (n *Netns) Heal(ctx context.Context) error {
	return ip(ctx, "netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "up")
}

// Close removes the namespace (and with it the pair) and the blackhole
// route; what is already gone is no error. Processes still running in it
// should be stopped first.
func (n *Netns) Close() error {
	return remove(context.Background(), n.Name, n.slot)
}

// remove deletes the namespace name, slot's pair and slot's route.
func remove(ctx context.Context, name string, slot int) error {
	var errs []error
	if err := ip(ctx, "netns", "del", name); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	// Deleting the namespace deletes the pair; a pair a failed set up left
	// in this namespace goes here.
	if err := ip(ctx, "link", "del", at(slot).HostIf); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := ip(ctx, "route", "del", "blackhole", subnetOf(slot), "metric", "4096"); err != nil && !strings.Contains(err.Error(), "No such process") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Sweep removes the namespaces, pairs and routes this package made for a
// process that no longer runs (a test run killed before its clean-up).
// Those of live processes stay.
func Sweep(ctx context.Context) error {
	out, err := ipOut(ctx, "netns", "list")
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, slot, ok := parseName(name)
		if !ok || alive(pid) {
			continue
		}
		errs = append(errs, remove(ctx, name, slot))
	}
	return errors.Join(errs...)
}

// parseName reads the pid and slot of a namespace name this package made.
func parseName(name string) (pid, slot int, ok bool) {
	rest, found := strings.CutPrefix(name, namePrefix)
	if !found {
		return 0, 0, false
	}
	p, s, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(p)
	slot, err2 := strconv.Atoi(s)
	if err1 != nil || err2 != nil || pid <= 0 || slot < 0 || slot >= slots {
		return 0, 0, false
	}
	return pid, slot, true
}

// alive says whether process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
