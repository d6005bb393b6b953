package figure

import "testing"

func TestFigures(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Rate(285.71), "286/s"},
		{Rate(42), "42.0/s"},
		{Rate(3.5), "3.50/s"},
		{Millis(1670), "1.67s"},
		{Millis(41.53), "41.5ms"},
		{Millis(2), "2.00ms"},
		{Share(0.35), "35%"},
		{Share(1), "100%"},
		{Plural(1, "lane", "lanes"), "lane"},
		{Plural(0, "lane", "lanes"), "lanes"},
		{Plural(3, "lane", "lanes"), "lanes"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
