// Package docs holds the guides; its test keeps them from rotting: every
// command, package, identifier and link the README and the guides name must
// exist in the code as it is.
package docs

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// root is the repository's top, from this package's directory.
const root = ".."

// modulePath is the core module's import path.
const modulePath = "github.com/ahrtr/disco"

// pages are the documents checked: the README, every guide, and the
// benchmarks' page. CHANGES.md is history and may name what is gone.
func pages(t *testing.T) []string {
	t.Helper()
	ps := []string{filepath.Join(root, "README.md")}
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	ps = append(ps, guides...)
	if _, err := os.Stat(filepath.Join(root, "bench", "README.md")); err == nil {
		ps = append(ps, filepath.Join(root, "bench", "README.md"))
	}
	return ps
}

// page is one document, read.
type page struct {
	path string
	text string
}

func readPages(t *testing.T) []page {
	t.Helper()
	var out []page
	for _, p := range pages(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page{path: p, text: string(b)})
	}
	return out
}

// where names a line of a page for a failure message.
func (p page) where(offset int) string {
	return fmt.Sprintf("%s:%d", strings.TrimPrefix(p.path, root+"/"), strings.Count(p.text[:offset], "\n")+1)
}

// goCommand matches `go run ./path` and `go test ./path` (also -flags
// between, and ./path/... patterns).
var goCommand = regexp.MustCompile(`(?:cd ([A-Za-z0-9_./-]+) && )?go (run|test|build|install)((?: -[^\s]+)*) (\./[A-Za-z0-9_./-]*)`)

// Every package a `go run`, `go test` or `go build` names (after a `cd
// DIR &&`, relative to DIR) exists and compiles with its tests: one go vet
// per module type-checks them all without running them (go test ./...
// runs every example). A package of another module of the repository
// (k8sio's) is only checked to be there: compiling it would pull that
// module's heavy dependencies into the core's test, and its own module's
// tests compile and run it.
func TestCommandsNamePackagesThatBuild(t *testing.T) {
	core, _ := moduleOf(t, root)
	var targets []string
	seen := map[string]bool{}
	found := 0
	for _, p := range readPages(t) {
		for _, m := range goCommand.FindAllStringSubmatchIndex(p.text, -1) {
			path := strings.TrimRight(p.text[m[8]:m[9]], ".,;:)")
			if path == "./" || path == "." || path == "./..." {
				continue // the whole module: go test ./... itself
			}
			found++
			dir := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(path, "/...")))
			if m[2] >= 0 {
				dir = filepath.Join(root, filepath.FromSlash(p.text[m[2]:m[3]]), filepath.FromSlash(strings.TrimSuffix(path, "/...")))
			}
			if seen[dir+path] {
				continue
			}
			seen[dir+path] = true
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Errorf("%s names %s, which is not a directory of the repository", p.where(m[0]), path)
				continue
			}
			mod, rel := moduleOf(t, dir)
			if mod != core {
				if goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(goFiles) == 0 {
					t.Errorf("%s names %s, which holds no Go files", p.where(m[0]), path)
				}
				continue
			}
			target := "./" + filepath.ToSlash(rel)
			if strings.HasSuffix(path, "/...") {
				target += "/..."
			}
			targets = append(targets, target)
		}
	}
	if found == 0 {
		t.Fatal("no go commands found in the pages: is the pattern stale?")
	}
	sort.Strings(targets)
	cmd := exec.Command("go", append([]string{"vet"}, targets...)...)
	cmd.Dir = core
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet %s in %s: %v\n%s", strings.Join(targets, " "), core, err, out)
	}
}

// moduleOf returns the directory of the module that holds dir (the nearest
// go.mod above it) and dir relative to it.
func moduleOf(t *testing.T, dir string) (mod, rel string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for m := abs; ; m = filepath.Dir(m) {
		if _, err := os.Stat(filepath.Join(m, "go.mod")); err == nil {
			r, err := filepath.Rel(m, abs)
			if err != nil {
				t.Fatal(err)
			}
			if r == "." {
				r = ""
			}
			return m, r
		}
		if filepath.Dir(m) == m {
			t.Fatalf("no go.mod above %s", abs)
		}
	}
}

// exported is what a package declares at its top level: its exported
// names, and for each exported type its methods and fields.
type exported struct {
	names   map[string]bool
	members map[string]map[string]bool // type -> methods and fields
}

// hasMember reports whether some type of the package has a method or field
// called name (prose says guard.HTTPMiddleware for Guard's method).
func (e *exported) hasMember(name string) bool {
	for _, ms := range e.members {
		if ms[name] {
			return true
		}
	}
	return false
}

var (
	pkgMu    sync.Mutex
	pkgCache = map[string]*exported{}
)

// declared parses the package in dir (tests excluded) and returns what it
// exports, or nil if dir holds no Go package.
func declared(t *testing.T, dir string) *exported {
	t.Helper()
	pkgMu.Lock()
	defer pkgMu.Unlock()
	if e, ok := pkgCache[dir]; ok {
		return e
	}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		pkgCache[dir] = nil
		return nil
	}
	e := &exported{names: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if e.members[typ] == nil {
			e.members[typ] = map[string]bool{}
		}
		e.members[typ][name] = true
	}
	files := 0
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					e.names[d.Name.Name] = true
					continue
				}
				if typ := recvType(d.Recv.List[0].Type); typ != "" {
					member(typ, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						e.names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									member(s.Name.Name, n.Name)
								}
								if len(f.Names) == 0 { // embedded: its name
									if n := recvType(f.Type); n != "" {
										member(s.Name.Name, n)
									}
								}
							}
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									member(s.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							e.names[n.Name] = true
						}
					}
				}
			}
		}
	}
	if files == 0 {
		e = nil
	}
	pkgCache[dir] = e
	return e
}

