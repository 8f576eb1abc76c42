// Package config binds command-line flags to their environment twins: every
// flag --some-name can also be set as INBOXD_SOME_NAME (a few well-known
// names, such as DATABASE_URL, are kept as they are). A flag given on the
// command line wins over the environment, which wins over the default.
package config

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// envOverrides are the flags whose environment name is not INBOXD_<FLAG>.
var envOverrides = map[string]string{
	"database-url": "DATABASE_URL",
}

// EnvName returns the environment variable of a flag.
func EnvName(flagName string) string {
	if e, ok := envOverrides[flagName]; ok {
		return e
	}
	return "INBOXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then fills every flag that was not given from
// its environment variable. A malformed environment value is an error that
// names the variable.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := EnvName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// Usage prints the flags with their environment twins.
func Usage(fs *flag.FlagSet, summary string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s\n\nFlags (each also settable by its environment variable):\n", summary)
		fs.VisitAll(func(f *flag.Flag) {
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			fmt.Fprintf(w, "  --%s (%s, default %s)\n      %s\n", f.Name, EnvName(f.Name), def, f.Usage)
		})
	}
}

// Logger builds the process logger from a level and format ("json" or "text").
func Logger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want json or text", format)
	}
}

// SplitList splits a comma-separated list, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Given says whether the flag name was set after Parse, on the command
// line or from its environment variable.
func Given(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
