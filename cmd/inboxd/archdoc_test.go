package main

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/architecture.md is kept true by this test: every package, every
// top-level folder and every command is named in it, and every file,
// folder, function and package-qualified name it names exists. A map that
// drifted from the code is worse than none.
func TestArchitectureDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	doc := string(raw)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(doc, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}

	t.Run("every package, folder and command is named", func(t *testing.T) {
		for _, p := range modulePackages(t) {
			require.True(t, named[p], "package %s is not named in docs/architecture.md (as `%s`)", p, p)
		}
		ents, err := os.ReadDir(root)
		require.NoError(t, err)
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" && e.Name() != "data" {
				require.True(t, named[e.Name()], "top-level folder %s/ is not named in docs/architecture.md", e.Name())
			}
		}
		cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
		require.NoError(t, err)
		for _, c := range cmds {
			require.True(t, named["cmd/"+c.Name()], "command cmd/%s is not named in docs/architecture.md", c.Name())
		}
	})

	t.Run("every path it names exists", func(t *testing.T) {
		for n := range named {
			if !looksLikePath(n) {
				continue
			}
			_, err := os.Stat(filepath.Join(root, filepath.FromSlash(n)))
			require.NoError(t, err, "docs/architecture.md names %s, which does not exist", n)
		}
	})

	t.Run("every function it names is in the file it names", func(t *testing.T) {
		// `path/file.go` (`a`, `b`): a and b are declared in that file.
		re := regexp.MustCompile("`([\\w./-]+\\.go)` \\(((?:`\\w+`(?:, )?)+)\\)")
		idents := regexp.MustCompile("`(\\w+)`")
		found := 0
		for _, m := range re.FindAllStringSubmatch(doc, -1) {
			decls := fileDecls(t, filepath.Join(root, filepath.FromSlash(m[1])))
			for _, id := range idents.FindAllStringSubmatch(m[2], -1) {
				require.True(t, decls[id[1]], "docs/architecture.md says %s is in %s; it is not", id[1], m[1])
				found++
			}
		}
		require.Greater(t, found, 10, "the tables name functions beside their files")
	})

	t.Run("every package-qualified name exists", func(t *testing.T) {
		// `pkg.Name` where pkg is the last element of a package of the
		// module that no other package shares.
		byName := map[string][]string{}
		for _, p := range modulePackages(t) {
			byName[filepath.Base(p)] = append(byName[filepath.Base(p)], p)
		}
		re := regexp.MustCompile(`^(\w+)\.(\w+)$`)
		for n := range named {
			m := re.FindStringSubmatch(n)
			if m == nil || len(byName[m[1]]) != 1 || looksLikePath(n) {
				continue
			}
			decls := map[string]bool{}
			dir := filepath.Join(root, filepath.FromSlash(byName[m[1]][0]))
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			require.NoError(t, err)
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") {
					for k := range fileDecls(t, f) {
						decls[k] = true
					}
				}
			}
			require.True(t, decls[m[2]], "docs/architecture.md names %s; package %s declares no %s", n, byName[m[1]][0], m[2])
		}
	})
}

// looksLikePath says whether a backticked span of the doc names a file or
// folder of the repository (not a route, a metric or a command line).
func looksLikePath(s string) bool {
	if strings.ContainsAny(s, " <>{}*…:") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return false
	}
	if regexp.MustCompile(`\.(go|md|ts|yaml|yml|sql|sh|json|html|js|mjs)$`).MatchString(s) {
		return true
	}
	return strings.Contains(s, "/")
}

// modulePackages is every package of the module, relative to its root.
func modulePackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "../../...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ps []string
	for _, p := range strings.Fields(string(out)) {
		ps = append(ps, strings.TrimPrefix(p, "github.com/inboxd/inboxd/"))
	}
	require.Greater(t, len(ps), 20)
	return ps
}

// fileDecls is the names a Go file declares at its top level: functions,
// methods, types, constants and variables.
func fileDecls(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(gotoken.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			names[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names
}

// A package doc that lists the package's files (names three or more) lists
// them all, and every file any package doc names exists: a file list that
// drifted from its directory misleads more than none.
func TestPackageDocFileLists(t *testing.T) {
	root := filepath.Join("..", "..")
	goFile := regexp.MustCompile(`\b([a-z0-9_]+\.go)\b`)
	for _, p := range modulePackages(t) {
		dir := filepath.Join(root, filepath.FromSlash(p))
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		have, tests := map[string]bool{}, map[string]bool{}
		var doc string
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				tests[filepath.Base(f)] = true
				continue
			}
			have[filepath.Base(f)] = true
			af, err := parser.ParseFile(gotoken.NewFileSet(), f, nil, parser.ParseComments|parser.PackageClauseOnly)
			require.NoError(t, err)
			if af.Doc != nil {
				doc += af.Doc.Text()
			}
		}
		named := map[string]bool{}
		for _, m := range goFile.FindAllStringSubmatch(doc, -1) {
			named[m[1]] = true
		}
		for n := range named {
			if !have[n] && !tests[n] {
				t.Errorf("the package doc of %s names %s, which is not one of its files", p, n)
			}
		}
		for n := range tests {
			delete(named, n) // a test the doc points to is no entry of a file list
		}
		if len(named) < 3 {
			continue // it names a file or two where it explains them; no list
		}
		for f := range have {
			if f != "doc.go" && !named[f] {
				t.Errorf("the package doc of %s lists its files but not %s", p, f)
			}
		}
	}
}
