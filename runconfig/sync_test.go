package runconfig

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/transforms/policy/weightsync"
)

const demoRun = "run: {dir: r}\ndata: {demo: true}\n"

// policy.sync and policy.max_staleness: defaults, the endpoints implied by
// the policy endpoint, and every refusal naming its field.
func TestSyncConfig(t *testing.T) {
	c, err := Parse([]byte(demoRun), "t.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if !c.InProcessPolicy() || c.Policy.Sync.Pushes() || c.Staleness() != 0 || c.SyncEndpoints() != nil {
		t.Errorf("defaults: in-process %v, pushes %v, staleness %d, endpoints %v", c.InProcessPolicy(), c.Policy.Sync.Pushes(), c.Staleness(), c.SyncEndpoints())
	}
	// The defaults write nothing new into a run's YAML: runs recorded
	// before these fields existed continue without a reconfiguration.
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sync", "max_staleness", "async"} {
		if strings.Contains(string(y), k+":") {
			t.Errorf("the default configuration's YAML holds %s:\n%s", k, y)
		}
	}
	for _, tc := range []struct {
		yaml      string
		endpoints []string
		staleness int64
	}{
		{demoRun + "policy: {endpoint: 'grpc://10.0.0.5:7070?token_env=T', sync: {kind: aipo}}\n", []string{"grpc://10.0.0.5:7070?token_env=T"}, 0},
		{demoRun + "policy: {endpoint: 'http://10.0.0.5:30000/v1?model=m&token_file=/k', sync: {kind: sglang}}\n", []string{"http://10.0.0.5:30000?token_file=%2Fk"}, 0},
		{demoRun + "policy: {endpoint: 'http://lb:8000/v1', sync: {kind: vllm, endpoints: ['http://a:8000', 'http://b:8000']}}\n", []string{"http://a:8000", "http://b:8000"}, 0},
		{demoRun + "policy: {endpoint: 'http://lb:8000/v1', sync: {kind: aipo, endpoints: ['grpc://a:7070']}}\n", []string{"grpc://a:7070"}, 0},
		{"run: {dir: r, async: true}\ndata: {demo: true}\n", nil, 1},
		{"run: {dir: r, async: true}\ndata: {demo: true}\npolicy: {max_staleness: 3}\n", nil, 3},
		{demoRun + "policy: {max_staleness: 2}\n", nil, 2},
		{demoRun + "policy: {endpoint: 'inproc://', sync: {kind: none}}\n", nil, 0},
	} {
		c, err := Parse([]byte(tc.yaml), "t.yaml", "")
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if got := c.SyncEndpoints(); !reflect.DeepEqual(got, tc.endpoints) {
			t.Errorf("%q: sync endpoints %v, want %v", tc.yaml, got, tc.endpoints)
		}
		if c.Staleness() != tc.staleness {
			t.Errorf("%q: staleness %d, want %d", tc.yaml, c.Staleness(), tc.staleness)
		}
		if c.Policy.Sync.TimeoutOrDefault() != DefaultSyncTimeout {
			t.Errorf("%q: sync timeout %v", tc.yaml, c.Policy.Sync.TimeoutOrDefault())
		}
	}
	c, err = Parse([]byte(demoRun+"policy: {endpoint: 'grpc://a:1', sync: {kind: aipo, timeout: 3s}}\n"), "t.yaml", "")
	if err != nil || c.Policy.Sync.TimeoutOrDefault() != 3*time.Second {
		t.Errorf("sync timeout 3s: %v %v", c.Policy.Sync.TimeoutOrDefault(), err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{demoRun + "policy: {sync: {kind: aipo}}\n", "policy.sync.kind: aipo pushes checkpoints to policy servers, but policy.endpoint is aipo train's own engine"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: triton}}\n", "policy.sync.kind: \"triton\" is unknown: use none (the default: nobody is told), aipo (aipo serve's Reload RPC), sglang ("},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {endpoints: ['grpc://a:1']}}\n", "policy.sync.endpoints: are set but policy.sync.kind is none: name the servers' reload protocol, aipo (aipo serve's Reload RPC), sglang ("},
		{demoRun + "policy: {endpoint: 'http://a:1/v1', sync: {kind: vllm, load_format: auto}}\n", "policy.sync.load_format: is the load_format of sglang servers, but policy.sync.kind is vllm"},
		{demoRun + "policy: {endpoint: 'http://a:1/v1', sync: {kind: sglang, endpoints: ['grpc://a:2']}}\n", "policy.sync.endpoints[0]: \"grpc://a:2\": sglang servers are reached by http or https, not grpc"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: vllm}}\n", "policy.sync.endpoints: are needed: policy.endpoint grpc://a:1 does not say where vllm's control address is; list every replica, such as http://10.0.0.5:8000"},
		{demoRun + "policy: {endpoint: 'http://a:1/v1', sync: {kind: aipo}}\n", "policy.sync.endpoints: are needed"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: sglang}}\n", "policy.sync.endpoints: are needed"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: aipo, endpoints: ['http://a:2']}}\n", "policy.sync.endpoints[0]: \"http://a:2\": aipo servers are reached by grpc or grpcs"},
		{demoRun + "policy: {endpoint: 'http://a:1', sync: {kind: vllm, endpoints: ['a:2']}}\n", "policy.sync.endpoints[0]"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: aipo, timeout: -1s}}\n", "policy.sync.timeout"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: aipo, load_format: auto}}\n", "policy.sync.load_format: is the load_format of sglang servers, but policy.sync.kind is aipo"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {checkpoint_dir: /x}}\n", "policy.sync.checkpoint_dir"},
		{demoRun + "policy: {endpoint: 'grpc://a:1', sync: {kind: aipo, timeot: 1s}}\n", "policy.sync.timeot is not a field (did you mean policy.sync.timeout?)"},
		{demoRun + "policy: {max_staleness: -1}\n", "policy.max_staleness: -1 must not be negative"},
		{"run: {dir: r, async: true}\ndata: {demo: true}\npolicy: {max_staleness: 0}\n", "policy.max_staleness: is 0, but run.async"},
	} {
		_, err := Parse([]byte(tc.yaml), "t.yaml", "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}

// The reference in doc.go names every registered kind of policy.sync.
func TestSyncKindsDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^//\tpolicy\.sync\.kind\s.*$`).Find(doc)
	if line == nil {
		t.Fatal("doc.go has no policy.sync.kind line")
	}
	for _, k := range weightsync.Names(nil) {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(k) + `\b`).Match(line) {
			t.Errorf("doc.go's %q does not name kind %s", line, k)
		}
	}
}
