package secure

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestRedactURI(t *testing.T) {
	for in, want := range map[string]string{
		// The case, and the parameters aipo defines kept.
		"http://127.0.0.1:8000/v1?model=m&token=SECRET":                 "http://127.0.0.1:8000/v1?model=m&token=xxxxx",
		"https://p.example/v1?model=m&token_env=AIPO_T&ca=/etc/ca.pem":  "https://p.example/v1?model=m&token_env=AIPO_T&ca=/etc/ca.pem",
		"grpc://h:7070?max_retries=3&retry_budget=5s&token_file=/run/t": "grpc://h:7070?max_retries=3&retry_budget=5s&token_file=/run/t",
		"http://h/v1?api_key=SECRET&api_key=SECRET2&model=a&model=b":    "http://h/v1?api_key=xxxxx&api_key=xxxxx&model=a&model=b",
		"http://h/v1?key=S%45CRET&mo%64el=m":                            "http://h/v1?key=xxxxx&mo%64el=m",
		"http://h/v1?SECRET":                                            "http://h/v1?xxxxx",
		"http://h/v1?model":                                             "http://h/v1?model",
		"http://h/v1?model=m;token=SECRET":                              "http://h/v1?model=m;token=xxxxx",
		"http://h/v1?t=SECRET#frag-SECRET":                              "http://h/v1?t=xxxxx#xxxxx",
		"http://h/v1#access_token=SECRET":                               "http://h/v1#xxxxx",
		"http://h/v1?":                                                  "http://h/v1?",
		"http://h/v1#":                                                  "http://h/v1#",
		"http://h/v1?&&x=":                                              "http://h/v1?&&x=xxxxx",
		// User information: a password, a user alone, odd characters.
		"http://user:SECRET@h:1/v1":     "http://user:xxxxx@h:1/v1",
		"https://SECRET@h/v1":           "https://xxxxx@h/v1",
		"http://u:SE?CR#ET@h/v1?model=": "http://u:xxxxx@h/v1?model=",
		"http://u:SE@CRET@h/v1":         "http://u:xxxxx@h/v1",
		"u:SECRET@h:7070":               "u:xxxxx@h:7070",
		// gRPC targets and aipo's other schemes.
		"dns:///h:7070?x=SECRET":                          "dns:///h:7070?x=xxxxx",
		"dns://8.8.8.8/h:7070?x=SECRET":                   "dns://8.8.8.8/h:7070?x=xxxxx",
		"h:7070?token=SECRET":                             "h:7070?token=xxxxx",
		"unix:///run/aipo.sock":                           "unix:///run/aipo.sock",
		"inproc://train-demo-000001?max_batch=4&k=SECRET": "inproc://train-demo-000001?max_batch=4&k=xxxxx",
		"inproc:///runs/x/step-1?tokenizer=builtin":       "inproc:///runs/x/step-1?tokenizer=builtin",
		"inproc:gs://b/runs/x?tokenizer=/t.json&s=SECRET": "inproc:gs://b/runs/x?tokenizer=/t.json&s=xxxxx",
		// A // in a value is not an authority.
		"h:1?token=SECRET&next=http://a@b": "h:1?token=xxxxx&next=xxxxx",
		"":                                 "",
		"not a uri":                        "not a uri",
	} {
		if got := RedactURI(in); got != want {
			t.Errorf("RedactURI(%q)\n = %q\nwant %q", in, got, want)
		}
		if strings.Contains(RedactURI(in), "SECRET") || strings.Contains(RedactURI(in), "CRET") && strings.Contains(in, "SECRET") {
			t.Errorf("RedactURI(%q) = %q keeps the secret", in, RedactURI(in))
		}
	}
}

func TestRedactURL(t *testing.T) {
	u, err := url.Parse("https://u:SECRET@h/v1?model=m&token=SECRET")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := RedactURL(u), "https://u:xxxxx@h/v1?model=m&token=xxxxx"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
	if RedactURL(nil) != "" {
		t.Error("RedactURL(nil) is not empty")
	}
}

// TestRedactError masks the URL that url.Parse and net/http put in their
// errors, which then wrap without it.
func TestRedactError(t *testing.T) {
	_, perr := url.Parse("http://h:1/v1?token=SECRET\x7f")
	_, herr := http.Get("http://127.0.0.1:1/v1?model=m&token=SECRET")
	for _, err := range []error{perr, herr, &url.Error{Op: "Post", URL: "http://u:SECRET@h/x?k=SECRET", Err: errors.New("EOF")}} {
		if err == nil || !strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("the case %v does not hold the secret to begin with", err)
		}
		got := RedactError(err)
		if got != err {
			t.Errorf("RedactError returned another error")
		}
		wrapped := errors.Join(errors.New("first"), fmt.Errorf("policy: %w", got))
		if s := fmt.Sprintf("%v %+v %#v %v", got, got, got, wrapped); strings.Contains(s, "SECRET") {
			t.Errorf("RedactError left the secret: %s", s)
		}
		if !strings.Contains(got.Error(), Mask) {
			t.Errorf("RedactError(%v) shows no mask", got)
		}
		var ue *url.Error
		if !errors.As(wrapped, &ue) {
			t.Errorf("the wrapped error lost its *url.Error")
		}
	}
	if RedactError(nil) != nil || RedactError(errors.New("x")).Error() != "x" {
		t.Error("RedactError changed an error without a URL")
	}
}

func TestQuerySecrets(t *testing.T) {
	got := QuerySecrets("https://h/v1?model=m&key=S%45CRET&x=ab&SECRET2;t=SECRET#frag")
	want := []string{"S%45CRET", "SECRET", "SECRET2"}
	if !slices.Equal(got, want) {
		t.Errorf("QuerySecrets = %q, want %q", got, want)
	}
	if QuerySecrets("https://h/v1") != nil || QuerySecrets("https://h/v1?model=m&token_env=X") != nil {
		t.Error("QuerySecrets found secrets in a URI without any")
	}
}
