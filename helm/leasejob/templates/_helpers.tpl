{{/*
Names and labels, as `helm create` makes them.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "leasejob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A fully qualified app name, truncated at 63 characters (the DNS label limit). The release name
alone when it already contains the chart name.
*/}}
{{- define "leasejob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "leasejob.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "leasejob.labels" -}}
helm.sh/chart: {{ include "leasejob.chart" . }}
{{ include "leasejob.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels (add app.kubernetes.io/component per workload). */}}
{{- define "leasejob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasejob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* image: repository:tag, the tag defaulting to appVersion. Argument: dict with root and image (overrides). */}}
{{- define "leasejob.image" -}}
{{- $image := .image | default dict }}
{{- $repository := $image.repository | default .root.Values.image.repository }}
{{- $tag := $image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- printf "%s:%s" $repository (toString $tag) }}
{{- end }}

{{/*
The pods' ServiceAccount: serviceAccountName (an existing one, as before serviceAccount), else
serviceAccount.name, else with serviceAccount.create the release's own (<fullname>); empty: the
namespace's default.
*/}}
{{- define "leasejob.serviceAccountName" -}}
{{- if .Values.serviceAccountName }}
{{- .Values.serviceAccountName }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.create }}
{{- include "leasejob.fullname" . }}
{{- end }}
{{- end }}

{{/* The Secret holding the database URL: the existing one, or the one secret.yaml makes. */}}
{{- define "leasejob.databaseSecretName" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecret }}
{{- else }}
{{- printf "%s-database" (include "leasejob.fullname" .) }}
{{- end }}
{{- end }}

{{/* Environment every leasejob container gets: the database URL from the Secret, and the log level. */}}
{{- define "leasejob.commonEnv" -}}
# leasejob reads LEASEJOB_DATABASE_URL before DATABASE_URL; it does not pass it to the child.
- name: LEASEJOB_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "leasejob.databaseSecretName" . }}
      key: {{ .Values.database.secretKey }}
- name: LEASEJOB_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- include "leasejob.traceEnv" . }}
{{- end }}

{{/* traces.linkTemplate and traces.otel (docs/monitoring.md#a-trace-per-occurrence). */}}
{{- define "leasejob.traceEnv" -}}
{{- with (.Values.traces | default dict) }}
{{- if .linkTemplate }}
- name: LEASEJOB_TRACE_LINK_TEMPLATE
  value: {{ .linkTemplate | quote }}
{{- end }}
{{- range $k, $v := .otel }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A job's runner: the database URL from the Secret mounted as a file (leasejob.databaseVolume),
read through LEASEJOB_DATABASE_URL_FILE, so that it is not in leasejob's environment, which the
child (the same user) could read in /proc/<pid>/environ.
*/}}
{{- define "leasejob.runnerEnv" -}}
- name: LEASEJOB_DATABASE_URL_FILE
  value: /etc/leasejob/database/url
- name: LEASEJOB_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- include "leasejob.traceEnv" . }}
{{- end }}

{{/* The Secret's URL as the file /etc/leasejob/database/url: readable by the pod's fsGroup, not by others. */}}
{{- define "leasejob.databaseVolume" -}}
- name: database-url
  secret:
    secretName: {{ include "leasejob.databaseSecretName" . }}
    items:
      - key: {{ .Values.database.secretKey }}
        path: url
    # 0440
    defaultMode: 288
{{- end }}

{{/*
Pod-level settings shared by every workload. No service account token: leasejob never calls the
Kubernetes API. Argument: the root context, or dict with root and podSecurityContext (a job's own).
*/}}
{{- define "leasejob.podSpecCommon" -}}
{{- $own := hasKey . "podSecurityContext" }}
{{- $ownContext := .podSecurityContext }}
{{- with (.root | default .) }}
automountServiceAccountToken: false
{{- with (include "leasejob.serviceAccountName" .) }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $context := .Values.podSecurityContext | default dict }}
{{- if $own }}
{{- $context = $ownContext }}
{{- end }}
{{- with $context }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Milliseconds in a leasejob duration written in units (500ms, 90s, 2m, 1h30m, 1d); empty for
ISO-8601 (PT90S) or anything else, which the caller then does not check.
*/}}
{{- define "leasejob.durationMs" -}}
{{- $d := toString . }}
{{- if regexMatch "^([0-9]+(ms|s|m|h|d))+$" $d }}
{{- $ms := 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d)" $d -1 }}
{{- $n := regexFind "^[0-9]+" . | atoi }}
{{- $unit := regexReplaceAll "^[0-9]+" . "" }}
{{- $factor := get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000) $unit }}
{{- $ms = add $ms (mul $n $factor) }}
{{- end }}
{{- $ms }}
{{- end }}
{{- end }}

{{/*
Whole seconds in such a duration, rounded up; empty where leasejob.durationMs is.
*/}}
{{- define "leasejob.durationSeconds" -}}
{{- $ms := include "leasejob.durationMs" . }}
{{- if $ms }}
{{- div (add (atoi $ms) 999) 1000 }}
{{- end }}
{{- end }}
