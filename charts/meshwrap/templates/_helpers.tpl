{{/*
The names are fixed (kubectl-meshwrap/src/manifests.rs uses the same): the
webhook configuration is cluster-wide, so there is one release per cluster.
*/}}
{{- define "meshwrap.name" -}}meshwrap-webhook{{- end }}
{{- define "meshwrap.tlsSecret" -}}meshwrap-webhook-tls{{- end }}
{{- define "meshwrap.eventsRole" -}}meshwrap-webhook-events{{- end }}

{{/* The labels every object carries: manifests' two, and Helm's. */}}
{{- define "meshwrap.labels" -}}
app.kubernetes.io/name: meshwrap-webhook
app.kubernetes.io/part-of: meshwrap
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{/* The webhook's pods; also its Service's, PDB's and monitors' selector. */}}
{{- define "meshwrap.selector" -}}
app.kubernetes.io/name: meshwrap-webhook
{{- end }}

{{/*
The release's namespace, checked as manifests checks --namespace: never a
system namespace, nor default (whose pods the webhook would then never wrap,
since it never selects its own namespace).
*/}}
{{- define "meshwrap.namespace" -}}
{{- $ns := .Release.Namespace -}}
{{- if has $ns (list "kube-system" "kube-public" "kube-node-lease" "default") -}}
{{- fail (printf "namespace %s is refused: the webhook is never installed into a system namespace or default; choose its own, e.g. helm install --namespace meshwrap-system --create-namespace" $ns) -}}
{{- end -}}
{{- $ns -}}
{{- end }}

{{/* The Service's DNS names, as the API server dials it. */}}
{{- define "meshwrap.dnsNames" -}}
{{- $ns := include "meshwrap.namespace" . -}}
{{- list "meshwrap-webhook" (printf "meshwrap-webhook.%s" $ns) (printf "meshwrap-webhook.%s.svc" $ns) (printf "meshwrap-webhook.%s.svc.cluster.local" $ns) | toJson -}}
{{- end }}

{{/* matchConditions: asked for, and the cluster is 1.30 or newer (GA). */}}
{{- define "meshwrap.matchConditions" -}}
{{- if and .Values.admission.matchConditions (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) -}}true{{- end -}}
{{- end }}

{{- define "meshwrap.webhookImage" -}}
{{- $repository := required "webhook.image.repository is required: the kubectl-meshwrap image the webhook runs, e.g. --set webhook.image.repository=registry.example.com/kubectl-meshwrap" .Values.webhook.image.repository -}}
{{- printf "%s:%s" $repository (.Values.webhook.image.tag | default .Chart.AppVersion) -}}
{{- end }}
