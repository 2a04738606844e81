package interact

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aipo-rl/aipo/internal/sampling"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/collab/guard"
	"github.com/aipo-rl/aipo/transforms/policy"
)

// Protocol runs trajectories against one policy client and one set of
// collaborators. It is safe for concurrent use: many trajectories may run
// at once.
type Protocol struct {
	client policy.Client
	agents collab.Set
	cfg    Config
	info   policy.Info

	resultOpen, resultClose []int32 // wrappers, special parsing on
	tagIDs                  map[int32]string
	stopStrings             []string
	stopIDs                 []int32
	guard                   *guard.Guard
}

// New prepares the protocol: it validates cfg, asks the client for its
// model's description and encodes the wrappers and tags once. A tag that
// the tokenizer holds as a single token (encoded with special parsing on)
// becomes a stop token as well as a stop string.
func New(ctx context.Context, client policy.Client, agents collab.Set, cfg Config) (*Protocol, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	info, err := client.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("interact: policy info: %w", err)
	}
	p := &Protocol{client: client, agents: agents, cfg: cfg, info: info, tagIDs: map[int32]string{}}
	if p.resultOpen, err = client.Tokenize(ctx, ResultOpen, true); err != nil {
		return nil, fmt.Errorf("interact: tokenize %s: %w", ResultOpen, err)
	}
	if p.resultClose, err = client.Tokenize(ctx, ResultClose, true); err != nil {
		return nil, fmt.Errorf("interact: tokenize %s: %w", ResultClose, err)
	}
	if len(p.resultOpen) == 0 || len(p.resultClose) == 0 {
		return nil, fmt.Errorf("interact: the policy's tokenizer encodes %s or %s as no tokens", ResultOpen, ResultClose)
	}
	for _, tag := range AllTags() {
		ids, err := client.Tokenize(ctx, tag, true)
		if err != nil {
			return nil, fmt.Errorf("interact: tokenize %s: %w", tag, err)
		}
		if len(ids) == 1 {
			p.tagIDs[ids[0]] = tag
		}
	}
	for _, t := range Tags {
		if cfg.OpenerBy == OpenerSystem {
			p.stopStrings = append(p.stopStrings, t.Close)
			ids, _ := client.Tokenize(ctx, t.Close, true)
			if len(ids) == 1 {
				p.stopIDs = append(p.stopIDs, ids[0])
			}
		} else {
			// Only the exact pair is a call; a lone <result> (the policy's
			// own answer) or a closing tag followed by anything else is not.
			p.stopStrings = append(p.stopStrings, t.Close+ResultOpen)
		}
	}
	p.stopStrings = append(p.stopStrings, cfg.StopStrings...)
	p.guard = guard.New(guard.Policy{
		Timeout:        cfg.PolicyTimeout,
		Retries:        cfg.PolicyRetries,
		BackoffInitial: cfg.PolicyBackoffInitial,
		BackoffMax:     cfg.PolicyBackoffMax,
	}, nil, nil)
	return p, nil
}

// Info is the description of the policy the protocol was prepared with.
func (p *Protocol) Info() policy.Info { return p.info }

// Config is the protocol's configuration.
func (p *Protocol) Config() Config { return p.cfg }

// Task is one trajectory to run.
type Task struct {
	Run        string
	Step       int64
	RunSeed    uint64
	PromptID   string
	Sample     int
	DataSource string
	// Prompt is the prompt's token ids (system prompt and chat template
	// included).
	Prompt []int32
	// Problem is the prompt's problem text, sent to agents whose context
	// setting includes it (collab.RoleConfig.Context).
	Problem string
	// Carry, when set, is asked at each interruption (a policy call the
	// server stopped at a weight push, finish reason abort) whether the
	// sample stops there to be carried into the next step
	// (rollout.carry): Run then returns its state in Outcome.Carried
	// instead of continuing it.
	Carry func() bool
	// Closed, when set, reports whether the step's batch has closed
	// (rollout.carry): a sample between two policy calls (back from a
	// collaborator call) then stops before its next call, as an
	// interrupted one does.
	Closed func() bool
	// Resume, when set, is the state of a carried sample: Run continues
	// it exactly where it stopped (the same seeds, from its next call,
	// with its tokens, log-probs, versions and interactions so far).
	// Step, PromptID and Sample must be those it started with.
	Resume *Resume
}

