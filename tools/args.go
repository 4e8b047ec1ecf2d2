package tools

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// A tool's arguments are read into its own struct, once, by bindArgs: a
// field per argument, named by its json tag; `arg:"required"` marks a
// required one, `arg:"min=N"` the smallest value a number may take and
// `arg:"above=N"` a bound it must be more than.
// Field types: string, bool, int (a JSON integer) and float64 (a JSON
// number). Anything else the client sends — a wrong type (`"four"`, `3.9`
// or `1e300` for an integer, `"true"` for a boolean), a name the tool does
// not take, a missing required argument — is an error naming the argument
// and listing what the tool takes (SPEC §6); nothing is silently replaced
// by a default. null is taken as "not given": an optional argument keeps
// its default, a required one is missing.

// maxSafeInt is the largest integer a JSON number (a float64) holds exactly.
const maxSafeInt = 1 << 53

// argField is one argument of a tool's struct.
type argField struct {
	name     string
	index    int
	kind     reflect.Kind
	required bool
	min      *float64
	above    bool // min is exclusive
}

// argFields lists the arguments of an args struct type, in field order.
func argFields(t reflect.Type) []argField {
	var fields []argField
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		f := argField{name: name, index: i, kind: sf.Type.Kind()}
		for opt := range strings.SplitSeq(sf.Tag.Get("arg"), ",") {
			switch {
			case opt == "required":
				f.required = true
			case strings.HasPrefix(opt, "min="), strings.HasPrefix(opt, "above="):
				key, val, _ := strings.Cut(opt, "=")
				m, err := strconv.ParseFloat(val, 64)
				if err != nil {
					panic("tools: bad " + key + " in arg tag of " + t.Name() + "." + sf.Name)
				}
				f.min, f.above = &m, key == "above"
			}
		}
		switch f.kind {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Float64:
		default:
			panic("tools: argument " + name + " of " + t.Name() + " has unsupported type " + sf.Type.String())
		}
		fields = append(fields, f)
	}
	return fields
}

// fieldsOf caches argFields by type: the tags are read once per tool, not
// on every call.
var fieldsOf sync.Map // reflect.Type -> []argField

func cachedArgFields(t reflect.Type) []argField {
	if f, ok := fieldsOf.Load(t); ok {
		return f.([]argField)
	}
	f, _ := fieldsOf.LoadOrStore(t, argFields(t))
	return f.([]argField)
}

// kindName is the JSON schema type of a field kind.
func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int:
		return "integer"
	}
	return "number"
}

// argsUsage lists a tool's arguments: "read_file takes path (string,
// required), start_line (integer), ...".
func argsUsage(tool string, fields []argField) string {
	var parts []string
	for _, f := range fields {
		p := f.name + " (" + kindName(f.kind)
		if f.required {
			p += ", required"
		}
		parts = append(parts, p+")")
	}
	return tool + " takes " + strings.Join(parts, ", ")
}

// bindArgs reads the request's arguments into dst, a pointer to the tool's
// args struct holding the defaults.
func bindArgs(tool string, req mcp.CallToolRequest, dst any) error {
	v := reflect.ValueOf(dst).Elem()
	fields := cachedArgFields(v.Type())
	usage := func() string { return argsUsage(tool, fields) }
	raw := req.GetArguments()
	if raw == nil && req.Params.Arguments != nil {
		return fmt.Errorf("the arguments must be a JSON object; %s", usage())
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !slices.ContainsFunc(fields, func(f argField) bool { return f.name == k }) {
			return fmt.Errorf("unknown argument %q; %s", k, usage())
		}
	}
	for _, f := range fields {
		val, ok := raw[f.name]
		if !ok || val == nil {
			if f.required {
				return fmt.Errorf("missing required argument %q; %s", f.name, usage())
			}
			continue
		}
		if err := setArg(v.Field(f.index), f, val); err != nil {
			return fmt.Errorf("argument %q %v; %s", f.name, err, usage())
		}
	}
	return nil
}

// setArg stores one argument's JSON value in its field.
func setArg(dst reflect.Value, f argField, val any) error {
	switch f.kind {
	case reflect.String:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("must be a string, got %s", describe(val))
		}
		dst.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			return fmt.Errorf("must be a boolean (true or false), got %s", describe(val))
		}
		dst.SetBool(b)
		return nil
	}
	n, ok := number(val)
	if !ok {
		return fmt.Errorf("must be %s, got %s", article(kindName(f.kind)), describe(val))
	}
	if f.kind == reflect.Int {
		if n != math.Trunc(n) {
			return fmt.Errorf("must be an integer, got %s", describe(val))
		}
		if math.Abs(n) > maxSafeInt {
			return fmt.Errorf("is out of range: %s", describe(val))
		}
	}
	if f.min != nil && f.above && n <= *f.min {
		return fmt.Errorf("must be more than %s, got %s", strconv.FormatFloat(*f.min, 'g', -1, 64), describe(val))
	}
	if f.min != nil && n < *f.min {
		return fmt.Errorf("must be %s or more, got %s", strconv.FormatFloat(*f.min, 'g', -1, 64), describe(val))
	}
	if f.kind == reflect.Int {
		dst.SetInt(int64(n))
	} else {
		dst.SetFloat(n)
	}
	return nil
}

// number reads a JSON number (float64 from the wire; Go callers may pass
// ints).
func number(val any) (float64, bool) {
	switch n := val.(type) {
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

func article(kind string) string {
	if kind == "integer" {
		return "an integer"
	}
	return "a " + kind
}

// describe shows a value the client sent, short and on one line.
func describe(val any) string {
	switch v := val.(type) {
	case string:
		if len(v) > 40 { // not cut and quoted: a host path cut in half would not be masked
			return fmt.Sprintf("a string of %d bytes", len(v))
		}
		return "the string " + strconv.Quote(v)
	case bool:
		return "the boolean " + strconv.FormatBool(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case int, int64:
		return fmt.Sprint(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", val)
}

// exclusiveMinimum sets a number property's exclusiveMinimum (mcp-go has
// no option for it).
func exclusiveMinimum(n float64) mcp.PropertyOption {
	return func(schema map[string]any) { schema["exclusiveMinimum"] = n }
}