// recvType names a receiver's or embedded field's type: T, *T, T[P].
func recvType(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// packages maps the name a document uses for each of the repository's
// packages (its last path element) to its directory, for every package of
// every module here that is not internal, a command or an example.
func packages(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	dup := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		base := d.Name()
		if strings.HasPrefix(base, ".") && p != root || base == "testdata" || base == "internal" || base == "examples" || base == "cmd" {
			return filepath.SkipDir
		}
		if declared(t, p) == nil || p == root {
			return nil
		}
		if _, ok := out[base]; ok {
			dup[base] = true
		}
		out[base] = rel
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range dup {
		delete(out, name) // ambiguous in prose: not checked by name
	}
	return out
}

// codeSpan matches a Markdown code span or a line of a fenced block's
// content; qualified matches pkg.Name and pkg.Type.Member in them.
var (
	codeSpan  = regexp.MustCompile("`[^`\n]+`")
	fence     = regexp.MustCompile("(?s)```[a-z]*\n.*?```")
	qualified = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)
	importRef = regexp.MustCompile(regexp.QuoteMeta(modulePath) + `(/[A-Za-z0-9_/.-]*)?`)
)

// Every identifier of a disco package that the pages name in code (a span
// or a block: pkg.Name, pkg.Type.Method) is declared by that package, and
// every import path under the module names a directory of the repository.
func TestNamedIdentifiersExist(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: %v", len(pkgs), pkgs)
	}
	checked := 0
	for _, p := range readPages(t) {
		var spans [][]int
		spans = append(spans, fence.FindAllStringIndex(p.text, -1)...)
		spans = append(spans, codeSpan.FindAllStringIndex(p.text, -1)...)
		for _, sp := range spans {
			code := p.text[sp[0]:sp[1]]
			for _, m := range qualified.FindAllStringSubmatchIndex(code, -1) {
				pkg, name := code[m[2]:m[3]], code[m[4]:m[5]]
				dir, ok := pkgs[pkg]
				if !ok {
					continue // not a disco package (clientv3, http, ...) or a variable
				}
				e := declared(t, filepath.Join(root, dir))
				where := p.where(sp[0] + m[0])
				if !e.names[name] && !e.hasMember(name) {
					t.Errorf("%s names %s.%s: package %s declares no %s", where, pkg, name, dir, name)
					continue
				}
				checked++
				if m[6] >= 0 {
					member := code[m[6]:m[7]]
					if ms, isType := e.members[name]; isType && !ms[member] {
						t.Errorf("%s names %s.%s.%s: %s has no method or field %s", where, pkg, name, member, name, member)
					}
				}
			}
			for _, m := range importRef.FindAllStringSubmatch(code, -1) {
				rel := strings.TrimSuffix(strings.TrimSuffix(m[1], "@latest"), "/...")
				if rel == "" {
					continue
				}
				if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil || !st.IsDir() {
					t.Errorf("%s names %s, which is not a package of the repository", p.where(sp[0]), m[0])
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d identifiers checked: is the pattern stale?", checked)
	}
	t.Logf("%d identifiers checked", checked)
}

// link matches a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the pages leads to a file or directory that
// exists.
func TestLinksResolve(t *testing.T) {
	for _, p := range readPages(t) {
		for _, m := range link.FindAllStringSubmatchIndex(p.text, -1) {
			target := p.text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(p.path), filepath.FromSlash(target))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", p.where(m[0]), target)
			}
		}
	}
}

// fromMarker matches a snippet's source: a comment line naming the file,
// right before the fenced block that quotes it.
var fromMarker = regexp.MustCompile("<!-- from ([^ ]+) -->\n```[a-z]*\n((?s).*?)```")

// A snippet that says where it comes from quotes that file: its lines,
// but for "// ..." elisions, stand in the file in the same order.
func TestSnippetsQuoteTheirSource(t *testing.T) {
	n := 0
	for _, p := range readPages(t) {
		for _, m := range fromMarker.FindAllStringSubmatchIndex(p.text, -1) {
			n++
			file, snippet := p.text[m[2]:m[3]], p.text[m[4]:m[5]]
			src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				t.Errorf("%s quotes %s: %v", p.where(m[0]), file, err)
				continue
			}
			lines := strings.Split(string(src), "\n")
			at := 0
			for _, want := range strings.Split(snippet, "\n") {
				want = strings.TrimSpace(want)
				if want == "" || strings.HasPrefix(want, "// ...") {
					continue
				}
				for at < len(lines) && strings.TrimSpace(lines[at]) != want {
					at++
				}
				if at == len(lines) {
					t.Errorf("%s quotes %s, which has no line %q after the ones before it", p.where(m[0]), file, want)
					break
				}
				at++
			}
		}
	}
	if n == 0 {
		t.Error("no snippet names its source: is the marker stale?")
	}
}

// The README stays a ten-minute read.
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bytes.TrimSpace(b)); n > 15*1024 {
		t.Errorf("README.md is %d bytes, more than 15 KiB: move detail into docs/", n)
	}
}