// Resume is the state of a sample stopped at an interruption under
// rollout.carry: everything Run needs to continue it exactly.
type Resume struct {
	// Turn is the index of its next policy call (the seeds go on from it).
	Turn int `json:"turn"`
	// Trajectory holds the columns filled so far: the interactions, the
	// oldest policy version and the response so far (ResponseIDs,
	// TokenSource, BehaviorLogProbs and TokenPolicyVersion, every token
	// sampled or inserted before the interruption).
	Trajectory schemas.Trajectory `json:"trajectory"`
	// Current is the version the sample was on (that of its last call).
	Current    int64  `json:"current"`
	SegStart   int    `json:"seg_start"`
	SoFar      string `json:"so_far"`
	VersionSet bool   `json:"version_set"`
	Sampled    int    `json:"sampled"`
	Moved      bool   `json:"moved"`
	// PolicyCalls, PolicyRetries and Interrupted are its counts so far.
	PolicyCalls   int `json:"policy_calls"`
	PolicyRetries int `json:"policy_retries"`
	Interrupted   int `json:"interrupted"`
}

// finishCarried is turn's finish reason for a sample that stops at an
// interruption to be carried into the next step; it never reaches a
// trajectory.
const finishCarried = "\x00carried"

// Session is the engine session name of the trajectory.
func (t Task) Session() string {
	return t.Run + "/" + strconv.FormatInt(t.Step, 10) + "/" + t.PromptID + "/" + strconv.Itoa(t.Sample)
}

// Outcome is a finished trajectory and what it cost.
type Outcome struct {
	// Trajectory has every column filled except Reward, Correct and
	// Advantage.
	Trajectory schemas.Trajectory
	// PolicyCalls counts Generate calls that succeeded; PolicyRetries the
	// failed attempts that were repeated.
	PolicyCalls, PolicyRetries int
	// Interrupted counts policy calls the server stopped at a weight push
	// (finish reason abort) and the trajectory continued on new weights.
	Interrupted int
	// Err is why the trajectory ended with finish reason "error".
	Err error
	// Carried, when set, is the state of a sample stopped at an
	// interruption under Task.Carry: Trajectory is not filled, and the
	// counts above are in it as well.
	Carried *Resume
}

// policySeedDomain separates policy seeds from collaborator seeds derived
// from the same coordinates.
const policySeedDomain = 0x706f6c6963790000

// PolicySeed is the sampling seed of one policy call (turn counts the
// trajectory's Generate calls from 0). It is never negative.
func PolicySeed(runSeed uint64, step int64, promptID string, sample, turn int) int64 {
	return int64(collab.DeriveSeed(runSeed^policySeedDomain, step, promptID, sample, turn) >> 1)
}

// response accumulates response tokens with their provenance.
type response struct {
	ids []int32
	src []int8
	lp  []float32
	ver []int64
	// cur is the policy version the sample is on: the version of the last
	// policy call's weights (before the first, the policy's at the start).
	// Every token appended gets it.
	cur int64
}

func (r *response) add(ids []int32, src int8, lps []float32) {
	r.ids = append(r.ids, ids...)
	for i := range ids {
		r.src = append(r.src, src)
		r.ver = append(r.ver, r.cur)
		if lps != nil {
			r.lp = append(r.lp, lps[i])
		} else {
			r.lp = append(r.lp, 0)
		}
	}
}

