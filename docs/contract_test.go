package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	goyaml "github.com/pb33f/go-yaml"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"go.yaml.in/yaml/v3"

	"github.com/raftlock/raftlock/docs"
)

// These tests read docs/openapi.yaml and docs/api.md as a user's generator and a user's eyes
// do: every body has an example, and every error code the server can send is in both, under
// the same HTTP status.

// specDoc is docs/openapi.yaml as plain YAML data.
func specDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(docs.OpenAPI(), &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return doc
}

// at walks keys down a YAML map, nil where one is missing.
func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// resolve follows a local $ref ("#/components/...") to what it names, and returns its name.
func resolve(doc map[string]any, v any) (any, string) {
	ref, ok := at(v, "$ref").(string)
	if !ok {
		return v, ""
	}
	keys := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
	return at(doc, keys...), ref
}

// sortedKeys returns a YAML map's keys in order, so that failures read the same every run.
func sortedKeys(v any) []string {
	m, _ := v.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// bodies calls f for each request and answer body of every operation: its place, for
// failures, and its media type object.
func bodies(doc map[string]any, f func(where string, media map[string]any)) {
	paths := at(doc, "paths")
	for _, p := range sortedKeys(paths) {
		for _, method := range sortedKeys(at(paths, p)) {
			op, ok := at(paths, p, method).(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			rb, _ := resolve(doc, op["requestBody"])
			content := at(rb, "content")
			for _, ct := range sortedKeys(content) {
				m, _ := at(content, ct).(map[string]any)
				f(fmt.Sprintf("%s %s request %s", strings.ToUpper(method), p, ct), m)
			}
			for _, status := range sortedKeys(op["responses"]) {
				r, ref := resolve(doc, at(op, "responses", status))
				content := at(r, "content")
				for _, ct := range sortedKeys(content) {
					m, _ := at(content, ct).(map[string]any)
					where := fmt.Sprintf("%s %s → %s %s", strings.ToUpper(method), p, status, ct)
					if ref != "" {
						where += " (" + ref + ")"
					}
					f(where, m)
				}
			}
		}
	}
}

// binary reports whether a media type's bodies are bytes or text a generator does not model
// (a backup, a profile, the console's files, the metrics, the spec itself): an example of
// those would say nothing.
func binary(media map[string]any) bool {
	schema, _ := at(media, "schema").(map[string]any)
	return schema["type"] == "string"
}

// Every JSON body the spec describes, asked or answered, has an example: a generator puts it
// in the client's documentation, and a reader sees a body before reading its schema.
func TestOpenAPIEveryBodyHasAnExample(t *testing.T) {
	doc := specDoc(t)
	n, missing := 0, []string{}
	seen := map[string]bool{}
	bodies(doc, func(where string, media map[string]any) {
		if binary(media) {
			return
		}
		n++
		ex, exs := media["example"], at(media, "examples")
		if ex == nil && len(sortedKeys(exs)) == 0 {
			// A shared answer ($ref) is reported once, under its first operation.
			key := where
			if i := strings.Index(where, " (#/"); i >= 0 {
				key = where[i:]
			}
			if !seen[key] {
				seen[key] = true
				missing = append(missing, where)
			}
		}
		for _, name := range sortedKeys(exs) {
			if at(exs, name, "value") == nil {
				t.Errorf("%s: example %q has no value", where, name)
			}
		}
	})
	if n < 50 {
		t.Fatalf("only %d JSON bodies found: the walk reads the wrong part of the spec", n)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d JSON bodies have no example (add `example:` beside their schema):\n  %s", len(missing), n, strings.Join(missing, "\n  "))
	}
}

// serverCodes returns the error codes the server can send: the Code constants of the api
// package, read from its source.
func serverCodes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	var codes []string
	files, err := os.ReadDir("../api")
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range files {
		if !strings.HasSuffix(fi.Name(), ".go") || strings.HasSuffix(fi.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, "../api/"+fi.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					codes = append(codes, s)
				}
			}
			return true
		})
	}
	sort.Strings(codes)
	if len(codes) < 20 {
		t.Fatalf("only %d error codes found in package api: the walk reads the wrong source", len(codes))
	}
	return codes
}

