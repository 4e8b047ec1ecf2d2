package main

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/providers/local"
)

// network.mode and the older per-provider keys are one setting (SPEC §17):
// a mode left out is what the older key says, a mode given sets them, and
// the two contradicting each other stop start-up naming both.
func TestSettleNetwork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		// what the providers get
		mode, docker  string
		local, policy bool
	}{
		{"default none", "provider: docker\n", "none", "none", false, true},
		{"docker.network bridge is open", "provider: docker\ndocker: {network: bridge}\n", "open", "bridge", true, false},
		{"docker.network none", "provider: docker\ndocker: {network: none}\n", "none", "none", false, true},
		{"local.network true is open", "local: {network: true}\n", "open", "bridge", true, false},
		{"network_policy false is open", "provider: kubernetes\nkubernetes: {network_policy: false}\n", "open", "bridge", true, false},
		{"allowlist", "network: {mode: allowlist, allow: [pypi.org]}\n", "allowlist", "none", false, true},
		{"allowlist with docker.network none", "provider: docker\ndocker: {network: none}\nnetwork: {mode: allowlist}\n", "allowlist", "none", false, true},
		{"open keeps docker's named network", "provider: docker\ndocker: {network: mynet}\nnetwork: {mode: open}\n", "open", "mynet", true, false},
		{"open on kubernetes", "provider: kubernetes\nnetwork: {mode: open}\n", "open", "bridge", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(writeConfig(t, c.yaml+"state_dir: "+t.TempDir()+"\n"), env())
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(env("HOME", t.TempDir())); err != nil {
				t.Fatal(err)
			}
			if cfg.Network.Mode != c.mode || cfg.Docker.Network != c.docker || cfg.Local.Network != c.local ||
				cfg.Kubernetes.NetworkPolicy == nil || *cfg.Kubernetes.NetworkPolicy != c.policy {
				t.Errorf("mode %q docker %q local %v policy %v, want %q %q %v %v", cfg.Network.Mode, cfg.Docker.Network,
					cfg.Local.Network, cfg.Kubernetes.NetworkPolicy, c.mode, c.docker, c.local, c.policy)
			}
		})
	}
}

func TestSettleNetworkRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       []string // substrings of the one-line error
	}{
		{"bad mode", "network: {mode: some}\n", []string{"network.mode", "some"}},
		{"allowlist against docker.network", "provider: docker\ndocker: {network: bridge}\nnetwork: {mode: allowlist}\n",
			[]string{"network.mode allowlist", "docker.network bridge"}},
		{"none against local.network", "local: {network: true}\nnetwork: {mode: none}\n", []string{"network.mode none", "local.network true"}},
		{"allowlist against network_policy false", "provider: kubernetes\nkubernetes: {network_policy: false}\nnetwork: {mode: allowlist}\n",
			[]string{"network.mode allowlist", "kubernetes.network_policy false"}},
		{"open against docker.network none", "provider: docker\ndocker: {network: none}\nnetwork: {mode: open}\n",
			[]string{"network.mode open", "docker.network none"}},
		{"inject host not allowed", "network: {mode: allowlist, allow: [pypi.org], inject: [{host: api.example.com, header: Authorization, value: x}]}\n",
			[]string{"network.inject[0].host", "network.allow"}},
		{"inject value empty", "network: {mode: allowlist, allow: [api.example.com], inject: [{host: api.example.com, header: Authorization, value: ''}]}\n",
			[]string{"network.inject[0].value"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(writeConfig(t, c.yaml+"state_dir: "+t.TempDir()+"\n"), env())
			if err == nil {
				err = cfg.Validate(env("HOME", t.TempDir()))
			}
			if err == nil {
				t.Fatal("accepted")
			}
			msg := cfg.located(err).Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error of more than one line: %q", msg)
			}
		})
	}
}

// An injected header whose ${VAR} is unset stops start-up naming the key
// and the variable: the proxy must never send "Bearer " as a credential.
func TestInjectUnsetVariableRefused(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `network:
  mode: allowlist
  allow: [api.example.com]
  inject:
    - {host: api.example.com, header: Authorization, value: "Bearer ${API_KEY}"}
`)
	_, err := loadConfig(file, env())
	if err == nil || !strings.Contains(err.Error(), "network.inject[0].value") || !strings.Contains(err.Error(), "${API_KEY} is not set") {
		t.Fatalf("err = %v, want one naming network.inject[0].value and ${API_KEY}", err)
	}
	cfg, err := loadConfig(file, env("API_KEY", "k-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Network.Inject[0].Value; got != "Bearer k-1" {
		t.Errorf("value %q", got)
	}
}

// doctor says FAIL where the server would refuse an allowlist it cannot
// hold: bash with this machine's network (--allow-host-bash, a container).
func TestDoctorAllowlistNeedsBubblewrap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, isolation string
		hostBash        bool
	}{
		{"host bash", "none", true},
		{"container", local.IsolationContainer, false},
	} {
		cfg := &Config{Local: local.Config{Isolation: c.isolation, AllowHostBash: c.hostBash}}
		cfg.Network.Mode = "allowlist"
		if f := checkBash(t.Context(), cfg); f.status != "FAIL" || !strings.Contains(f.what, "network.mode allowlist") {
			t.Errorf("%s: %+v, want a FAIL naming network.mode allowlist", c.name, f)
		}
	}
}