// Run samples one trajectory. The error is non-nil only when ctx ends;
// every other failure is recorded in the outcome.
func (p *Protocol) Run(ctx context.Context, task Task) (Outcome, error) {
	t := &trajectoryRun{task: task, session: task.Session(), tr: p.newTrajectory(task), budget: p.responseBudget(task)}
	t.resp.cur = p.info.PolicyVersion
	if p.cfg.Split.Pin {
		t.resp.cur, t.tr.PolicyVersion = p.cfg.Split.First, p.cfg.Split.First
	}
	defer p.client.Release(context.WithoutCancel(ctx), t.session)

	finish := ""
	if t.budget < 1 {
		finish = schemas.FinishError
		t.out.Err = fmt.Errorf("prompt %s has %d tokens, which leaves no room in the policy's context of %d", task.PromptID, len(task.Prompt), p.info.MaxContext)
	}
	turn := 0
	if r := task.Resume; r != nil {
		turn = t.restore(r)
	}
	for first := turn; finish == ""; turn++ {
		if turn > first && task.Closed != nil && task.Closed() {
			t.out.Carried = t.save(turn)
			return t.out, nil
		}
		var err error
		if finish, err = p.turn(ctx, t, turn); err != nil {
			return Outcome{}, err
		}
		if finish == finishCarried {
			t.out.Carried = t.save(turn + 1)
			return t.out, nil
		}
	}
	if err := p.complete(ctx, t, finish); err != nil {
		return Outcome{}, err
	}
	t.out.Trajectory = t.tr
	return t.out, nil
}

// trajectoryRun is one trajectory in progress.
type trajectoryRun struct {
	task    Task
	session string
	tr      schemas.Trajectory
	resp    response
	out     Outcome
	// budget bounds the response tokens: the configuration's limit, or the
	// room the prompt leaves in the policy's context if that is less.
	budget int
	// segStart is the first response token the policy wrote since the last
	// insertion.
	segStart int
	// sofar is the response's text before segStart (the policy's segments
	// and the inserted answers), for the agents' interaction context.
	sofar strings.Builder
	// versionSet reports whether a policy call has set tr.PolicyVersion.
	versionSet bool
	// sampled counts the policy tokens so far, and moved reports whether
	// the calls have moved to Config.Split.Next.
	sampled int
	moved   bool
}

// save is the state of t, whose next policy call is turn.
func (t *trajectoryRun) save(turn int) *Resume {
	tr := t.tr
	tr.ResponseIDs, tr.TokenSource, tr.BehaviorLogProbs, tr.TokenPolicyVersion = t.resp.ids, t.resp.src, t.resp.lp, t.resp.ver
	return &Resume{
		Turn: turn, Trajectory: tr, Current: t.resp.cur,
		SegStart: t.segStart, SoFar: t.sofar.String(), VersionSet: t.versionSet, Sampled: t.sampled, Moved: t.moved,
		PolicyCalls: t.out.PolicyCalls, PolicyRetries: t.out.PolicyRetries, Interrupted: t.out.Interrupted,
	}
}

// restore sets t to the saved state r and returns the index of its next
// policy call.
func (t *trajectoryRun) restore(r *Resume) int {
	t.tr = r.Trajectory
	t.resp = response{ids: t.tr.ResponseIDs, src: t.tr.TokenSource, lp: t.tr.BehaviorLogProbs, ver: t.tr.TokenPolicyVersion, cur: r.Current}
	// The response's columns are filled from t.resp when the sample ends.
	t.tr.ResponseIDs, t.tr.TokenSource, t.tr.BehaviorLogProbs, t.tr.TokenPolicyVersion = nil, nil, nil, nil
	t.segStart, t.versionSet, t.sampled, t.moved = r.SegStart, r.VersionSet, r.Sampled, r.Moved
	t.sofar.Reset()
	t.sofar.WriteString(r.SoFar)
	t.out.PolicyCalls, t.out.PolicyRetries, t.out.Interrupted = r.PolicyCalls, r.PolicyRetries, r.Interrupted
	return r.Turn
}

// newTrajectory is the record of task before its first policy call.
func (p *Protocol) newTrajectory(task Task) schemas.Trajectory {
	return schemas.Trajectory{
		SchemaVersion: schemas.SchemaVersion,
		Run:           task.Run,
		Step:          task.Step,
		PolicyVersion: p.info.PolicyVersion,
		PromptID:      task.PromptID,
		SampleIndex:   int32(task.Sample),
		DataSource:    task.DataSource,
		PromptIDs:     append([]int32(nil), task.Prompt...),
	}
}

