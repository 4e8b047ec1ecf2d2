package main

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The MCPB manifest's rules, version by version, written here from the
// specification (modelcontextprotocol/mcpb, MANIFEST.md and the v0.4
// schema it publishes: every object closed — additionalProperties false —
// its fields typed, enums and patterns as below), so that a manifest is
// checked against the version it declares, with no network. A manifest of
// a version this file does not know is refused: add its rules first.

// rule is a JSON Schema subset: a type, an object's properties (closed
// unless open), a map's values, an array's items, a string's enum,
// constant, pattern or URI format, alternatives.
type rule struct {
	typ      string // object, string, array, boolean, number; "" any
	props    map[string]*rule
	required []string
	values   *rule // an object whose every value is this (a map)
	open     bool  // an object that takes keys beyond props, unchecked
	items    *rule
	enum     []string
	konst    string
	pattern  *regexp.Regexp
	uri      bool
	minLen   int
	oneOf    []*rule          // alternatives, the first that fits taken
	pick     func(any) string // for oneOf: which alternative, by name (the server's type)
	names    []string         // oneOf's names, in order
}

func str() *rule              { return &rule{typ: "string"} }
func uri() *rule              { return &rule{typ: "string", uri: true} }
func boolean() *rule          { return &rule{typ: "boolean"} }
func number() *rule           { return &rule{typ: "number"} }
func arrayOf(r *rule) *rule   { return &rule{typ: "array", items: r} }
func mapOf(r *rule) *rule     { return &rule{typ: "object", values: r} }
func enum(vs ...string) *rule { return &rule{typ: "string", enum: vs} }
func pattern(re string) *rule { return &rule{typ: "string", pattern: regexp.MustCompile(re)} }
func konst(v string) *rule    { return &rule{typ: "string", konst: v} }
func obj(props map[string]*rule, required ...string) *rule {
	return &rule{typ: "object", props: props, required: required}
}

