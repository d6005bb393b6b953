package commands

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

func manCommand(io *IO) *cli.Command {
	return &cli.Command{
		Name:      "man",
		Usage:     "print the manual page (roff)",
		UsageText: "lanes man > lanes.1 && man ./lanes.1",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("man takes no arguments (got %q)", c.Args().First())
			}
			page, err := manPage(c.App)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(io.Out, page)
			return err
		},
	}
}

// manPage renders the app as a section 1 page. The title line comes first,
// with the version, as man(7) expects.
func manPage(app *cli.App) (string, error) {
	page, err := app.ToManWithSection(1)
	if err != nil {
		return "", err
	}
	page = strings.TrimPrefix(page, ".nh\n")
	title, rest, _ := strings.Cut(page, "\n")
	if !strings.HasPrefix(title, ".TH") {
		return "", fmt.Errorf("man page: unexpected title line %q", title)
	}
	return fmt.Sprintf(".TH LANES 1 \"\" \"lanes %s\" \"User Commands\"\n.nh\n%s", shortVersion(), rest), nil
}
