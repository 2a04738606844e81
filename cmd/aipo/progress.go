package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aipo-rl/aipo/records"
	"github.com/aipo-rl/aipo/tasks/demo"
	"github.com/aipo-rl/aipo/train"
)

// progress renders training events: one self-updating status line on a
// terminal, plain log lines otherwise.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	last    train.Event
	reward  string
	acc     string
	calls   string
	tokps   string
	heldout string
	lineLen int
	wsLine  time.Time // when the last warm-start line was written (not a TTY)
	// The first event of this process: the ETA is measured over the steps
	// this process ran (a resumed run's earlier steps took no time here).
	started   bool
	firstStep int64
	firstTime time.Duration
}

func newProgress(w *os.File) *progress {
	st, err := w.Stat()
	tty := err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
	p := &progress{w: w, tty: tty}
	console.setProgress(p)
	return p
}

// event is a train.Options.Progress callback.
func (p *progress) event(e train.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = e
	if !p.started {
		p.started, p.firstStep, p.firstTime = true, e.Step, e.Elapsed
	}
	if e.Learn != nil {
		p.acc, p.reward, p.calls = "", "", ""
		if st, err := records.ReadStepStats(e.Learn.Rollout); err == nil {
			if st.Scored() {
				p.acc, p.reward = num(st.Accuracy), num(st.RewardMean)
			}
			if st.Trajectories > 0 {
				p.calls = num(st.InteractionsPerTrajectory)
			}
		}
		// The reward is shown where it says something the accuracy does
		// not (a call cost, a shaped reward): every number once.
		if p.reward == p.acc {
			p.reward = ""
		}
		if e.Learn.Seconds > 0 {
			p.tokps = fmt.Sprintf("%.0f", float64(e.Learn.Tokens)/e.Learn.Seconds)
		}
		if !p.tty {
			reward := ""
			if p.reward != "" {
				reward = " reward " + p.reward
			}
			fmt.Fprintf(p.w, "step %d/%d: loss %.4f grad-norm %.3f accuracy %s%s interactions/traj %s tokens/s %s (%s, ETA %s)\n",
				e.Step+1, e.Steps, e.Learn.Loss, e.Learn.GradNorm, dash(p.acc), reward, dash(p.calls), dash(p.tokps), e.Elapsed.Round(time.Second), p.eta(e.Step+1))
		}
	}
	if e.Eval != nil {
		u, _ := e.Eval.Score("unseen")
		s, _ := e.Eval.Score("seen")
		p.heldout = fmt.Sprintf("%.2f", u.Greedy)
		line := fmt.Sprintf("eval checkpoint %d (policy alone): held-out greedy %.2f Avg@%d %.2f Pass@%d %.2f, seen greedy %.2f", e.Eval.Step, u.Greedy, u.K, u.AvgK, u.K, u.PassK, s.Greedy)
		p.println(line)
	}
	if b := e.Benchmarks; b != nil {
		var parts []string
		for _, s := range b.Benchmarks {
			part := fmt.Sprintf("%s Avg@%d %.3f", s.Name, s.Samples, s.Avg)
			if v, ok := s.Pass[fmt.Sprint(s.Samples)]; ok && s.Samples > 1 {
				part += fmt.Sprintf(" Pass@%d %.3f", s.Samples, v)
			}
			parts = append(parts, part)
		}
		p.println(fmt.Sprintf("eval checkpoint %d on eval.benchmarks: %s (%s)", b.Step, strings.Join(parts, ", "), b.Dir))
	}
	if p.tty {
		p.status()
	} else if e.Learn == nil && e.Eval == nil && e.Phase == "done" {
		fmt.Fprintf(p.w, "training done in %s\n", e.Elapsed.Round(time.Second))
	}
}

func (p *progress) println(s string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.lineLen))
	}
	fmt.Fprintln(p.w, s)
}

func (p *progress) status() {
	e := p.last
	reward := ""
	if p.reward != "" {
		reward = " reward " + p.reward
	}
	s := fmt.Sprintf("step %d/%d %-7s acc %s%s calls/traj %s held-out %s tok/s %s elapsed %s ETA %s",
		e.Step+1, e.Steps, e.Phase, dash(p.acc), reward, dash(p.calls), dash(p.heldout), dash(p.tokps), e.Elapsed.Round(time.Second), p.eta(e.Step))
	pad := ""
	if len(s) < p.lineLen {
		pad = strings.Repeat(" ", p.lineLen-len(s))
	}
	p.lineLen = len(s)
	fmt.Fprintf(p.w, "\r%s%s", s, pad)
}

// log prints a phase line.
func (p *progress) log(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.println(s)
}

// warmStart is a demo.WarmStartProgress callback.
func (p *progress) warmStart(step, steps int, loss float64, elapsed time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("warm start %d/%d loss %.4f (%s)", step, steps, loss, elapsed.Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", s)
		if step == steps {
			fmt.Fprintln(p.w)
		}
		return
	}
	// Plain log lines: the first, the last, and one every 20 seconds.
	if step == 1 || step == steps || time.Since(p.wsLine) >= 20*time.Second {
		fmt.Fprintln(p.w, s)
		p.wsLine = time.Now()
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.lineLen > 0 {
		fmt.Fprintln(p.w)
		p.lineLen = 0
	}
}

// eta is the time left once done steps of the run are finished, at the
// pace of the steps this process ran; "?" before the first of them.
func (p *progress) eta(done int64) string {
	e := p.last
	ran := done - p.firstStep
	if ran <= 0 || e.Steps <= 0 {
		return "?"
	}
	per := (e.Elapsed - p.firstTime) / time.Duration(ran)
	return (per * time.Duration(max(e.Steps-done, 0))).Round(time.Second).String()
}

// num formats a metric recorded as text ("0.613281") with three decimals;
// text that is not a number is shown as it is.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var _ demo.WarmStartProgress = (&progress{}).warmStart
