#!/usr/bin/env python3
"""Kubernetes manifests for one model's image (deploy/Containerfile): a Deployment, a Service and a
HorizontalPodAutoscaler, written as YAML to stdout.

    deploy/k8s_manifests.py --binary build/smollm2/smollm2 --image registry/ingot-smollm2:1 \\
        [--name smollm2] [--replicas 1] [--max-replicas 4] [--queue-target 4] [--cpu 2] \\
        [-- serve options, e.g. --kv-memory 512 --grace 30]

- The memory request (and limit) is what `NAME serve --print-memory` says the serve options take
  (weights + KV pool + scratch), plus 10% and 64 MiB for the process itself (HTTP buffers,
  tokenizer, requests in flight): the pod is scheduled where it fits and never grows past it.
- Readiness is /ready (503 while loading, draining or stalled: no traffic), liveness /health (503
  only when the scheduler is stalled: restart), a startup probe on /alive covers the weights'
  load. SIGTERM drains: terminationGracePeriodSeconds is --grace plus 10 s.
- The autoscaler scales on ingot_num_requests_waiting (the queue depth each pod reports on
  /metrics) per pod; it needs the metric served through the custom metrics API (prometheus-adapter
  or similar), which this does not install.
- The container runs as the image's unprivileged user, read-only root filesystem, no capabilities.

tests/test_deploy.py validates the output against the Kubernetes API schemas (kubernetes-validate,
strict) offline.
"""
import argparse
import json
import math
import subprocess
import sys

MIB = 1 << 20


def memory_plan(binary, serve_options):
    r = subprocess.run([binary, "serve", "--print-memory", *serve_options], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        sys.exit(f"k8s_manifests: {binary} serve --print-memory failed:\n{r.stderr.strip()}")
    return json.loads(r.stdout)


def serve_grace(serve_options):
    """--grace of the serve options (serve's default 30 s)."""
    for i, a in enumerate(serve_options[:-1]):
        if a == "--grace":
            return float(serve_options[i + 1])
    return 30.0


def quote(s):
    return json.dumps(str(s))  # a JSON string is a valid YAML scalar


def manifests(a, plan):
    memory = math.ceil((plan["total_bytes"] * 1.10 + 64 * MIB) / MIB)
    grace = math.ceil(serve_grace(a.serve)) + 10
    labels = f"app.kubernetes.io/name: {quote(a.name)}"
    args = "".join(f"\n            - {quote(x)}" for x in a.serve) or " []"
    return f"""# {a.name}: weights {plan['weights_bytes'] / MIB:.0f} MiB + KV pool {plan['kv_bytes'] / MIB:.0f} MiB ({plan['kv_blocks']} blocks) + scratch {plan['scratch_bytes'] / MIB:.0f} MiB
# (`{a.binary} serve --print-memory{''.join(' ' + x for x in a.serve)}`), requested with 10% + 64 MiB for the process
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {quote(a.name)}
  labels:
    {labels}
spec:
  replicas: {a.replicas}
  selector:
    matchLabels:
      {labels}
  template:
    metadata:
      labels:
        {labels}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
        prometheus.io/path: /metrics
    spec:
      terminationGracePeriodSeconds: {grace}
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: server
          image: {quote(a.image)}
          args:{args}
          ports:
            - name: http
              containerPort: 8080
          resources:
            requests:
              cpu: {quote(a.cpu)}
              memory: {memory}Mi
            limits:
              memory: {memory}Mi
          startupProbe:
            httpGet:
              path: /alive
              port: http
            periodSeconds: 2
            failureThreshold: 150
          readinessProbe:
            httpGet:
              path: /ready
              port: http
            periodSeconds: 5
            failureThreshold: 2
          livenessProbe:
            httpGet:
              path: /health
              port: http
            periodSeconds: 10
            failureThreshold: 3
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
---
apiVersion: v1
kind: Service
metadata:
  name: {quote(a.name)}
  labels:
    {labels}
spec:
  selector:
    {labels}
  ports:
    - name: http
      port: 80
      targetPort: http
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {quote(a.name)}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {quote(a.name)}
  minReplicas: {a.replicas}
  maxReplicas: {a.max_replicas}
  metrics:
    - type: Pods
      pods:
        metric:
          name: ingot_num_requests_waiting
        target:
          type: AverageValue
          averageValue: {quote(a.queue_target)}
"""


def main():
    argv = sys.argv[1:]
    serve = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="deploy/k8s_manifests.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True, help="the model's binary (build/NAME/NAME): its memory plan")
    ap.add_argument("--image", required=True, help="the image deploy/Containerfile built for it")
    ap.add_argument("--name", help="the Deployment's name (default: the model's)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--queue-target", type=int, default=4, help="queued requests per pod the autoscaler aims at")
    ap.add_argument("--cpu", default="2", help="CPU request (cores)")
    a = ap.parse_args(own)
    a.serve = serve
    if a.replicas < 1 or a.max_replicas < a.replicas:
        ap.error("--replicas must be at least 1 and at most --max-replicas")
    plan = memory_plan(a.binary, serve)
    a.name = a.name or plan["model"]
    sys.stdout.write(manifests(a, plan))


if __name__ == "__main__":
    main()
