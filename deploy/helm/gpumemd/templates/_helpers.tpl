{{/*
The `job` label Prometheus gives gpumemd's series, which the rules' `up{job=...}`
(GpumemdDown) must match: serviceMonitor.jobName, else the release name. The
Service carries it as the label gpumemd.io/job and the ServiceMonitor's
jobLabel names that label, so the Operator's job is exactly this value.
*/}}
{{- define "gpumemd.jobName" -}}
{{- .Values.serviceMonitor.jobName | default .Release.Name -}}
{{- end -}}
