package trajectories

import (
	"encoding/json"
	"fmt"

	"github.com/aipo-rl/aipo/transforms/advantage"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/trajectories/guidance"
)

// Spec is what the rollout's DoFns need. It is serialised with them (JSON),
// so every field is exported.
type Spec struct {
	Run            string `json:"run"`
	Step           int64  `json:"step"`
	Seed           uint64 `json:"seed"`
	PolicyEndpoint string `json:"policy_endpoint"`

	Interact interact.Config `json:"interact"`
	// Collaborators configures the agents; no roles means none (every
	// call is answered with collab.NoticeNotEnabled).
	Collaborators collab.Config `json:"collaborators"`
	// CollabBaseDir resolves relative file names of the collaborators'
	// configuration.
	CollabBaseDir string `json:"collab_base_dir"`

	// SystemPrompt and PromptTemplate are templates (see NewRenderer);
	// empty means the built-in ones.
	SystemPrompt   string `json:"system_prompt"`
	PromptTemplate string `json:"prompt_template"`
	// ChatTemplate, when set, is the Jinja chat template of the model
	// (from ChatTemplateFile, a tokenizer_config.json, whose special
	// tokens are ChatTokens) that renders each prompt instead of
	// PromptTemplate (see NewChatRenderer); EnableThinking, when set, is
	// its enable_thinking.
	ChatTemplate     string            `json:"chat_template,omitempty"`
	ChatTemplateFile string            `json:"chat_template_file,omitempty"`
	ChatTokens       map[string]string `json:"chat_tokens,omitempty"`
	EnableThinking   *bool             `json:"enable_thinking,omitempty"`

	GroupSize       int     `json:"group_size"`
	MaxInFlight     int     `json:"max_in_flight"`
	PromptsPerBatch int     `json:"prompts_per_batch"`
	InteractionCost float64 `json:"interaction_cost"`
	// RewardDataSource, when set, picks the verifier of every prompt.
	RewardDataSource string `json:"reward_data_source"`
	// RewardStrict scores with each verifier's strict form (see
	// verify.ForTraining); ScoreTruncated scores responses the length
	// budget cut off instead of giving them 0.
	RewardStrict   bool             `json:"reward_strict"`
	ScoreTruncated bool             `json:"score_truncated"`
	Advantage      advantage.Config `json:"advantage"`
	// Guidance mixes off-policy guidance traces into each group (LUFFY).
	Guidance guidance.Config `json:"guidance"`
	// Carry lets the step's batch close at an interruption
	// (rollout.carry); zero: off.
	Carry Carry `json:"carry"`
}

// Carry configures rollout.carry for one step's rollout.
type Carry struct {
	// Dir is where the step writes its carried groups (rundir.Carry);
	// empty: nothing is carried out of the step.
	Dir string `json:"dir,omitempty"`
	// MinGroups is how many of the step's groups must have finished, at
	// its first interruption, for its batch to close; otherwise its
	// samples go on inside the step.
	MinGroups int `json:"min_groups,omitempty"`
	// MaxSteps bounds how many steps a group is carried
	// (rollout.carry_max_steps): a group carried into the step that many
	// times already is finished inside it, its samples going on across
	// the next push as under rollout.partial alone; 0: no bound.
	MaxSteps int64 `json:"max_steps,omitempty"`
	// Key names this rollout's decision, made once per process: unique
	// for each rollout of a step (a step rolled out again decides anew).
	Key string `json:"key,omitempty"`
}

// Validate reports the first invalid field.
func (s Spec) Validate() error {
	switch {
	case s.PolicyEndpoint == "":
		return fmt.Errorf("rollout: no policy endpoint (set policy.endpoint or --policy)")
	case s.GroupSize < 2:
		return fmt.Errorf("rollout: group size %d must be at least 2", s.GroupSize)
	case s.MaxInFlight < 1:
		return fmt.Errorf("rollout: max_in_flight %d must be at least 1", s.MaxInFlight)
	case s.PromptsPerBatch < 0:
		return fmt.Errorf("rollout: prompts_per_batch %d must not be negative", s.PromptsPerBatch)
	case s.InteractionCost < 0:
		return fmt.Errorf("rollout: interaction_cost %v must not be negative", s.InteractionCost)
	case s.ChatTemplate != "" && s.PromptTemplate != "":
		return fmt.Errorf("rollout: both a chat template (%s) and a prompt template are set; set rollout.chat_template: none to use the prompt template, or drop rollout.prompt_template", s.ChatTemplateFile)
	}
	if err := s.Interact.Validate(); err != nil {
		return err
	}
	if s.ChatTemplate != "" {
		// A template that fails on a prompt fails here, before any worker.
		if _, err := s.renderer(collab.Agents); err != nil {
			return err
		}
	}
	if len(s.Collaborators.Roles()) > 0 {
		if err := s.Collaborators.Validate(); err != nil {
			return fmt.Errorf("rollout: collaborators: %w", err)
		}
	}
	if err := s.Guidance.Validate(s.GroupSize); err != nil {
		return err
	}
	return s.Advantage.Validate()
}

// BatchPrompts is the number of prompts per sampling element: the
// configured number, or enough prompts for four times the in-flight bound.
func (s Spec) BatchPrompts() int {
	if s.PromptsPerBatch > 0 {
		return s.PromptsPerBatch
	}
	return max(1, (4*s.MaxInFlight+s.GroupSize-1)/s.GroupSize)
}

// key identifies the worker resources a Spec needs (see the package doc).
func (s Spec) key() string {
	b, err := json.Marshal(struct {
		Endpoint string
		Interact interact.Config
		Collab   collab.Config
		Base     string
		Sys, Tpl string
		Flight   int
		Chat     string
		ChatFile string
		Tokens   map[string]string
		Thinking *bool
		Guidance guidance.Config
	}{s.PolicyEndpoint, s.Interact, s.Collaborators, s.CollabBaseDir, s.SystemPrompt, s.PromptTemplate, s.MaxInFlight, s.ChatTemplate, s.ChatTemplateFile, s.ChatTokens, s.EnableThinking, s.Guidance})
	if err != nil {
		panic(fmt.Sprintf("rollout: spec does not serialise: %v", err))
	}
	return string(b)
}
