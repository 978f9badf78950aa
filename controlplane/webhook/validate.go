package webhook

import (
	"encoding/json"
	"fmt"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// validate admits a ServiceEntry or WorkloadEntry only if the control plane would use all of
// it: the model's own conversion is the rule, so what is admitted is what is served.
func (s *Server) validate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	gvr := req.Resource
	if req.Operation == admissionv1.Delete || len(req.Object.Raw) == 0 {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	reason, err := "", error(nil)
	switch gvr.Resource {
	case "serviceentries":
		var se networkingv1.ServiceEntry
		if err = json.Unmarshal(req.Object.Raw, &se); err != nil {
			reason = "decode"
			break
		}
		_, skips, cerr := model.ConvertServiceEntry(req.Namespace, req.Name, &se.Spec)
		switch {
		case cerr != nil:
			reason, err = "invalid", cerr
		case len(skips) > 0:
			reason, err = "invalid", skips[0]
		}
	case "workloadentries":
		var we networkingv1.WorkloadEntry
		if err = json.Unmarshal(req.Object.Raw, &we); err != nil {
			reason = "decode"
			break
		}
		if _, skip := model.ConvertWorkloadEntry(req.Namespace, req.Name, &we.Spec); skip != nil {
			reason, err = "invalid", *skip
		}
	default:
		reason, err = "unknown_kind", fmt.Errorf("the validation webhook does not handle %s", gvr.Resource)
	}
	if err != nil {
		s.metrics.ValidationFailed.WithLabelValues(gvr.Group, gvr.Version, gvr.Resource, reason).Inc()
		return deny(fmt.Errorf("%s %s/%s: %w", gvr.Resource, req.Namespace, req.Name, err))
	}
	s.metrics.ValidationPassed.WithLabelValues(gvr.Group, gvr.Version, gvr.Resource).Inc()
	return &admissionv1.AdmissionResponse{Allowed: true}
}
