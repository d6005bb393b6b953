package converge

import "testing"

// A change's old and new values reach apply's JSON output as they are:
// a "<" in a subject reads as itself, not as \u003c.
func TestChangeValuesAreNotHTMLEscaped(t *testing.T) {
	if got := string(raw("msgs.<eu>.*")); got != `"msgs.<eu>.*"` {
		t.Errorf("raw = %s", got)
	}
	m := toMap(struct {
		Filter string `json:"filter_subject"`
	}{"a&b.<x>"})
	if got := string(m["filter_subject"]); got != `"a&b.<x>"` {
		t.Errorf("toMap = %s", got)
	}
}