// apiMdCodes returns docs/api.md's table of error codes: code → HTTP status.
func apiMdCodes(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("api.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| ([0-9]{3}) \\| `([a-z_]+)` \\|")
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		if prev, dup := out[m[2]]; dup {
			t.Errorf("docs/api.md's table names %s twice (%s and %s)", m[2], prev, m[1])
		}
		out[m[2]] = m[1]
	}
	return out
}

// specCodes returns, for each error code the spec documents, the HTTP statuses under which
// an answer names it: in the code enum or const of its schema, and in its description.
func specCodes(t *testing.T, doc map[string]any) (enum []string, byStatus map[string][]string) {
	t.Helper()
	for _, c := range at(doc, "components", "schemas", "ErrorCode", "enum").([]any) {
		enum = append(enum, c.(string))
	}
	sort.Strings(enum)
	byStatus = map[string][]string{}
	add := func(code, status string) {
		if !slices.Contains(byStatus[code], status) {
			byStatus[code] = append(byStatus[code], status)
		}
	}
	bodies(doc, func(where string, media map[string]any) {
		_, answer, ok := strings.Cut(where, "→ ")
		if !ok {
			return // a request body
		}
		status := strings.Fields(answer)[0]
		schema, _ := resolve(doc, media["schema"])
		code := at(schema, "properties", "error", "properties", "code")
		code, _ = resolve(doc, code)
		if c, ok := at(code, "const").(string); ok {
			add(c, status)
		}
		if cs, ok := at(code, "enum").([]any); ok {
			for _, c := range cs {
				add(c.(string), status)
			}
		}
	})
	return enum, byStatus
}

// Every error code the server can send is in the spec's ErrorCode enum, in the schema of the
// answer of its HTTP status, in that answer's description, and in docs/api.md's table under the
// same status; neither names a code the server does not have.
func TestErrorCodesInSpecAndTable(t *testing.T) {
	doc := specDoc(t)
	server := serverCodes(t)
	table := apiMdCodes(t)
	enum, byStatus := specCodes(t, doc)
	if !slices.Equal(enum, server) {
		t.Errorf("the spec's ErrorCode enum %v\nis not the server's codes %v", enum, server)
	}
	descriptions := map[string]string{} // status → the descriptions of its answers
	for _, name := range sortedKeys(at(doc, "components", "responses")) {
		desc, _ := at(doc, "components", "responses", name, "description").(string)
		descriptions[name] = desc
	}
	for _, code := range server {
		status, ok := table[code]
		if !ok {
			t.Errorf("docs/api.md's error table lacks %s", code)
		}
		statuses := byStatus[code]
		if len(statuses) == 0 && ok {
			// Answered before any operation is chosen (an unknown method, headers too large):
			// the spec's general rules name it, with its status.
			if info, _ := at(doc, "info", "description").(string); !strings.Contains(info, "`"+status+" "+code+"`") {
				t.Errorf("no answer of the spec has the error code %s in its schema, and its info does not name `%s %s`", code, status, code)
			}
			continue
		}
		if len(statuses) == 0 {
			t.Errorf("no answer of the spec has the error code %s in its schema", code)
			continue
		}
		if ok && !slices.Contains(statuses, status) {
			t.Errorf("%s: docs/api.md's table says HTTP %s, the spec's answers carry it under %v", code, status, statuses)
		}
		described := false
		for _, d := range descriptions {
			described = described || strings.Contains(d, "`"+code+"`")
		}
		if !described {
			t.Errorf("no answer of the spec (components/responses) describes %s", code)
		}
	}
	for code := range table {
		if !slices.Contains(server, code) {
			t.Errorf("docs/api.md's error table names %s, which the server never sends", code)
		}
	}
}

