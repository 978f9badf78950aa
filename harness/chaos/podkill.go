package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PodKill deletes pods, as an eviction, a drain or `kubectl delete pod` would. Its evidence is
// the API's word that the kill happened: every victim's UID is gone, and a pod with a new UID
// replaces each victim that had a controller.
type PodKill struct {
	// Client reaches the cluster's apiserver.
	Client kubernetes.Interface
	// Namespace and Selector (a label selector, e.g. "app=echo") choose the pods.
	Namespace, Selector string
	// Count is how many pods to delete, oldest first (default 1).
	Count int
	// Grace overrides the pods' termination grace period in seconds (nil: their own; 0: at once).
	Grace *int64
	// Timeout bounds the wait for the victims to go and their replacements to appear (default
	// 2 minutes).
	Timeout time.Duration
}

// victim is a deleted pod and whether a controller will replace it.
type victim struct {
	name       string
	uid        types.UID
	controlled bool
}

// Name implements Injector: "pod-kill/NAMESPACE/SELECTOR".
func (k *PodKill) Name() string { return "pod-kill/" + k.Namespace + "/" + k.Selector }

// Inject deletes Count matching pods and returns once their UIDs are gone from the API and
// replacements (pods with new UIDs) exist for those a controller owned.
func (k *PodKill) Inject(ctx context.Context) (Evidence, error) {
	count := orDefault(k.Count, 1)
	if count < 0 {
		return Evidence{}, fmt.Errorf("%s: Count %d: want 1 or more pods", k.Name(), k.Count)
	}
	pods, err := livePods(ctx, k.Client, k.Namespace, k.Selector)
	if err != nil {
		return Evidence{}, fmt.Errorf("%s: %w", k.Name(), err)
	}
	if len(pods) < count {
		return Evidence{}, fmt.Errorf("%s: %d live pods match, %d to kill: check the namespace and selector, or lower Count", k.Name(), len(pods), count)
	}
	// Every UID seen now, so that no pod present before the kill counts as a replacement.
	before := map[types.UID]bool{}
	for _, p := range pods {
		before[p.UID] = true
	}
	var victims []victim
	start := time.Now()
	for _, p := range pods[:count] {
		uid := p.UID
		err := k.Client.CoreV1().Pods(k.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: k.Grace, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return Evidence{}, fmt.Errorf("%s: delete pod %s: %w (may this client delete pods in %s?)", k.Name(), p.Name, err, k.Namespace)
		}
		victims = append(victims, victim{name: p.Name, uid: uid, controlled: metav1.GetControllerOf(&p) != nil})
	}
	gone, replaced, err := k.waitKilled(ctx, victims, before, start)
	if err != nil {
		return Evidence{}, err
	}
	return k.evidence(victims, replaced, gone.Sub(start), time.Since(start)), nil
}

// waitKilled polls until every victim's UID is gone and each controlled victim has a
// replacement; it returns when the last victim went and the replacements' names.
func (k *PodKill) waitKilled(ctx context.Context, victims []victim, before map[types.UID]bool, start time.Time) (time.Time, []string, error) {
	timeout := orDefault(k.Timeout, 2*time.Minute)
	wantNew := 0
	for _, v := range victims {
		if v.controlled {
			wantNew++
		}
	}
	var gone time.Time
	for {
		var left []string
		for _, v := range victims {
			ok, err := podGone(ctx, k.Client, k.Namespace, v.name, v.uid)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("%s: %w", k.Name(), err)
			}
			if !ok {
				left = append(left, v.name)
			}
		}
		if len(left) == 0 && gone.IsZero() {
			gone = time.Now()
		}
		var fresh []string
		if len(left) == 0 {
			pods, err := livePods(ctx, k.Client, k.Namespace, k.Selector)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("%s: %w", k.Name(), err)
			}
			for _, p := range pods {
				if !before[p.UID] {
					fresh = append(fresh, p.Name)
				}
			}
			if len(fresh) >= wantNew {
				return gone, fresh, nil
			}
		}
		if time.Since(start) > timeout {
			if len(left) > 0 {
				return time.Time{}, nil, fmt.Errorf("%s: pods %s still exist %s after their deletion: a finalizer or a long grace period holds them; set Grace or inspect them with kubectl", k.Name(), strings.Join(left, ", "), timeout)
			}
			return time.Time{}, nil, fmt.Errorf("%s: %d of %d replacement pods appeared within %s: check the pods' controller (kubectl describe) and the namespace's quota", k.Name(), len(fresh), wantNew, timeout)
		}
		if err := pause(ctx, pollEvery); err != nil {
			return time.Time{}, nil, fmt.Errorf("%s: waiting for the kill to take effect: %w", k.Name(), err)
		}
	}
}

func (k *PodKill) evidence(victims []victim, replaced []string, gone, all time.Duration) Evidence {
	names := make([]string, len(victims))
	for i, v := range victims {
		names[i] = fmt.Sprintf("%s (uid %.8s)", v.name, v.uid)
	}
	ev := Evidence{At: time.Now(), Values: map[string]float64{
		"killed": float64(len(victims)), "replaced": float64(len(replaced)), "goneSeconds": gone.Seconds(),
	}}
	ev.Summary = fmt.Sprintf("deleted %s; gone from the API after %.1f s", strings.Join(names, ", "), gone.Seconds())
	if len(replaced) > 0 {
		ev.Summary += fmt.Sprintf(", replaced by %s after %.1f s", strings.Join(replaced, ", "), all.Seconds())
		ev.Values["replacedSeconds"] = all.Seconds()
	}
	return ev
}

// Clear implements Injector: a kill cannot be undone, the pods' controllers did that already.
func (k *PodKill) Clear(context.Context) (Evidence, error) {
	return Evidence{At: time.Now(), Summary: "nothing to clear: the killed pods' controllers replace them"}, nil
}

var _ Injector = (*PodKill)(nil)