// responseBudget is how many response tokens task may have: the
// configuration's limit, or the room its prompt leaves in the policy's
// context if that is less. It is below 1 when the prompt fills the context.
func (p *Protocol) responseBudget(task Task) int {
	budget := p.cfg.MaxResponseTokens
	if p.info.MaxContext > 0 {
		budget = min(budget, p.info.MaxContext-len(task.Prompt))
	}
	return budget
}

// turn makes one policy call (turn counts them from 0) and acts on how it
// ended. It returns the trajectory's finish reason, "" while it goes on;
// the error is non-nil only when ctx ends or an agent fails.
func (p *Protocol) turn(ctx context.Context, t *trajectoryRun, turn int) (string, error) {
	remaining := t.budget - len(t.resp.ids)
	if remaining <= 0 {
		return sampling.FinishLength, nil
	}
	prefix := make([]int32, 0, len(t.task.Prompt)+len(t.resp.ids))
	prefix = append(append(prefix, t.task.Prompt...), t.resp.ids...)
	params := p.cfg.Params
	params.MaxTokens = remaining
	params.Seed = PolicySeed(t.task.RunSeed, t.task.Step, t.task.PromptID, t.task.Sample, turn)
	params.StopTokenIDs, params.StopStrings = p.stopIDs, p.stopStrings
	req := policy.Request{Prefix: prefix, Session: t.session, Params: params}
	split := false // this call ends where the split moves the sample on
	if sp := p.cfg.Split; sp.Pin {
		req.Pinned, req.Version = true, sp.First
		if t.moved || (sp.Next != sp.First && sp.Tokens > 0 && t.sampled >= sp.Tokens) {
			t.moved, req.Version = true, sp.Next
		} else if sp.Next != sp.First && sp.Tokens > 0 && sp.Tokens-t.sampled < req.Params.MaxTokens {
			req.Params.MaxTokens, split = sp.Tokens-t.sampled, true
		}
	}
	res, retries, err := p.generate(ctx, req)
	t.out.PolicyRetries += retries
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		t.out.Err = err
		return schemas.FinishError, nil
	}
	t.out.PolicyCalls++
	// A trajectory sampled by several versions (weights swapped, or a
	// server restarted, between its calls) records the oldest: the
	// learner's staleness check then sees its worst lag.
	if !t.versionSet || res.PolicyVersion < t.tr.PolicyVersion {
		t.tr.PolicyVersion, t.versionSet = res.PolicyVersion, true
	}
	t.resp.cur = res.PolicyVersion
	t.resp.add(res.Tokens, schemas.SourcePolicy, res.LogProbs)
	t.sampled += len(res.Tokens)
	if split && res.FinishReason == sampling.FinishLength {
		// The call reached Config.Split.Tokens: the sample goes on from
		// the prompt plus its tokens, by token ids, on Split.Next.
		t.out.Interrupted++
		t.moved = true
		return "", nil
	}
	switch res.FinishReason {
	case sampling.FinishEOS:
		return sampling.FinishEOS, nil
	case sampling.FinishLength:
		return sampling.FinishLength, nil
	case sampling.FinishStop:
		return p.answerStop(ctx, t)
	case sampling.FinishAbort:
		// The server stopped the call at a weight push (partial
		// rollouts): the tokens so far stay, with the old version's
		// log-probs, and the next turn continues from the prompt plus
		// them, by token ids, on the new weights.
		t.out.Interrupted++
		if t.task.Carry != nil && t.task.Carry() {
			return finishCarried, nil // rollout.carry: the next step goes on with it
		}
		return "", nil
	default:
		t.out.Err = fmt.Errorf("policy returned finish reason %q (want %s, %s, %s or %s)", res.FinishReason, sampling.FinishEOS, sampling.FinishStop, sampling.FinishLength, sampling.FinishAbort)
		return schemas.FinishError, nil
	}
}

