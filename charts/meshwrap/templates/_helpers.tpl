{{/*
The names are fixed (kubectl-meshwrap/src/manifests.rs uses the same): the
webhook configuration is cluster-wide, so there is one release per cluster.
*/}}
{{- define "meshwrap.name" -}}meshwrap-webhook{{- end }}
{{- /*
The Secret the webhook serves with: the chart's (cert-manager's or its own),
or with certificates.mode=existing the one the user names and manages.
*/}}
{{- define "meshwrap.tlsSecret" -}}
{{- if eq .Values.certificates.mode "existing" -}}
{{- required "certificates.existing.secretName is required with certificates.mode=existing: the Secret (type kubernetes.io/tls, with tls.crt and tls.key) in the release's namespace that the webhook serves with, which you manage" .Values.certificates.existing.secretName -}}
{{- else -}}
meshwrap-webhook-tls
{{- end -}}
{{- end }}
{{- define "meshwrap.eventsRole" -}}meshwrap-webhook-events{{- end }}
{{- define "meshwrap.namespacesRole" -}}meshwrap-webhook-namespaces{{- end }}

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

{{/*
certificates.existing.caBundle, checked: base64 on one line (as the API
server reads the caBundle field) of PEM certificates, and no private key
(the webhook configuration is readable cluster-wide).
*/}}
{{- define "meshwrap.existingCABundle" -}}
{{- $bundle := required "certificates.existing.caBundle is required with certificates.mode=existing: the CA that signed the Secret's certificate, PEM, base64-encoded on one line (base64 -w0 ca.crt)" .Values.certificates.existing.caBundle -}}
{{- $pem := b64dec $bundle -}}
{{- if or (ne (b64enc $pem) $bundle) (not (contains "-----BEGIN CERTIFICATE-----" $pem)) -}}
{{- fail "certificates.existing.caBundle is not a PEM certificate encoded in base64 on one line: give the CA that signed the Secret's tls.crt as base64 -w0 ca.crt prints it" -}}
{{- end -}}
{{- if contains "PRIVATE KEY" $pem -}}
{{- fail "certificates.existing.caBundle holds a private key: give only the CA certificate(s); the webhook configuration is readable cluster-wide" -}}
{{- end -}}
{{- $bundle -}}
{{- end }}

{{/*
Where the monitors find the CA that verifies the webhook: its TLS Secret's
ca.crt (cert-manager's and the chart's have one), or with
certificates.mode=existing the ConfigMap the chart makes from the caBundle,
since a Secret the user manages need not hold ca.crt.
*/}}
{{- define "meshwrap.monitorCA" -}}
{{- if eq .Values.certificates.mode "existing" -}}
configMap:
  name: meshwrap-webhook-ca
  key: ca.crt
{{- else -}}
secret:
  name: {{ include "meshwrap.tlsSecret" . }}
  key: ca.crt
{{- end -}}
{{- end }}
