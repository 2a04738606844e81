package secure

import (
	"errors"
	"net/url"
	"slices"
	"strings"
)

// Mask replaces a secret in messages.
const Mask = "xxxxx"

// publicParams are the query parameters of aipo's endpoint URIs whose
// values are not secret: the policy clients' (transforms/policy/httpclient
// and grpcclient: model, and remote.Known) and the in-process engine's
// (inproc). token_env and token_file name where a token is, not
// the token. Every other parameter's value is masked in messages.
var publicParams = map[string]bool{
	"model": true, "token_env": true, "token_file": true, "ca": true, "max_retries": true, "retry_budget": true,
	"tokenizer": true, "max_batch": true, "max_queue": true, "max_context": true, "session_tokens": true, "prefill_chunk": true,
}

// PublicParam reports whether the value of query parameter name is shown
// in messages (see RedactURI).
func PublicParam(name string) bool { return publicParams[name] }

// RedactURI returns an endpoint URI (or gRPC target) as it may appear in
// an error or a log: the user information masked (a password, and a user
// given alone, which is often a token), the value of every query parameter
// not in the short list of aipo's own non-secret parameters (model,
// token_env, ...) masked, and a fragment masked. It works on the text and
// needs no valid URI: "grpc://h:1?token=s" gives "grpc://h:1?token=xxxxx",
// "dns:///h:1?x=y" gives "dns:///h:1?x=xxxxx", "u:p@h:1" gives
// "u:xxxxx@h:1". Both & and ; separate parameters.
func RedactURI(uri string) string {
	// The authority starts after the first "//" before any ? or #; without
	// one (host:port, user@host:port) at the start.
	head := uri
	if i := strings.IndexAny(head, "?#"); i >= 0 {
		head = head[:i]
	}
	start := 0
	if i := strings.Index(head, "//"); i >= 0 {
		start = i + 2
	}
	var b strings.Builder
	b.WriteString(uri[:start])
	rest := uri[start:]
	// User information ends at the last @ before the path: a password
	// holding ? or # is masked whole.
	region := rest
	if i := strings.IndexByte(region, '/'); i >= 0 {
		region = region[:i]
	}
	if at := strings.LastIndexByte(region, '@'); at >= 0 {
		if user, _, ok := strings.Cut(region[:at], ":"); ok {
			b.WriteString(user + ":" + Mask)
		} else {
			b.WriteString(Mask)
		}
		b.WriteByte('@')
		rest = rest[at+1:]
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(rest)
	if hasQuery {
		b.WriteByte('?')
		redactQuery(&b, query)
	}
	if hasFrag {
		b.WriteByte('#')
		if frag != "" {
			b.WriteString(Mask)
		}
	}
	return b.String()
}

// queryParts calls fn for each part of query q (parts separated by & or
// ;), with the separator that follows it ("" for the last), its key and
// whether its value is public.
func queryParts(q string, fn func(part, sep, key string, hasValue, public bool)) {
	for q != "" {
		part, sep := q, ""
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			part, sep, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		key, _, hasValue := strings.Cut(part, "=")
		name, err := url.QueryUnescape(key)
		fn(part, sep, key, hasValue, err == nil && publicParams[name])
	}
}

// redactQuery writes q with the values of parameters that are not public
// masked; a part without "=" that is not a public name is masked whole.
func redactQuery(b *strings.Builder, q string) {
	queryParts(q, func(part, sep, key string, hasValue, public bool) {
		switch {
		case public:
			b.WriteString(part)
		case hasValue:
			b.WriteString(key + "=" + Mask)
		case part != "":
			b.WriteString(Mask)
		}
		b.WriteString(sep)
	})
}

// QuerySecrets returns what RedactURI masks in the query of uri: each
// value of a parameter that is not public (and a part without "="), as
// written and unescaped, for a client that sends such a query to mask in
// what the server answers. Values shorter than 4 bytes are left out (too
// common to replace in text).
func QuerySecrets(uri string) []string {
	_, q, ok := strings.Cut(uri, "?")
	if !ok {
		return nil
	}
	q, _, _ = strings.Cut(q, "#")
	var out []string
	add := func(v string) {
		if len(v) >= 4 && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	queryParts(q, func(part, _, key string, hasValue, public bool) {
		if public {
			return
		}
		v := part
		if hasValue {
			v = part[len(key)+1:]
		}
		add(v)
		if u, err := url.QueryUnescape(v); err == nil {
			add(u)
		}
	})
	return out
}

// RedactURL is RedactURI of u.
func RedactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return RedactURI(u.String())
}

// RedactError masks, with RedactURI and in place, the URL of the
// *url.Error that err is or wraps (net/http and url.Parse put the whole
// URL, query included, in their errors), and returns err. Call it on the
// error as net/http or url.Parse return it, before wrapping it: the text
// of an error made by fmt.Errorf is fixed when it is made.
func RedactError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = RedactURI(ue.URL)
	}
	return err
}
