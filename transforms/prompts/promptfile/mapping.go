package promptfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/verify"
)

// mapper turns decoded records of one file into Prompt rows.
type mapper struct {
	src  Source
	seen map[string]bool
}

func newMapper(src Source) *mapper {
	return &mapper{src: src, seen: make(map[string]bool)}
}

// rowError is why one record was dead-lettered.
type rowError struct{ reason, detail string }

// lookup finds name in obj: a direct key first, then a dotted path through
// nested objects and arrays. It returns the value, the top-level key it
// came from, and whether it was present (null counts as absent).
func lookup(obj map[string]any, name string) (any, string, bool) {
	if v, ok := obj[name]; ok {
		return v, name, v != nil
	}
	if !strings.Contains(name, ".") {
		return nil, "", false
	}
	segs := strings.Split(name, ".")
	var cur any = obj
	for _, seg := range segs {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return nil, "", false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, "", false
			}
			cur = c[i]
		default:
			return nil, "", false
		}
	}
	return cur, segs[0], cur != nil
}

// normNumber writes a number without a spurious fraction: "27.0" -> "27",
// "2.50" -> "2.5", "1e3" -> "1000"; integers are kept digit for digit.
func normNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return s
	}
	return formatFloat(f)
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// text renders a scalar as text; ok is false for objects and arrays.
func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return normNumber(string(x)), true
	case bool:
		return strconv.FormatBool(x), true
	case []byte:
		return string(x), true
	case float64:
		return formatFloat(x), true
	case float32:
		return formatFloat(float64(x)), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	}
	return "", false
}

