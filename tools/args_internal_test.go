package tools

import (
	"reflect"
	"strings"
	"testing"
)

// An args struct's tags are its tool's schema and binding rules: a tag the
// reader does not know (a misspelt "required", a bound that is no number,
// a field without a description) stops the tools being made instead of
// being ignored.
func TestArgFieldsRefuseBadTags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		typ  any
		want string
	}{
		{"misspelt option", struct {
			A string `json:"a" arg:"requird" jsonschema_description:"d"`
		}{}, `unknown option "requird"`},
		{"bad bound", struct {
			A int `json:"a" arg:"minimum=one" jsonschema_description:"d"`
		}{}, "bad minimum"},
		{"bad maximum", struct {
			A int `json:"a" arg:"maximum=" jsonschema_description:"d"`
		}{}, "bad maximum"},
		{"no description", struct {
			A string `json:"a"`
		}{}, "jsonschema_description"},
		{"json option", struct {
			A string `json:"a,omitempty" jsonschema_description:"d"`
		}{}, "json name"},
		{"other jsonschema option", struct {
			A string `json:"a" jsonschema:"minLength=1" jsonschema_description:"d"`
		}{}, "only enum="},
		{"unsupported type", struct {
			A []string `json:"a" jsonschema_description:"d"`
		}{}, "unsupported type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if p, _ := recover().(string); !strings.Contains(p, tc.want) {
					t.Errorf("panic %q, want it to say %q", p, tc.want)
				}
			}()
			argFields(reflect.TypeOf(tc.typ))
		})
	}
}
