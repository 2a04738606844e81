package textdist

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"group_size", "max_in_flight", "lr", "reward", "take-over"}
	for name, want := range map[string]string{
		"group_sise": "group_size", "lrr": "lr", "rewards": "reward", "takeover": "take-over",
		"completely_unrelated": "", "": "",
	} {
		if got := Closest(name, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance(kitten, sitting) = %d, want 3", d)
	}
}