// answerStop acts on a policy call that ended on a stop string: a call of
// the protocol is answered (under Config.Unanswered the policy writes on,
// its result too), one of Config.StopStrings ends the trajectory. It
// returns the finish reason, "" while the trajectory goes on.
func (p *Protocol) answerStop(ctx context.Context, t *trajectoryRun) (string, error) {
	seg, err := p.client.Detokenize(ctx, t.resp.ids[t.segStart:])
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		t.out.Err = fmt.Errorf("detokenize: %w", err)
		return schemas.FinishError, nil
	}
	tag, query, ok := p.parseCall(seg)
	if !ok {
		return sampling.FinishStop, nil // one of Config.StopStrings
	}
	if p.cfg.Unanswered {
		// Nobody answers: the policy writes on, its result too.
		t.sofar.WriteString(seg)
		t.segStart = len(t.resp.ids)
		return "", nil
	}
	// The interaction context: everything before this call's opening tag.
	before := seg
	if i := strings.LastIndex(seg, tag.Open); i >= 0 {
		before = seg[:i]
	}
	calls := len(t.tr.InteractionAgent)
	inserted, err := p.interact(ctx, t.task, &t.tr, &t.resp, t.budget, tag, query, t.sofar.String()+before)
	if err != nil {
		return "", err
	}
	t.sofar.WriteString(seg)
	if len(t.tr.InteractionAgent) > calls {
		if p.cfg.OpenerBy == OpenerSystem {
			t.sofar.WriteString(ResultOpen)
		}
		t.sofar.WriteString(t.tr.InteractionResult[calls])
		t.sofar.WriteString(ResultClose)
	}
	t.segStart = len(t.resp.ids)
	if !inserted || len(t.resp.ids) >= t.budget {
		return sampling.FinishLength, nil
	}
	return "", nil
}

// complete fills the trajectory's response columns and finish reason, and
// decodes its response text; a failed decoding makes the finish reason
// "error". The error is non-nil only when ctx ends.
func (p *Protocol) complete(ctx context.Context, t *trajectoryRun, finish string) error {
	tr := &t.tr
	tr.ResponseIDs, tr.TokenSource, tr.BehaviorLogProbs, tr.TokenPolicyVersion = t.resp.ids, t.resp.src, t.resp.lp, t.resp.ver
	if tr.ResponseIDs == nil {
		tr.ResponseIDs, tr.TokenSource, tr.BehaviorLogProbs, tr.TokenPolicyVersion = []int32{}, []int8{}, []float32{}, []int64{}
	}
	// policy_version is the oldest version that sampled a policy token (a
	// call that returned no token sampled nothing).
	oldest, sampled := int64(0), false
	for i, s := range tr.TokenSource {
		if v := tr.TokenPolicyVersion[i]; s == schemas.SourcePolicy && (!sampled || v < oldest) {
			oldest, sampled = v, true
		}
	}
	if sampled {
		tr.PolicyVersion = oldest
	}
	tr.FinishReason = finish
	if len(t.resp.ids) == 0 {
		return nil
	}
	text, err := p.client.Detokenize(ctx, t.resp.ids)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if t.out.Err == nil {
			t.out.Err = fmt.Errorf("detokenize response: %w", err)
		}
		tr.FinishReason = schemas.FinishError
	}
	// A response may stop inside a multi-byte character (byte-level
	// vocabularies): the text column holds valid UTF-8, as Parquet's
	// STRING type requires; the token ids keep the exact bytes.
	tr.ResponseText = strings.ToValidUTF8(text, "\uFFFD")
	return nil
}

// generate calls the policy with retries and checks the result's shape.
func (p *Protocol) generate(ctx context.Context, req policy.Request) (policy.Result, int, error) {
	attempts := 0
	res, err := guard.Do(ctx, p.guard, func(ctx context.Context) (policy.Result, error) {
		attempts++
		r, err := p.client.Generate(ctx, req)
		if err != nil {
			return r, classifyPolicyError(err)
		}
		if len(r.Tokens) != len(r.LogProbs) {
			return r, guard.Errorf(guard.KindMalformed, "policy returned %d tokens and %d log-probs", len(r.Tokens), len(r.LogProbs))
		}
		if len(r.Tokens) > req.Params.MaxTokens {
			return r, guard.Errorf(guard.KindMalformed, "policy returned %d tokens, more than max_tokens %d", len(r.Tokens), req.Params.MaxTokens)
		}
		if len(r.Tokens) == 0 && r.FinishReason != sampling.FinishEOS && r.FinishReason != sampling.FinishAbort {
			return r, guard.Errorf(guard.KindMalformed, "policy returned no tokens with finish reason %q", r.FinishReason)
		}
		return r, nil
	})
	if err != nil {
		return policy.Result{}, max(attempts-1, 0), fmt.Errorf("policy call failed after %d attempts: %w", attempts, err)
	}
	return res, attempts - 1, nil
}