// check appends to errs what v breaks of r, each naming where (at).
func (r *rule) check(v any, at string, errs *[]string) {
	bad := func(format string, args ...any) { *errs = append(*errs, at+": "+fmt.Sprintf(format, args...)) }
	if r.oneOf != nil {
		name := r.pick(v)
		i := slices.Index(r.names, name)
		if i < 0 {
			bad("%q: want one of %s", name, strings.Join(r.names, ", "))
			return
		}
		r.oneOf[i].check(v, at, errs)
		return
	}
	switch r.typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("want an object, not %s", kind(v))
			return
		}
		for _, k := range r.required {
			if _, ok := m[k]; !ok {
				bad("%q is required", k)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch p := r.props[k]; {
			case p != nil:
				p.check(m[k], at+"."+k, errs)
			case r.values != nil:
				r.values.check(m[k], at+"."+k, errs)
			case !r.open:
				bad("%q is not a field of this version's manifest", k)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("want an array, not %s", kind(v))
			return
		}
		for i, x := range a {
			r.items.check(x, fmt.Sprintf("%s[%d]", at, i), errs)
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			bad("want a string, not %s", kind(v))
			return
		}
		switch {
		case r.konst != "" && s != r.konst:
			bad("%q: want %q", s, r.konst)
		case r.enum != nil && !slices.Contains(r.enum, s):
			bad("%q: want one of %s", s, strings.Join(r.enum, ", "))
		case r.pattern != nil && !r.pattern.MatchString(s):
			bad("%q does not match %s", s, r.pattern)
		case len(s) < r.minLen:
			bad("%q: at least %d characters", s, r.minLen)
		case r.uri:
			if u, err := url.Parse(s); err != nil || u.Scheme == "" {
				bad("%q is not a URI", s)
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, not %s", kind(v))
		}
	case "number":
		if _, ok := v.(float64); !ok {
			bad("want a number, not %s", kind(v))
		}
	}
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// mcpbRules are the manifest's rules by manifest_version.
var mcpbRules = map[string]*rule{"0.4": mcpbV04()}

func mcpbV04() *rule {
	mcpConfig := obj(map[string]*rule{
		"command": str(), "args": arrayOf(str()), "env": mapOf(str()),
		"platform_overrides": mapOf(obj(map[string]*rule{"command": str(), "args": arrayOf(str()), "env": mapOf(str())})),
	}, "command")
	server := func(typ string, required ...string) *rule {
		return obj(map[string]*rule{"entry_point": str(), "mcp_config": mcpConfig, "type": konst(typ)}, required...)
	}
	anyDefault := &rule{} // a string, number, boolean or array of strings
	return obj(map[string]*rule{
		"$schema":          str(),
		"dxt_version":      konst("0.4"),
		"manifest_version": konst("0.4"),
		"name":             str(),
		"display_name":     str(),
		"version":          str(),
		"description":      str(),
		"long_description": str(),
		"author":           obj(map[string]*rule{"name": str(), "email": str(), "url": uri()}, "name"),
		"repository":       obj(map[string]*rule{"type": str(), "url": uri()}, "type", "url"),
		"homepage":         uri(),
		"documentation":    uri(),
		"support":          uri(),
		"icon":             str(),
		"icons": arrayOf(obj(map[string]*rule{
			"src": str(), "size": pattern(`^\d+x\d+$`), "theme": {typ: "string", minLen: 1},
		}, "src", "size")),
		"screenshots": arrayOf(str()),
		"localization": obj(map[string]*rule{
			"resources": pattern(`\$\{locale\}`), "default_locale": pattern(`^[A-Za-z0-9]{2,8}(?:-[A-Za-z0-9]{1,8})*$`),
		}, "resources", "default_locale"),
		"server": {
			names: []string{"python", "node", "binary", "uv"},
			oneOf: []*rule{
				server("python", "entry_point", "mcp_config", "type"), server("node", "entry_point", "mcp_config", "type"),
				server("binary", "entry_point", "mcp_config", "type"), server("uv", "entry_point", "type"),
			},
			pick: func(v any) string { m, _ := v.(map[string]any); s, _ := m["type"].(string); return s },
		},
		"tools":             arrayOf(obj(map[string]*rule{"name": str(), "description": str()}, "name")),
		"tools_generated":   boolean(),
		"prompts":           arrayOf(obj(map[string]*rule{"name": str(), "description": str(), "arguments": arrayOf(str()), "text": str()}, "name", "text")),
		"prompts_generated": boolean(),
		"keywords":          arrayOf(str()),
		"license":           str(),
		"privacy_policies":  arrayOf(uri()),
		"compatibility": obj(map[string]*rule{
			"claude_desktop": str(),
			"platforms":      arrayOf(enum("darwin", "win32", "linux")),
			"runtimes":       obj(map[string]*rule{"python": str(), "node": str()}),
		}),
		"user_config": mapOf(obj(map[string]*rule{
			"type":  enum("string", "number", "boolean", "directory", "file"),
			"title": str(), "description": str(), "required": boolean(), "default": anyDefault,
			"multiple": boolean(), "sensitive": boolean(), "min": number(), "max": number(),
		}, "type", "title", "description")),
		"_meta": mapOf(&rule{typ: "object", open: true}),
	}, "name", "version", "description", "author", "server")
}

// validateManifest is what m breaks of the rules of the manifest_version
// it declares (dxt_version, the old name, where it has none).
func validateManifest(m map[string]any) []string {
	v, _ := m["manifest_version"].(string)
	if v == "" {
		v, _ = m["dxt_version"].(string)
	}
	r := mcpbRules[v]
	if r == nil {
		return []string{fmt.Sprintf("manifest_version %q: no rules for it here (known: 0.4)", v)}
	}
	var errs []string
	r.check(m, "manifest", &errs)
	if d, ok := m["user_config"].(map[string]any); ok {
		for k, o := range d {
			o, _ := o.(map[string]any)
			switch def := o["default"].(type) {
			case nil, string, float64, bool:
			case []any:
				for _, x := range def {
					if _, ok := x.(string); !ok {
						errs = append(errs, "manifest.user_config."+k+".default: an array of strings only")
					}
				}
			default:
				errs = append(errs, "manifest.user_config."+k+".default: want a string, number, boolean or array of strings")
			}
		}
	}
	sort.Strings(errs)
	return errs
}
