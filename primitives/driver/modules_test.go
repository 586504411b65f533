package driver_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoModuleImportsInternal: no module of the repository but the main
// one (k8sio, k8sio/e2e) imports one of the main module's internal
// packages, in its code or its tests. A backend in another module builds
// on this package alone, as one outside the repository must; the main
// module's internal packages may change in any release.
func TestNoModuleImportsInternal(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const internal = "github.com/ahrtr/disco/internal"
	others := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" && filepath.Dir(path) != root {
			others++
		}
		if !strings.HasSuffix(path, ".go") || moduleRoot(t, filepath.Dir(path), root) == root {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == internal || strings.HasPrefix(p, internal+"/") {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s, an internal package of another module", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if others == 0 {
		t.Fatal("found no module but the main one: the walk looked in the wrong place")
	}
}

// moduleRoot returns the directory of the go.mod nearest above dir, up to
// root.
func moduleRoot(t *testing.T, dir, root string) string {
	t.Helper()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == root || d == filepath.Dir(d) {
			return d
		}
	}
}
