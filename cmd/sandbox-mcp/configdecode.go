package main

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// configError is one problem of a config file: its line and what is wrong,
// naming the key by its path ("docker.image", "mounts[0].host_path").
type configError struct {
	line int
	msg  string
}

func (e *configError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// envRef is a variable reference: ${VAR}, or ${VAR:-default} (the default
// when VAR is unset or empty, as in sh).
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// decoder fills a config struct from a YAML tree, one key at a time, so
// that every error names the key's path and line: an unknown key (with
// the key it may have meant), a value of the wrong type, a variable that
// is not set. It expands ${VAR} in values (never in keys) on the way.
type decoder struct {
	lookup func(string) (string, bool)
	refs   map[string]string // placeholder -> the ${...} it stands for
	// vars names, by key path, the variables a value was made of.
	vars map[string][]string
	errs []error // every problem found, in the order of the file
	// warns are unset variables outside the tokens, each one line.
	warns []string
}

// fail notes a problem; decoding goes on, so that one run names them all.
func (d *decoder) fail(line int, format string, args ...any) {
	d.errs = append(d.errs, &configError{line, fmt.Sprintf(format, args...)})
}

// expand puts the variables' values into a scalar in place of their
// placeholders. A plain (unquoted) scalar that held one is typed again
// from its new value, so "bash_timeout_max: ${T}" gives a number; quoted
// ones stay strings. An unset variable (without a default) is empty with
// a warning, except in a token or an injected header, where it is an
// error.
func (d *decoder) expand(n *yaml.Node, path string) bool {
	v := n.Value
	changed := false
	for ph, ref := range d.refs {
		if !strings.Contains(v, ph) {
			continue
		}
		m := envRef.FindStringSubmatch(ref)
		name := m[1]
		val, ok := d.lookup(name)
		switch {
		case m[2] != "" && val == "":
			val = m[2][2:] // the default
		case !ok && strings.HasPrefix(path, "http.auth_tokens"):
			// An unset token would turn auth off (SPEC §10).
			d.fail(n.Line, "%s: ${%s} is not set (an empty token would turn auth off)", path, name)
			return false
		case !ok && strings.HasPrefix(path, "network.inject"):
			// A header the proxy adds to an API's requests: half a
			// credential ("Bearer ") is no credential (SPEC §17).
			d.fail(n.Line, "%s: ${%s} is not set (the proxy would send the header without its secret)", path, name)
			return false
		case !ok:
			// Elsewhere an unset variable is empty, as in docker compose,
			// and said in a start-up warning naming the key.
			d.warns = append(d.warns, fmt.Sprintf("line %d: %s: ${%s} is not set: using an empty value (write ${%s:-} to mean empty)", n.Line, path, name, name))
		default:
			d.vars[path] = append(d.vars[path], name)
		}
		v = strings.ReplaceAll(v, ph, val)
		changed = true
	}
	if changed {
		n.Value = v
		if n.Style == 0 {
			n.Tag = ""
			n.Style = yaml.DoubleQuotedStyle
			if isPlainNumberOrBool(v) {
				n.Style = 0
			}
		}
	}
	return true
}

var plainScalar = regexp.MustCompile(`^(-?[0-9]+(\.[0-9]+)?|true|false)$`)

func isPlainNumberOrBool(s string) bool { return plainScalar.MatchString(s) }

// decode fills v (addressable) from n; path names n's key.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) > 0 {
			d.decode(n.Content[0], v, path)
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // "key:" with nothing: the default
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
		return
	case reflect.Struct:
		if !v.Addr().Type().Implements(textUnmarshaler) && !v.Addr().Type().Implements(yamlUnmarshaler) {
			d.decodeStruct(n, v, path)
			return
		}
	case reflect.Map:
		d.decodeMap(n, v, path)
		return
	case reflect.Slice:
		d.decodeSlice(n, v, path)
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.wrongType(n, v, path)
		return
	}
	if !d.expand(n, path) {
		return
	}
	if v.Type() == durationType {
		d.decodeDuration(n, v, path)
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.wrongType(n, v, path)
	}
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeDuration reads a time: a plain number is seconds (SPEC §8 writes
// every time in seconds), a string a Go duration ("90s", "10m").
func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	if n.ShortTag() == "!!int" {
		var sec int64
		if err := n.Decode(&sec); err != nil || sec > math.MaxInt64/int64(time.Second) || sec < math.MinInt64/int64(time.Second) {
			d.wrongType(n, v, path)
			return
		}
		v.SetInt(sec * int64(time.Second))
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if n.ShortTag() != "!!str" || err != nil {
		d.wrongType(n, v, path)
		return
	}
	v.SetInt(int64(dur))
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
)

// yamlFields maps the YAML keys of a struct to its fields, the fields of
// ",inline" structs included.
func yamlFields(t reflect.Type, index []int, fields map[string][]int, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		at := append(append([]int(nil), index...), i)
		switch {
		case opts == "inline" && f.Type.Kind() == reflect.Struct:
			yamlFields(f.Type, at, fields, names)
		case name == "-" || !f.IsExported():
		default:
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			fields[name] = at
			*names = append(*names, name)
		}
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.wrongType(n, v, path)
		return
	}
	fields := map[string][]int{}
	var names []string
	yamlFields(v.Type(), nil, fields, &names)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.fail(k.Line, "%s is set twice (first on line %d)", key, line)
			continue
		}
		seen[k.Value] = k.Line
		f, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", key)
			if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", join(path, s))
			}
			d.fail(k.Line, "%s", msg)
			continue
		}
		d.decode(val, v.FieldByIndex(f), key)
	}
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.wrongType(n, v, path)
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.fail(k.Line, "%s is set twice (first on line %d)", key, line)
			continue
		}
		seen[k.Value] = k.Line
		kv := reflect.New(v.Type().Key()).Elem()
		if err := k.Decode(kv.Addr().Interface()); err != nil {
			d.fail(k.Line, "%s: key %q: want %s", path, k.Value, describe(v.Type().Key()))
			continue
		}
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, ev, key)
		v.SetMapIndex(kv, ev)
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.wrongType(n, v, path)
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
}

// wrongType says what the key wants and what it got.
func (d *decoder) wrongType(n *yaml.Node, v reflect.Value, path string) {
	got := ""
	switch n.Kind {
	case yaml.MappingNode:
		got = "a mapping"
	case yaml.SequenceNode:
		got = "a list"
	default:
		val := n.Value
		if len(val) > 40 {
			val = val[:40] + "…"
		}
		got = fmt.Sprintf("%q", val)
		if vars := d.vars[path]; len(vars) > 0 {
			got += " (from ${" + strings.Join(vars, "}, ${") + "})"
		}
	}
	d.fail(n.Line, "%s: want %s, got %s", path, describe(v.Type()), got)
}

// describe says what a Go type takes in YAML.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t.String() == "time.Duration" {
			return "seconds (like 600) or a duration (like 10m)"
		}
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + plural(describe(t.Elem()))
	case reflect.Map:
		return "a mapping of " + plural(describe(t.Elem()))
	case reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

func plural(s string) string {
	for _, a := range []string{"an ", "a "} {
		if r, ok := strings.CutPrefix(s, a); ok {
			return r + "s"
		}
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest returns the name closest to key, when it is close enough to be a
// typo of it.
func suggest(key string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(strings.ToLower(key), n)
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" || bestD > max(2, len(key)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
