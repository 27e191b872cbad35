package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"
)

// Netns is a network namespace joined to this one by a veth pair: a
// process started in it (Wrap) is reachable at NsAddr only through the
// pair, so cutting the pair's link (Cut) is a true partition: packets are
// dropped, nothing is refused or reset, and connections hang until the link
// is back (Heal). The namespace has no other interface and no default
// route, and this side holds a blackhole route for the pair's subnet, so no
// packet of the test ever leaves the machine.
type Netns struct {
	Name     string
	HostIf   string // the pair's end in this namespace
	NsIf     string // the pair's end in the namespace
	HostAddr string // address of HostIf
	NsAddr   string // address of NsIf: where a process inside listens
	subnet   string
}

// netnsSeq numbers the pairs of this process, so parallel tests take
// different subnets.
var netnsSeq atomic.Uint32

// NetnsUnsupported says why this machine cannot make network namespaces
// (not root, no ip command), or is nil.
func NetnsUnsupported() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root (ip netns add); run the partition tests as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need the ip command (iproute2)")
	}
	return nil
}

// NewNetns makes a namespace and its veth pair with addresses of a /30 of
// 10.213.0.0/16 (test hosts of this machine only). Close removes all of it.
func NewNetns(ctx context.Context) (*Netns, error) {
	if err := NetnsUnsupported(); err != nil {
		return nil, err
	}
	tag := make([]byte, 3)
	if _, err := rand.Read(tag); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(tag)
	// 64 /30s per third octet; the random tag spreads processes apart.
	k := (uint32(tag[0])<<8 | uint32(tag[1]) + netnsSeq.Add(1)) % (256 * 64)
	base := fmt.Sprintf("10.213.%d.%d", k/64, (k%64)*4)
	n := &Netns{Name: "ts-" + id, HostIf: "ts" + id + "h", NsIf: "ts" + id + "n",
		HostAddr: addrPlus(base, 1), NsAddr: addrPlus(base, 2), subnet: base + "/30"}
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.NsIf},
		{"link", "set", n.NsIf, "netns", n.Name},
		{"addr", "add", n.HostAddr + "/30", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"route", "add", "blackhole", n.subnet, "metric", "4096"},
		{"netns", "exec", n.Name, "ip", "addr", "add", n.NsAddr + "/30", "dev", n.NsIf},
		{"netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "up"},
		{"netns", "exec", n.Name, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return nil, errors.Join(err, n.Close())
		}
	}
	return n, nil
}

// addrPlus is the IPv4 address base (its last octet a multiple of 4) plus d.
func addrPlus(base string, d int) string {
	i := strings.LastIndexByte(base, '.')
	var last int
	fmt.Sscan(base[i+1:], &last)
	return fmt.Sprintf("%s.%d", base[:i], last+d)
}

// ip runs the ip command with args.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Wrap returns the command that runs bin with args inside the namespace.
// ip netns exec replaces itself with bin, so the process's PID is bin's.
func (n *Netns) Wrap(bin string, args []string) (string, []string) {
	return "ip", append([]string{"netns", "exec", n.Name, bin}, args...)
}

// Cut takes the namespace's end of the pair down: a partition. Packets to
// NsAddr are dropped on this side's end (its route stays, without a
// carrier); nothing answers, nothing is refused.
func (n *Netns) Cut(ctx context.Context) error {
	return ip(ctx, "netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "down")
}

// Heal brings the namespace's end back up.
func (n *Netns) Heal(ctx context.Context) error {
	return ip(ctx, "netns", "exec", n.Name, "ip", "link", "set", n.NsIf, "up")
}

// Close removes the namespace (and with it the pair) and the blackhole
// route. Processes still running in it must be stopped first.
func (n *Netns) Close() error {
	ctx := context.Background()
	var errs []error
	if err := ip(ctx, "netns", "del", n.Name); err != nil && !strings.Contains(err.Error(), "No such file") {
		errs = append(errs, err)
	}
	// Deleting the namespace deletes the pair; a pair left by a failed set
	// up goes here.
	if err := ip(ctx, "link", "del", n.HostIf); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := ip(ctx, "route", "del", "blackhole", n.subnet, "metric", "4096"); err != nil && !strings.Contains(err.Error(), "No such process") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
