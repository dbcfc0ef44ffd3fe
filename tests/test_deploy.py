"""The container file and the Kubernetes manifests of deploy/, checked offline: the manifests
deploy/k8s_manifests.py writes for SmolLM2 validate strictly against the Kubernetes API's schemas
(kubernetes-validate bundles them) and ask for the memory `serve --print-memory` reports; the
runtime image installs exactly the Debian packages whose libraries the binary links. The image
itself is built and run only where a container engine with the Debian base image is present,
which the skip says plainly.
"""
import json
import math
import os
import re
import shutil
import subprocess
import time
import urllib.request

import kubernetes_validate
import pytest
import yaml

from conftest import ROOT, SAN
from modelbuild import serving_binary, smollm2_gguf

pytestmark = pytest.mark.skipif(SAN, reason="checks of files and of the optimized build; nothing runs under ASan")
DEPLOY = ROOT / "deploy"


def manifests(binary, *serve):
    r = subprocess.run([str(DEPLOY / "k8s_manifests.py"), "--binary", str(binary), "--image", "registry/ingot:1",
                        "--max-replicas", "6", "--", *serve], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_manifests_validate_and_ask_for_the_memory_plan(request):
    binary = serving_binary(request)
    docs = manifests(binary, "--kv-memory", "256", "--grace", "20")
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    for d in docs:
        kubernetes_validate.validate(d, "1.37.0", strict=True)
    plan = json.loads(subprocess.run([str(binary), "serve", "--print-memory", "--kv-memory", "256"],
                                     capture_output=True, text=True, check=True).stdout)
    pod = docs[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    want = math.ceil((plan["total_bytes"] * 1.10 + 64 * 2**20) / 2**20)
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"] == f"{want}Mi"
    assert c["args"] == ["--kv-memory", "256", "--grace", "20"]
    assert (c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"]) == ("/ready", "/health")
    assert pod["terminationGracePeriodSeconds"] == 30 and pod["securityContext"]["runAsNonRoot"] is True
    hpa = docs[2]["spec"]
    assert hpa["maxReplicas"] == 6 and hpa["metrics"][0]["pods"]["metric"]["name"] == "ingot_num_requests_waiting"
    # the metric the autoscaler reads is one the server exports
    assert "ingot_num_requests_waiting" in (ROOT / "runtime" / "serve" / "server.c").read_text()


def test_a_broken_manifest_is_caught():
    """The validation is not a formality: a probe without a port fails it."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"ports": [{"port": "eighty"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.37.0", strict=True)


def linked_packages(binary):
    """The Debian packages of the libraries the binary names as NEEDED, libc's aside."""
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(["readelf", "-d", str(binary)], capture_output=True,
                                                               text=True, check=True).stdout)
    ldd = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                                                                check=True).stdout, re.M))
    pkgs = set()
    for lib in needed:
        # the file the link names, found by name: /lib and /usr/lib are one folder (merged /usr)
        real = os.path.realpath(ldd[lib])
        name = os.path.join(os.path.basename(os.path.dirname(real)), os.path.basename(real))  # x86_64-linux-gnu/...
        owner = subprocess.run(["dpkg", "-S", f"*/{name}"], capture_output=True, text=True, check=True).stdout
        pkgs.add(owner.split(":")[0])
    return pkgs - {"libc6"}


def test_runtime_image_installs_what_the_binary_links(request):
    text = (DEPLOY / "Containerfile").read_text()
    runtime = text[text.index("AS runtime"):]
    listed = set(re.search(r"--no-install-recommends \\\n\s+(.+?) \\\n", runtime).group(1).split())
    assert listed == linked_packages(serving_binary(request))
    assert "USER 10001" in runtime and "apt-get" not in text[:text.index("AS build")]


def container_engine():
    for engine in ("podman", "docker"):
        if shutil.which(engine) and subprocess.run([engine, "image", "inspect", "debian:bookworm-slim"],
                                                   capture_output=True).returncode == 0:
            return engine
    return None


def test_image_builds_and_serves(tmp_path):
    engine = container_engine()
    if not engine:
        pytest.skip("no container engine (podman or docker) with the debian:bookworm-slim image on this machine, "
                    "and no registry to pull it from: the image is built and run where one is")
    model = smollm2_gguf().relative_to(ROOT)
    tag = "ingot-test-smollm2"
    r = subprocess.run([engine, "build", "-f", str(DEPLOY / "Containerfile"), "--build-arg", f"MODEL={model}",
                        "--build-arg", "NAME=smollm2", "-t", tag, str(ROOT)], capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = subprocess.run([engine, "run", "-d", "-p", "127.0.0.1::8080", tag], capture_output=True, text=True)
    cid = run.stdout.strip()
    try:
        port = subprocess.run([engine, "port", cid, "8080"], capture_output=True, text=True).stdout.split(":")[-1]
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port.strip()}/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        user = subprocess.run([engine, "exec", cid, "id", "-u"], capture_output=True, text=True).stdout.strip()
        assert user == "10001"
    finally:
        subprocess.run([engine, "rm", "-f", cid], capture_output=True)
