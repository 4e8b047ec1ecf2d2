package local

import (
	"runtime"
	"strings"
	"testing"
)

func TestLimitsResolve(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   Limits
		pids int64
		mem  int64
		cpu  float64
	}{
		{Limits{}, 1024, 4 << 30, float64(runtime.NumCPU())},
		{Limits{Pids: 64, Memory: "512m", CPU: 0.5}, 64, 512 << 20, 0.5},
		{Limits{Memory: "1G"}, 1024, 1 << 30, float64(runtime.NumCPU())},
		{Limits{Memory: "32m", CPU: 0.01}, 1024, 32 << 20, 0.01},
		{Limits{Memory: "1.5g"}, 1024, 3 << 29, float64(runtime.NumCPU())},
	} {
		got, err := c.in.resolve()
		if err != nil || got.Pids != c.pids || got.Memory != c.mem || got.CPU != c.cpu {
			t.Errorf("%+v: %+v %v, want pids %d memory %d cpu %v", c.in, got, err, c.pids, c.mem, c.cpu)
		}
	}
}

func TestValidateNamesTheLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   Limits
		want string
	}{
		{Limits{Pids: -1}, "local.limits.pids -1"},
		{Limits{Memory: "lots"}, `local.limits.memory "lots"`},
		{Limits{Memory: "-4g"}, `local.limits.memory "-4g"`},
		{Limits{Memory: "1m"}, `local.limits.memory "1m": want a size like 512m or 4g, at least 32m`},
		{Limits{CPU: -1}, "local.limits.cpu -1"},
		{Limits{CPU: 0.001}, "local.limits.cpu 0.001"},
	} {
		cfg := Config{Limits: c.in}
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %s…", c.in, err, c.want)
		}
	}
}
