package commands

import (
	"strings"
	"testing"
)

// TestJoinOptionalValues: a flag that may stand alone gets its separate
// value joined, for the command that declares it only.
func TestJoinOptionalValues(t *testing.T) {
	app := newApp(newIO(strings.NewReader(""), &strings.Builder{}, &strings.Builder{}))
	cases := map[string]string{
		"lanes inspect --watch 5s --stream X":      "lanes inspect --watch=5s --stream X",
		"lanes inspect --stream X -watch 0s":       "lanes inspect --stream X -watch=0s",
		"lanes inspect --watch --stream X":         "lanes inspect --watch --stream X",
		"lanes inspect --watch=5s --stream X":      "lanes inspect --watch=5s --stream X",
		"lanes inspect --stream X -- --watch 5s":   "lanes inspect --stream X -- --watch 5s",
		"lanes plan --watch 5s":                    "lanes plan --watch 5s",
		"lanes --help inspect --watch 5s":          "lanes --help inspect --watch=5s",
		"lanes nosuch inspect --watch 5s":          "lanes nosuch inspect --watch 5s",
		"lanes inspect --key msgs.x --watch 250ms": "lanes inspect --key msgs.x --watch=250ms",
	}
	for in, want := range cases {
		if got := strings.Join(joinOptionalValues(app, strings.Fields(in)), " "); got != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
}
