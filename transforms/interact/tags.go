package interact

import (
	"regexp"
	"strings"

	"github.com/aipo-rl/aipo/transforms/collab"
)

// The result wrappers.
const (
	ResultOpen  = "<result>"
	ResultClose = "</result>"
)

// Tag is the pair of tags through which the policy calls one agent.
type Tag struct {
	Agent collab.Agent
	Open  string
	Close string
}

// Tags lists the agents' tags in the order verify, knowledge, reason.
var Tags = []Tag{
	{Agent: collab.Verify, Open: "<verify>", Close: "</verify>"},
	{Agent: collab.Knowledge, Open: "<retrieval>", Close: "</retrieval>"},
	{Agent: collab.Reason, Open: "<reason>", Close: "</reason>"},
}

// AllTags lists every tag string of the protocol: the agents' tags and the
// result wrappers.
func AllTags() []string {
	out := make([]string, 0, 2*len(Tags)+2)
	for _, t := range Tags {
		out = append(out, t.Open, t.Close)
	}
	return append(out, ResultOpen, ResultClose)
}

// tagPattern matches a protocol tag written loosely: any case, spaces
// inside the brackets.
var tagPattern = regexp.MustCompile(`(?i)<\s*/?\s*(?:verify|retrieval|reason|result)\s*>`)

// FindTag returns the byte offset of the first protocol tag in s (matched
// loosely, as Escape does), or -1.
func FindTag(s string) int {
	loc := tagPattern.FindStringIndex(s)
	if loc == nil {
		return -1
	}
	return loc[0]
}

// Escape returns text with every protocol tag neutralised: in each match of
// a tag (any case, spaces inside the brackets allowed) the angle brackets
// become "&lt;" and "&gt;". The result holds no tag: the replacement
// removes a tag's brackets and inserts none, so it cannot form a new one.
func Escape(text string) string {
	for FindTag(text) >= 0 {
		text = tagPattern.ReplaceAllStringFunc(text, func(m string) string {
			m = strings.ReplaceAll(m, "<", "&lt;")
			return strings.ReplaceAll(m, ">", "&gt;")
		})
	}
	return text
}