// classifyPolicyError marks errors that repeating cannot fix (requests the
// server rejects) and lets everything else be retried: a failed policy call
// costs a whole trajectory.
func classifyPolicyError(err error) error {
	e := guard.Classify(err)
	if e.Kind != guard.KindInternal {
		return e
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated,
			codes.PermissionDenied, codes.Unimplemented, codes.NotFound, codes.AlreadyExists:
			return &guard.Error{Kind: guard.KindRejected, Err: err}
		case codes.Canceled:
			return &guard.Error{Kind: guard.KindCanceled, Err: err}
		}
	}
	return &guard.Error{Kind: guard.KindUnavailable, Err: err}
}

// parseCall decides whether the policy's text since the last insertion
// (seg, decoded from its tokens) ended with a call, and returns the tag and
// the query.
//
// The decision is made on text, not on token boundaries: an engine stops
// once the decoded output contains a stop string, and the token that
// completed it stays whole in the token ids. On a real vocabulary that
// token often carries more characters after the tag (Qwen3 and Llama 3
// hold ">\n", ">.", ">," and hundreds more tokens starting with ">"), so
// seg need not end with the closing tag. The in-process engine and aipo
// serve stop this way; so do vLLM, whose text is cut at the stop string
// while the token ids keep the whole token (SamplingParams "stop": "the
// returned output will not contain the stop strings"), reporting the
// string in stop_reason (https://github.com/vllm-project/vllm/pull/2976;
// include_stop_str_in_output keeps the string in the text), and SGLang,
// which reports it in matched_stop.
// Generation stops at the first completion of any stop string and seg
// starts after the previous stop or insertion, so the stop is the
// occurrence of a stop string in seg that ends first: a call when it is a
// protocol tag (opener_by system: a closing tag; policy: a closing tag
// with <result> right after it), the end of the trajectory when it is one
// of Config.StopStrings. The characters after it stay in the policy's token; the
// answer is appended after that token.
func (p *Protocol) parseCall(seg string) (Tag, string, bool) {
	best, bestEnd := -1, len(seg)+1
	for k, t := range Tags {
		suffix := t.Close
		if p.cfg.OpenerBy == OpenerPolicy {
			suffix += ResultOpen
		}
		if i := strings.Index(seg, suffix); i >= 0 && i+len(suffix) < bestEnd {
			best, bestEnd = k, i+len(suffix)
		}
	}
	if best < 0 {
		return Tag{}, "", false
	}
	for _, s := range p.cfg.StopStrings {
		// A stop string of the configuration that ends before the tag
		// ended generation first (on a tie the tag wins, as the engines
		// check the protocol's stop strings first).
		if i := strings.Index(seg[:bestEnd], s); i >= 0 && i+len(s) < bestEnd {
			return Tag{}, "", false
		}
	}
	t := Tags[best]
	body := seg[:bestEnd-len(t.Close)]
	if p.cfg.OpenerBy == OpenerPolicy {
		body = seg[:bestEnd-len(t.Close)-len(ResultOpen)]
	}
	if i := strings.LastIndex(body, t.Open); i >= 0 {
		body = body[i+len(t.Open):]
	}
	return t, strings.TrimSpace(body), true
}