// Every example of a JSON body is valid under its schema, so that a reader who copies one
// sends what the server takes, and one who expects one reads what the server sends.
func TestOpenAPIExamplesMatchTheirSchemas(t *testing.T) {
	m := v3Model(t)
	sv := schema_validation.NewSchemaValidator()
	n := 0
	check := func(where string, media *v3.MediaType) {
		if media == nil || media.Schema == nil {
			return
		}
		values := map[string]*goyaml.Node{}
		if media.Example != nil {
			values["example"] = media.Example
		}
		for name, ex := range media.Examples.FromOldest() {
			values[name] = ex.Value
		}
		for name, node := range values {
			var v any
			if err := node.Decode(&v); err != nil {
				t.Errorf("%s: example %s: %v", where, name, err)
				continue
			}
			n++
			if ok, errs := sv.ValidateSchemaObject(media.Schema.Schema(), v); !ok {
				for _, e := range errs {
					t.Errorf("%s: example %s does not match its schema: %s %s %v", where, name, e.Message, e.Reason, e.SchemaValidationErrors)
				}
			}
		}
	}
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if op.RequestBody != nil {
				for ct, media := range op.RequestBody.Content.FromOldest() {
					check(fmt.Sprintf("%s %s request %s", method, path, ct), media)
				}
			}
			for status, r := range op.Responses.Codes.FromOldest() {
				for ct, media := range r.Content.FromOldest() {
					check(fmt.Sprintf("%s %s → %s %s", method, path, status, ct), media)
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d examples checked: the walk reads the wrong part of the spec", n)
	}
}

// Each error body is one flat object, as generators read it: `error` and the fields beside it
// (a 409's `holder`, `available_in`, `limit`) are its own properties, not an allOf whose second
// part redefines `error`, which some generators turn into a type with two `error` fields.
func TestOpenAPIErrorBodiesAreFlat(t *testing.T) {
	doc := specDoc(t)
	schemas := at(doc, "components", "schemas")
	n := 0
	for _, name := range sortedKeys(schemas) {
		if !strings.HasSuffix(name, "Error") {
			continue
		}
		n++
		s := at(schemas, name)
		if at(s, "allOf") != nil || at(s, "oneOf") != nil || at(s, "anyOf") != nil {
			t.Errorf("schema %s is composed (allOf/oneOf/anyOf); make it one object", name)
		}
		if at(s, "type") != "object" || at(s, "properties", "error", "properties", "code") == nil || at(s, "properties", "error", "properties", "message") == nil {
			t.Errorf("schema %s is not an object with error.code and error.message", name)
		}
	}
	for _, field := range []string{"holder", "available_in", "limit"} {
		if at(schemas, "ConflictError", "properties", field) == nil {
			t.Errorf("ConflictError has no %s beside error", field)
		}
	}
	if n < 10 {
		t.Fatalf("only %d error schemas: the walk reads the wrong part of the spec", n)
	}
}

// An acquire names its session or asks for one with a TTL, never both and never neither, and
// the schema says so (the server refuses the others with 400).
func TestOpenAPIAcquireTakesSessionOrTTL(t *testing.T) {
	m := v3Model(t)
	proxy, ok := m.Model.Components.Schemas.Get("AcquireRequest")
	if !ok {
		t.Fatal("no AcquireRequest schema")
	}
	sv := schema_validation.NewSchemaValidator()
	const id = "9f1c2e4b7a0d4c6e8f1a2b3c4d5e6f70"
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"session": "` + id + `"}`, true},
		{`{"session": "` + id + `", "wait": "10s", "value": "a"}`, true},
		{`{"ttl": "15s"}`, true},
		{`{"ttl": "15s", "wait": "1s"}`, true},
		{`{"session": "` + id + `", "ttl": "15s"}`, false},
		{`{}`, false},
		{`{"wait": "10s"}`, false},
	} {
		if got, _ := sv.ValidateSchemaString(proxy.Schema(), c.body); got != c.want {
			t.Errorf("AcquireRequest %s: valid %v, want %v", c.body, got, c.want)
		}
	}
}

// v3Model builds the OpenAPI 3 model of the served spec.
func v3Model(t *testing.T) *libopenapi.DocumentModel[v3.Document] {
	t.Helper()
	doc, err := libopenapi.NewDocument(docs.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
