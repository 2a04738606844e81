package weightsync

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Kind is one kind of policy server a Group pushes checkpoints to, as
// policy.sync.kind names it. Each kind registers itself (Register) beside
// its client; validation (runconfig), the training loop, the seeding of
// checkpoint 0 and the table of docs/operators.md (DocTable) read what
// its registration says, and nothing else tells the kinds apart.
type Kind struct {
	// Name is policy.sync.kind's value; a kind that is one server's
	// protocol takes the server's name from package servers.
	Name string
	// Protocol says in a few words how a server is told, for messages
	// ("aipo serve's Reload RPC").
	Protocol string
	// Schemes are the URI schemes of the servers' control addresses
	// (policy.sync.endpoints), the first the usual one; a policy endpoint
	// of one of them implies the control address (runconfig's
	// SyncEndpoints). None for a kind that tells no server.
	Schemes []string
	// Example is a control address, for messages and docs.
	Example string
	// Sends and Checks describe a push in docs/operators.md (Markdown):
	// what is sent, and what is checked before sampling resumes.
	Sends, Checks string
	// LoadFormat: the servers take policy.sync.load_format.
	LoadFormat bool
	// NamesVersions: the servers always name the version they serve, in
	// their answers and to Group.Stale. Otherwise each replica says after
	// a push (Versioned), one that does not counts as naming none, and a
	// rollout's endpoint then carries the pushed version
	// (policy_version=N).
	NamesVersions bool
	// TiedHead: the checkpoints of a run that pushes to these servers
	// carry lm_head.weight beside a tied embedding, which their reload
	// leaves on its old values otherwise
	// (checkpoint.Checkpoint.WriteTiedHead).
	TiedHead bool
	// Open connects to the replica at endpoint; nothing is sent yet.
	// o.Timeout is set. Nil for a kind that tells no server.
	Open func(ctx context.Context, endpoint string, o Options) (Replica, error)
}

// Pushes reports whether the kind tells servers of new checkpoints.
func (k Kind) Pushes() bool { return k.Open != nil }

// KindNone is the default kind (an empty policy.sync.kind names it too):
// it tells no server of new checkpoints.
const KindNone = "none"

func init() {
	Register(Kind{
		Name:     KindNone,
		Protocol: "the default: nobody is told",
		Sends:    "nothing: the servers must load the checkpoints by themselves (`aipo serve --watch RUN` polls the run)",
		Checks:   "nothing; the learner's version check refuses what they sample late",
	})
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register makes k available to policy.sync.kind under k.Name. It panics
// when the name is empty or taken, or a kind that pushes names no scheme
// or example address (programming errors).
func Register(k Kind) {
	if k.Name == "" || k.Protocol == "" {
		panic(fmt.Sprintf("weightsync.Register(%q): a kind needs a name and a protocol", k.Name))
	}
	if k.Pushes() && (len(k.Schemes) == 0 || k.Example == "") {
		panic(fmt.Sprintf("weightsync.Register(%q): a kind that pushes needs its endpoint schemes and an example endpoint", k.Name))
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[k.Name]; dup {
		panic("weightsync: kind registered twice: " + k.Name)
	}
	kinds[k.Name] = k
}

// Lookup is the kind called name (KindNone for ""); for a name nobody
// registered the error lists the kinds that are.
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = KindNone
	}
	kindsMu.RLock()
	k, ok := kinds[name]
	kindsMu.RUnlock()
	if !ok {
		return Kind{}, fmt.Errorf("%q is unknown: use %s", name, Choices(nil))
	}
	return k, nil
}

// Kinds are the registered kinds: KindNone first, then by name.
func Kinds() []Kind {
	kindsMu.RLock()
	out := make([]Kind, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k)
	}
	kindsMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Name == KindNone) != (out[j].Name == KindNone) {
			return out[i].Name == KindNone
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Names are the names of the registered kinds that keep (nil: all) keeps,
// in the order of Kinds.
func Names(keep func(Kind) bool) []string {
	var out []string
	for _, k := range Kinds() {
		if keep == nil || keep(k) {
			out = append(out, k.Name)
		}
	}
	return out
}

// Choices lists the kinds that keep (nil: all) keeps for a message, each
// with its protocol: "none (...), aipo (...) or vllm (...)".
func Choices(keep func(Kind) bool) string {
	var s []string
	for _, k := range Kinds() {
		if keep == nil || keep(k) {
			s = append(s, k.Name+" ("+k.Protocol+")")
		}
	}
	return orList(s)
}

// orList joins "a", "b" and "c" as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// DocTable is the table of kinds in docs/operators.md, in Markdown.
func DocTable() string {
	var b strings.Builder
	b.WriteString("| kind | control address (`policy.sync.endpoints`) | what is sent | what is checked before sampling resumes |\n|---|---|---|---|\n")
	for _, k := range Kinds() {
		addr := "none"
		if k.Pushes() {
			schemes := make([]string, len(k.Schemes))
			for i, s := range k.Schemes {
				schemes[i] = "`" + s + "://`"
			}
			addr = fmt.Sprintf("%s, such as `%s`", orList(schemes), k.Example)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Name, addr, k.Sends, k.Checks)
	}
	return b.String()
}
