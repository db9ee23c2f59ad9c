{{/* Names, labels and the image reference shared by every template. */}}

{{/* The chart's name: "tracehouse", or nameOverride. */}}
{{- define "tracehouse.name" -}}
{{- default "tracehouse" .Values.nameOverride | trunc 54 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: fullnameOverride, else the release name, or "<release>-<name>" when it does not contain the chart's name (nameOverride). */}}
{{- define "tracehouse.fullname" -}}
{{- $name := include "tracehouse.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Where the release's namespaced objects go: namespaceOverride, else the release's namespace
(for an umbrella chart that installs into one namespace and wants the operator in another). */}}
{{- define "tracehouse.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* The operator's Deployment, ClusterRole and Lease name. */}}
{{- define "tracehouse.operatorName" -}}
{{- printf "%s-operator" (include "tracehouse.fullname" .) -}}
{{- end -}}

{{- define "tracehouse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tracehouse.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tracehouse.selectorLabels" -}}
app.kubernetes.io/name: tracehouse-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tracehouse.labels" -}}
{{ include "tracehouse.selectorLabels" . }}
app.kubernetes.io/part-of: tracehouse
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: repository:tag (tag defaults to the
chart's appVersion), or repository@digest; global.imageRegistry, when set, is prefixed. */}}
{{- define "tracehouse.imageRef" -}}
{{- $repo := .image.repository -}}
{{- with ((.root.Values.global).imageRegistry) }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The operator image. */}}
{{- define "tracehouse.image" -}}
{{- include "tracehouse.imageRef" (dict "image" .Values.image "root" .) -}}
{{- end -}}

{{/* global.imagePullSecrets (names or {name}) as a list of {name}, then `secrets`. */}}
{{- define "tracehouse.pullSecrets" -}}
{{- $out := list -}}
{{- range ((.root.Values.global).imagePullSecrets) -}}
{{- if kindIs "string" . }}{{ $out = append $out (dict "name" .) }}{{ else }}{{ $out = append $out (dict "name" .name) }}{{ end -}}
{{- end -}}
{{- range .secrets }}{{ $out = append $out (dict "name" .name) }}{{ end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The chart's collector defaults as the operator reads them (TRACEHOUSE_COLLECTOR_DEFAULTS). */}}
{{- define "tracehouse.collectorDefaults" -}}
{{- $c := .Values.collector -}}
{{- $d := dict "image" (include "tracehouse.imageRef" (dict "image" $c.image "root" .)) "upgradePolicy" $c.upgradePolicy "metricsBind" ($c.metricsBind | default "All") -}}
{{- $secrets := include "tracehouse.pullSecrets" (dict "root" . "secrets" $c.imagePullSecrets) | fromJsonArray -}}
{{- with $secrets }}{{ $_ := set $d "imagePullSecrets" . }}{{ end -}}
{{- with $c.serviceAccountName }}{{ $_ := set $d "serviceAccountName" . }}{{ end -}}
{{- with $c.nodeSelector }}{{ $_ := set $d "nodeSelector" . }}{{ end -}}
{{- with $c.tolerations }}{{ $_ := set $d "tolerations" . }}{{ end -}}
{{- with $c.affinity }}{{ $_ := set $d "affinity" . }}{{ end -}}
{{- if kindIs "slice" $c.topologySpreadConstraints }}{{ $_ := set $d "topologySpreadConstraints" $c.topologySpreadConstraints }}{{ end -}}
{{- with $c.priorityClassName }}{{ $_ := set $d "priorityClassName" . }}{{ end -}}
{{- with $c.podAnnotations }}{{ $_ := set $d "podAnnotations" . }}{{ end -}}
{{- with $c.podLabels }}{{ $_ := set $d "podLabels" . }}{{ end -}}
{{- with $c.resources }}{{ $_ := set $d "resources" . }}{{ end -}}
{{- with $c.podSecurityContext }}{{ $_ := set $d "podSecurityContext" . }}{{ end -}}
{{- with $c.securityContext }}{{ $_ := set $d "securityContext" . }}{{ end -}}
{{- toJson $d -}}
{{- end -}}

{{/* The rules of config/rbac/role.yaml (copied into files/ by charts/gen): the ClusterRole's or the Role's. */}}
{{- define "tracehouse.rules" -}}
{{- $name := .name -}}
{{- range splitList "\n---\n" (.root.Files.Get "files/rbac/role.yaml") -}}
{{- $doc := fromYaml . -}}
{{- if eq (get (get $doc "metadata") "name") $name -}}
{{- toYaml (get $doc "rules") -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the operator keeps the CRD current (crds.enabled, cluster mode only: in namespaced
mode nothing cluster-scoped is granted). */}}
{{- define "tracehouse.crdUpgrade" -}}
{{- if and .Values.crds.enabled (not (include "tracehouse.watchNamespaces" . | fromJsonArray)) -}}true{{- end -}}
{{- end -}}

{{/* The namespaces the operator watches, as a list: watchNamespaces, plus watchNamespace (the
older one-namespace value, a one-element shorthand), without repeats; empty: the whole cluster. */}}
{{- define "tracehouse.watchNamespaces" -}}
{{- $all := concat (.Values.watchNamespaces | default list) (compact (list (.Values.watchNamespace | default ""))) -}}
{{- toJson (uniq $all) -}}
{{- end -}}
