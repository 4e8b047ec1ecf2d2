package kubernetes

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// recordsProvider is a pvc provider of prefix on clientset cs, which
// keeps records, without a cluster (records.go's calls only).
func recordsProvider(t *testing.T, cs *fake.Clientset, prefix string) *Provider {
	t.Helper()
	cfg := Config{Namespace: "ns", PodPrefix: prefix, Logger: slog.New(slog.DiscardHandler)}
	if err := setDefaults(&cfg); err != nil {
		t.Fatal(err)
	}
	return &Provider{cfg: cfg, cs: cs, log: cfg.Logger, records: true}
}

// Records, as the API keeps them (a fake clientset): of many replicas
// recording one new thread at once, with a Pod name each, every one gets
// the one name recorded first; a thread without a record is named by its
// own hash; a record is never taken for another thread's (its annotation)
// nor followed to a Pod not of this prefix; Discard's deleteRecord leaves
// another thread's alone.
func TestRecords(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	reps := make([]*Provider, 8)
	for i := range reps {
		reps[i] = recordsProvider(t, cs, "r")
	}
	ctx := t.Context()
	key := "thread-" + randomHex(4)
	if name, ok, err := reps[0].recorded(ctx, key); err != nil || ok || name != PodName("r", key) {
		t.Fatalf("no record: %q %v %v", name, ok, err)
	}
	got := make([]string, len(reps))
	var wg sync.WaitGroup
	for i, p := range reps {
		wg.Go(func() {
			pod := PodName("r", key)
			if i > 0 {
				pod = "r-warm-" + strings.Repeat(string(rune('0'+i)), 16)
			}
			name, err := p.record(ctx, key, pod)
			if err != nil {
				t.Error(err)
			}
			got[i] = name
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] || got[i] == "" {
			t.Fatalf("replicas recording one thread at once got %q", got)
		}
	}
	if name, ok, err := reps[3].recorded(ctx, key); err != nil || !ok || name != got[0] {
		t.Fatalf("recorded: %q %v %v, want %s", name, ok, err, got[0])
	}
	leases, err := cs.CoordinationV1().Leases("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) != 1 || leases.Items[0].Name != claimName(PodName("r", key)) || leases.Items[0].Annotations[annThread] != key {
		t.Fatalf("records: %+v %v", leases, err)
	}

	// A record under the thread's name that is another thread's, or
	// names no Pod of the prefix.
	for _, c := range []struct {
		thread, holder, want string
	}{
		{"someone-else", "r-warm-0123456789abcdef", "another thread's"},
		{"", "r-warm-0123456789abcdef", "another thread's"},
		{"x", "other-pod", "no Pod of this pod_prefix"},
		{"x", "r-warm-../x", "no Pod of this pod_prefix"},
	} {
		th := "x"
		l := reps[0].recordOf(th, c.holder)
		l.Annotations[annThread] = c.thread
		cs.CoordinationV1().Leases("ns").Delete(ctx, l.Name, metav1.DeleteOptions{})
		if _, err := cs.CoordinationV1().Leases("ns").Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := reps[0].recorded(ctx, th); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("record of %q naming %q: %v, want %q", c.thread, c.holder, err, c.want)
		}
		if _, err := reps[1].record(ctx, th, PodName("r", th)); err == nil {
			t.Errorf("record of %q naming %q taken for the thread", c.thread, c.holder)
		}
		if err := reps[0].deleteRecord(ctx, th); err != nil {
			t.Fatal(err)
		}
		_, err := cs.CoordinationV1().Leases("ns").Get(ctx, l.Name, metav1.GetOptions{})
		if mine := c.thread == th; mine != apierrors.IsNotFound(err) {
			t.Errorf("deleteRecord of a record of %q: %v", c.thread, err)
		}
	}
	if err := reps[0].deleteRecord(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := reps[0].recorded(ctx, key); err != nil || ok {
		t.Fatalf("after deleteRecord: %v %v", ok, err)
	}
}

// A Role without leases: the server keeps no records (mayKeepRecords).
func TestRecordsForbidden(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "x", nil)
	})
	p := recordsProvider(t, cs, "r")
	if p.mayKeepRecords(t.Context()) {
		t.Fatal("may keep records under a Role without leases")
	}
	if !recordsProvider(t, fake.NewClientset(), "r").mayKeepRecords(t.Context()) {
		t.Fatal("may not keep records with leases allowed")
	}
}
