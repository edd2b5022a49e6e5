{{/*
The `job` label Prometheus gives gpumemd's series, which the rules' `up{job=...}`
(GpumemdDown) must match: serviceMonitor.jobName, else the release name. The
Service carries it as the label gpumemd.io/job and the ServiceMonitor's
jobLabel names that label, so the Operator's job is exactly this value.
*/}}
{{- define "gpumemd.jobName" -}}
{{- .Values.serviceMonitor.jobName | default .Release.Name -}}
{{- end -}}

{{/*
How the kubelet probes gpumemd: GET /-/healthy, or, when webConfig turns on
TLS or basic auth, a TCP connect to the metrics port.
*/}}
{{- define "gpumemd.probe" -}}
{{- if .Values.webConfig -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: /-/healthy
  port: metrics
{{- end -}}
{{- end -}}