// interact answers one call: asks the agent (or answers with the limit
// notice), and appends the answer with its wrappers within the budget.
// It reports false when not even the wrappers fit: the budget then ends the
// trajectory without a call.
func (p *Protocol) interact(ctx context.Context, task Task, tr *schemas.Trajectory, resp *response, budget int, tag Tag, query, interactionContext string) (bool, error) {
	var open []int32
	if p.cfg.OpenerBy == OpenerSystem {
		open = p.resultOpen
	}
	room := budget - len(resp.ids) - len(open) - len(p.resultClose)
	if room < 0 {
		return false, nil
	}
	call := len(tr.InteractionAgent)
	status, text, src, noisy := schemas.StatusLimit, p.cfg.LimitNotice, schemas.SourceTemplate, false
	var latencyMs float32
	if p.calls(tr) < p.cfg.MaxInteractions {
		ans, err := p.agents.Answer(ctx, collab.Query{
			Agent:    tag.Agent,
			Text:     query,
			Problem:  task.Problem,
			Context:  interactionContext,
			Run:      task.Run,
			Step:     task.Step,
			PromptID: task.PromptID,
			Sample:   task.Sample,
			Call:     call,
			Seed:     collab.DeriveSeed(task.RunSeed, task.Step, task.PromptID, task.Sample, call),
		})
		if err != nil {
			return false, err
		}
		status, text, noisy = ans.Status, ans.Text, ans.Noisy
		latencyMs = float32(ans.Latency.Seconds() * 1000)
		if status == "" {
			status = schemas.StatusOK
		}
		src = tag.Agent.Source()
		if status != schemas.StatusOK {
			src = schemas.SourceTemplate // a notice: the system's words
		}
	}
	ids, text, err := p.encodeAnswer(ctx, Escape(text), min(room, p.cfg.AnswerTokenBudget))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		ids, text, status, src = nil, WithheldNotice, schemas.StatusError, schemas.SourceTemplate
		if enc, dec, err2 := p.encodeAnswer(ctx, WithheldNotice, min(room, p.cfg.AnswerTokenBudget)); err2 == nil {
			ids, text = enc, dec
		}
	}
	start := len(resp.ids)
	resp.add(open, schemas.SourceTemplate, nil)
	resp.add(ids, src, nil)
	resp.add(p.resultClose, schemas.SourceTemplate, nil)
	tr.InteractionAgent = append(tr.InteractionAgent, string(tag.Agent))
	tr.InteractionQuery = append(tr.InteractionQuery, strings.ToValidUTF8(query, "\uFFFD"))
	tr.InteractionResult = append(tr.InteractionResult, strings.ToValidUTF8(text, "\uFFFD"))
	tr.InteractionStatus = append(tr.InteractionStatus, status)
	tr.InteractionLatencyMs = append(tr.InteractionLatencyMs, latencyMs)
	tr.InteractionSpanStart = append(tr.InteractionSpanStart, int32(start))
	tr.InteractionSpanEnd = append(tr.InteractionSpanEnd, int32(len(resp.ids)))
	tr.InteractionNoisy = append(tr.InteractionNoisy, noisy)
	return true, nil
}

// calls counts the interactions of tr that reached an agent.
func (p *Protocol) calls(tr *schemas.Trajectory) int {
	n := 0
	for _, s := range tr.InteractionStatus {
		if s != schemas.StatusLimit {
			n++
		}
	}
	return n
}

// errTagInAnswer reports an encoded answer that would open or close a tag.
var errTagInAnswer = errors.New("interact: the encoded answer holds a protocol tag")

// encodeAnswer encodes escaped text with special parsing off, truncates it
// to limit tokens and checks that no token is a tag and the decoded text
// holds none. It returns the ids and their decoded text (what the policy
// sees).
func (p *Protocol) encodeAnswer(ctx context.Context, text string, limit int) ([]int32, string, error) {
	if text == "" || limit <= 0 {
		return nil, "", nil
	}
	ids, err := p.client.Tokenize(ctx, text, false)
	if err != nil {
		return nil, "", fmt.Errorf("interact: tokenize answer: %w", err)
	}
	if len(ids) > limit {
		ids = ids[:limit]
	}
	for _, id := range ids {
		if tag, ok := p.tagIDs[id]; ok {
			return nil, "", fmt.Errorf("%w: token %d is %s", errTagInAnswer, id, tag)
		}
	}
	dec, err := p.client.Detokenize(ctx, ids)
	if err != nil {
		return nil, "", fmt.Errorf("interact: detokenize answer: %w", err)
	}
	if i := FindTag(dec); i >= 0 {
		return nil, "", fmt.Errorf("%w: decoded text holds a tag at byte %d", errTagInAnswer, i)
	}
	return ids, dec, nil
}
