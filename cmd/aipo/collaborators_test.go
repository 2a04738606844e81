package main

import "testing"

func TestCheckBind(t *testing.T) {
	cases := []struct {
		addr  string
		token bool
		ok    bool
	}{
		{"127.0.0.1:7071", false, true}, {"localhost:7071", false, true}, {"[::1]:7071", false, true},
		{"0.0.0.0:7071", false, false}, {"0.0.0.0:7071", true, true}, {":7071", false, false},
		{"10.0.0.5:7071", false, false}, {"127.0.0.1", false, false},
	}
	for _, tc := range cases {
		if err := checkBind(tc.addr, tc.token); (err == nil) != tc.ok {
			t.Errorf("checkBind(%q, token %v) = %v, want ok %v", tc.addr, tc.token, err, tc.ok)
		}
	}
}
