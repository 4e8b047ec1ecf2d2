package tools

import (
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// A tool's arguments are declared once, as a struct: a field per argument,
// named by its json tag and described by its jsonschema_description tag
// (as the facts structs are). `arg:"required"` marks a required one;
// `arg:"minimum=N"` is the smallest value a number may take and
// `arg:"exclusiveMinimum=N"` a bound it must be more than, `arg:"maximum=N"`
// the largest (the schema's own keywords); `jsonschema:"enum=a,enum=b"` lists the values a string takes
// (the tool checks them and names them in its error).
// Field types: string, bool, int (a JSON integer) and float64 (a JSON
// number).
//
// newTool makes the tool's input schema from that struct and reads each
// call's arguments into it. Anything else the client sends — a wrong type
// (`"four"`, `3.9` or `1e300` for an integer, `"true"` for a boolean), a
// name the tool does not take, a missing required argument — is an error
// naming the argument and listing what the tool takes (SPEC §6); nothing is
// silently replaced by a default. null is taken as "not given": an optional
// argument keeps its default, a required one is missing.

// newTool is the tool name whose arguments are the struct A: its input
// schema is made from A's fields, and its handler reads each call's
// arguments into a copy of defaults before calling handle.
func newTool[A any](name string, defaults A, handle func(context.Context, *Env, A) *Result, opts ...mcp.ToolOption) Tool {
	fields := argFields(reflect.TypeFor[A]())
	return Tool{
		Def: mcp.NewTool(name, append(opts, func(t *mcp.Tool) { t.InputSchema = inputSchema(fields) })...),
		Handle: func(ctx context.Context, env *Env, req mcp.CallToolRequest) *Result {
			a := defaults
			if err := bindArgs(name, fields, req, reflect.ValueOf(&a).Elem()); err != nil {
				return fail(err)
			}
			return handle(ctx, env, a)
		},
	}
}

// maxSafeInt is the largest integer a JSON number (a float64) holds exactly.
const maxSafeInt = 1 << 53

// argField is one argument of a tool's struct.
type argField struct {
	name, desc string
	index      int
	kind       reflect.Kind
	required   bool
	bound      string // "minimum" or "exclusiveMinimum", of min; "": none
	min        float64
	hasMax     bool // maximum: max is the largest value
	max        float64
	enum       []string
}

// argFields lists the arguments of an args struct type, in field order. A
// tag it cannot read is a mistake in this package: it panics when the
// tools are made.
func argFields(t reflect.Type) []argField {
	var fields []argField
	for i := range t.NumField() {
		sf := t.Field(i)
		where := t.Name() + "." + sf.Name
		f := argField{name: sf.Tag.Get("json"), desc: sf.Tag.Get("jsonschema_description"), index: i, kind: sf.Type.Kind()}
		if f.name == "" || strings.Contains(f.name, ",") || f.desc == "" {
			panic("tools: " + where + " needs a json name (no options) and a jsonschema_description")
		}
		for opt := range strings.SplitSeq(sf.Tag.Get("arg"), ",") {
			key, val, _ := strings.Cut(opt, "=")
			switch key {
			case "":
			case "required":
				f.required = true
			case "minimum", "exclusiveMinimum":
				m, err := strconv.ParseFloat(val, 64)
				if err != nil {
					panic("tools: bad " + key + " in the arg tag of " + where)
				}
				f.bound, f.min = key, m
			case "maximum":
				m, err := strconv.ParseFloat(val, 64)
				if err != nil {
					panic("tools: bad " + key + " in the arg tag of " + where)
				}
				f.hasMax, f.max = true, m
			default:
				panic("tools: unknown option " + strconv.Quote(opt) + " in the arg tag of " + where)
			}
		}
		if tag := sf.Tag.Get("jsonschema"); tag != "" {
			for opt := range strings.SplitSeq(tag, ",") {
				v, ok := strings.CutPrefix(opt, "enum=")
				if !ok {
					panic("tools: only enum= options in the jsonschema tag of " + where)
				}
				f.enum = append(f.enum, v)
			}
		}
		switch f.kind {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Float64:
		default:
			panic("tools: argument " + f.name + " of " + t.Name() + " has unsupported type " + sf.Type.String())
		}
		fields = append(fields, f)
	}
	return fields
}

// inputSchema is the JSON schema of a tool's arguments.
func inputSchema(fields []argField) mcp.ToolInputSchema {
	s := mcp.ToolInputSchema{Type: "object", Properties: map[string]any{}}
	for _, f := range fields {
		p := map[string]any{"type": kindName(f.kind), "description": f.desc}
		if f.bound != "" {
			p[f.bound] = f.min
		}
		if f.hasMax {
			p["maximum"] = f.max
		}
		if f.enum != nil {
			p["enum"] = f.enum
		}
		s.Properties[f.name] = p
		if f.required {
			s.Required = append(s.Required, f.name)
		}
	}
	return s
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

// bindArgs reads the request's arguments into dst, the tool's args struct
// holding the defaults.
func bindArgs(tool string, fields []argField, req mcp.CallToolRequest, dst reflect.Value) error {
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
		if err := setArg(dst.Field(f.index), f, val); err != nil {
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
	if !ok && f.kind == reflect.Int {
		return fmt.Errorf("must be an integer, got %s", describe(val))
	}
	if !ok {
		return fmt.Errorf("must be a number, got %s", describe(val))
	}
	if f.kind == reflect.Int {
		if n != math.Trunc(n) {
			return fmt.Errorf("must be an integer, got %s", describe(val))
		}
		if math.Abs(n) > maxSafeInt {
			return fmt.Errorf("is out of range: %s", describe(val))
		}
	}
	if f.bound == "exclusiveMinimum" && n <= f.min {
		return fmt.Errorf("must be more than %s, got %s", strconv.FormatFloat(f.min, 'g', -1, 64), describe(val))
	}
	if f.bound == "minimum" && n < f.min {
		return fmt.Errorf("must be %s or more, got %s", strconv.FormatFloat(f.min, 'g', -1, 64), describe(val))
	}
	if f.hasMax && n > f.max {
		return fmt.Errorf("must be %s or less, got %s", strconv.FormatFloat(f.max, 'g', -1, 64), describe(val))
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