// first returns the text of the first candidate present in obj, recording
// every candidate key present as consumed.
func first(obj map[string]any, names Names, consumed map[string]bool, column string) (string, bool, *rowError) {
	var (
		out   string
		found bool
	)
	for _, n := range names {
		v, key, ok := lookup(obj, n)
		if key != "" {
			consumed[key] = true
		}
		if !ok || found {
			continue
		}
		s, isText := text(v)
		if !isText {
			return "", false, &rowError{ReasonBadFieldType, fmt.Sprintf("field %q (mapped to %s) is a %s, want a string or number", n, column, kindOf(v))}
		}
		out, found = s, true
	}
	return out, found, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// row maps one decoded record at position index.
func (m *mapper) row(obj map[string]any, index int64) (schemas.Prompt, *rowError) {
	consumed := make(map[string]bool, 8)
	problem, history, rerr := m.problem(obj, consumed)
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	answer, rerr := m.answer(obj, consumed)
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	solution, _, rerr := first(obj, m.src.Fields.Solution, consumed, "solution")
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	if answer, solution, rerr = m.splitAnswer(answer, solution); rerr != nil {
		return schemas.Prompt{}, rerr
	}
	ds, rowDS, rerr := m.dataSource(obj, consumed)
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	id, rerr := m.id(obj, consumed, ds, index)
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	extra, rerr := m.extra(obj, consumed, history, ds, rowDS)
	if rerr != nil {
		return schemas.Prompt{}, rerr
	}
	m.seen[id] = true
	return schemas.Prompt{
		SchemaVersion: schemas.SchemaVersion,
		ID:            id,
		DataSource:    ds,
		Problem:       problem,
		Answer:        answer,
		Solution:      solution,
		Extra:         extra,
	}, nil
}

// problem is the record's non-empty problem text, and under
// FieldMap.Messages the message list when it holds more than the problem.
func (m *mapper) problem(obj map[string]any, consumed map[string]bool) (problem string, history []any, rerr *rowError) {
	f := m.src.Fields
	var ok bool
	if f.Messages {
		problem, history, ok, rerr = firstMessages(obj, f.Problem, consumed)
	} else {
		problem, ok, rerr = first(obj, f.Problem, consumed, "problem")
	}
	if rerr != nil {
		return "", nil, rerr
	}
	if !ok || strings.TrimSpace(problem) == "" {
		return "", nil, &rowError{ReasonMissingProblem, fmt.Sprintf("no non-empty problem in fields %s", strings.Join(f.Problem, "|"))}
	}
	return problem, history, nil
}

// answer is the record's answer field, trimmed and non-empty.
func (m *mapper) answer(obj map[string]any, consumed map[string]bool) (string, *rowError) {
	f := m.src.Fields
	answer, ok, rerr := first(obj, f.Answer, consumed, "answer")
	if rerr != nil {
		return "", rerr
	}
	if !ok {
		return "", &rowError{ReasonMissingAnswer, fmt.Sprintf("no answer: fields %s are absent or null", strings.Join(f.Answer, "|"))}
	}
	answer = strings.TrimSpace(answer)
	if answer == "" {
		return "", &rowError{ReasonMissingAnswer, "the answer is empty"}
	}
	return answer, nil
}

// splitAnswer splits an answer field that holds a worked solution at the
// last FieldMap.AnswerMarker: the final answer is what follows it, and the
// text before it is the solution unless the record has one of its own.
// Without a marker configured it returns answer and solution as they are.
func (m *mapper) splitAnswer(answer, solution string) (string, string, *rowError) {
	marker := m.src.Fields.AnswerMarker
	if marker == "" {
		return answer, solution, nil
	}
	i := strings.LastIndex(answer, marker)
	if i < 0 {
		return "", "", &rowError{ReasonMissingAnswer, fmt.Sprintf("answer has no %q marker before the final answer", marker)}
	}
	if solution == "" {
		solution = strings.TrimSpace(answer[:i])
	}
	answer = strings.TrimSpace(answer[i+len(marker):])
	if answer == "" {
		return "", "", &rowError{ReasonMissingAnswer, fmt.Sprintf("nothing after the %q marker", marker)}
	}
	return answer, solution, nil
}

// id is the row's id, ds + "/" + the record's id field (or its position
// index without one), unique within the file.
func (m *mapper) id(obj map[string]any, consumed map[string]bool, ds string, index int64) (string, *rowError) {
	rawID, ok, rerr := first(obj, m.src.Fields.ID, consumed, "id")
	if rerr != nil {
		return "", rerr
	}
	if !ok || rawID == "" {
		rawID = strconv.FormatInt(index, 10)
	}
	id := ds + "/" + rawID
	if m.seen[id] {
		return "", &rowError{ReasonDuplicateID, fmt.Sprintf("id %q already seen earlier in the file", id)}
	}
	return id, nil
}

// extra is the record's fields that no column consumed (FieldMap.Keep and
// Drop adjust which), as a JSON object, "" when there are none. A message
// history keeps its problem field's name; a row's own data_source that
// differs from ds, the verifier name it matched, is kept as data_source.
func (m *mapper) extra(obj map[string]any, consumed map[string]bool, history []any, ds, rowDS string) (string, *rowError) {
	f := m.src.Fields
	for _, k := range f.Keep {
		delete(consumed, k)
	}
	for _, d := range f.Drop {
		consumed[d] = true
	}
	var extra map[string]any
	for k, v := range obj {
		if consumed[k] || v == nil {
			continue
		}
		if extra == nil {
			extra = make(map[string]any)
		}
		extra[k] = v
	}
	keepExtra := func(k string, v any) {
		if extra == nil {
			extra = make(map[string]any)
		}
		if _, taken := extra[k]; !taken {
			extra[k] = v
		}
	}
	if history != nil {
		keepExtra(f.Problem[0], history)
	}
	if rowDS != "" && rowDS != ds {
		keepExtra("data_source", rowDS) // the row's own name, before matching it to a verifier
	}
	if extra == nil {
		return "", nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(extra); err != nil {
		return "", &rowError{ReasonBadFieldType, fmt.Sprintf("extra fields cannot be written as JSON: %v", err)}
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// dataSource is the row's data_source: the Source's, or the row's own
// (FieldMap.DataSource) matched to a verifier's name; raw is the row's
// value as written ("" when the Source sets it).
func (m *mapper) dataSource(obj map[string]any, consumed map[string]bool) (ds, raw string, rerr *rowError) {
	if m.src.DataSource != "" {
		return m.src.DataSource, "", nil
	}
	names := m.src.Fields.DataSource
	raw, ok, rerr := first(obj, names, consumed, "data_source")
	if rerr != nil {
		return "", "", rerr
	}
	raw = strings.TrimSpace(raw)
	if !ok || raw == "" {
		return "", "", &rowError{ReasonUnknownDataSource, fmt.Sprintf("no data_source: fields %s are absent, null or empty; set data_source on the source to score every row with one verifier", strings.Join(names, "|"))}
	}
	ds, known := verify.Canonical(raw)
	if !known {
		return "", "", &rowError{ReasonUnknownDataSource, fmt.Sprintf("data_source %q has no verifier (known: %s); set data_source on the source, or reward.data_source, to score these rows with a known one", raw, strings.Join(verify.DataSources(), ", "))}
	}
	return ds, raw, nil
}

// firstMessages reads the first candidate present as a chat message list
// and returns the content of its last user message, and the list itself
// when it holds other messages too.
func firstMessages(obj map[string]any, names Names, consumed map[string]bool) (string, []any, bool, *rowError) {
	for _, n := range names {
		v, key, ok := lookup(obj, n)
		if key != "" {
			consumed[key] = true
		}
		if !ok {
			continue
		}
		list, isList := v.([]any)
		if !isList {
			return "", nil, false, &rowError{ReasonNotMessages, fmt.Sprintf("field %q is a %s, want a chat message list [{\"role\": \"user\", \"content\": \"...\"}]", n, kindOf(v))}
		}
		user := -1
		for i, e := range list {
			msg, isObj := e.(map[string]any)
			if !isObj {
				return "", nil, false, &rowError{ReasonNotMessages, fmt.Sprintf("field %q entry %d is a %s, want a {role, content} message", n, i, kindOf(e))}
			}
			role, rok := msg["role"].(string)
			content, cok := msg["content"].(string)
			if !rok || !cok {
				return "", nil, false, &rowError{ReasonNotMessages, fmt.Sprintf("field %q entry %d has no string role and content", n, i)}
			}
			if role == "user" && strings.TrimSpace(content) != "" {
				user = i
			}
		}
		if user < 0 {
			return "", nil, false, &rowError{ReasonNotMessages, fmt.Sprintf("field %q holds no user message with content (%d messages)", n, len(list))}
		}
		var history []any
		if len(list) > 1 {
			history = list
		}
		return list[user].(map[string]any)["content"].(string), history, true, nil
	}
	return "", nil, false, nil
}

// validUTF8 reports whether every string inside v is valid UTF-8, and the
// first field path that is not.
func validUTF8(v any, path string) (string, bool) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return path, false
		}
	case []byte:
		if !utf8.Valid(x) {
			return path, false
		}
	case map[string]any:
		for k, e := range x {
			if !utf8.ValidString(k) {
				return path + "." + strings.ToValidUTF8(k, "\uFFFD"), false
			}
			if p, ok := validUTF8(e, joinPath(path, k)); !ok {
				return p, false
			}
		}
	case []any:
		for i, e := range x {
			if p, ok := validUTF8(e, joinPath(path, strconv.Itoa(i))); !ok {
				return p, false
			}
		}
	}
	return "", true
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}
