"""Runs a model binary's `serve` command for tests: a free port, wait for /ready, stop with SIGTERM.

    with ServerProc(binary, "--kv-blocks", "64") as srv:
        requests.get(srv.url + "/health")
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")

`ServerProc(ROOT / "ingot", command=["serve", MODEL, "--name", NAME])` starts
the server through the front end instead (it builds the binary first if
needed, then execs it: the process is the server).

The server binds port 0 and reports the port it got on its "listening on"
line, so parallel servers never race for a port. Its stderr is collected in
`log` (the sanitizer report of a --san binary lands there too).
`wait_ready=False` returns as soon as it listens (for a server whose /ready
is meant to answer 503).
"""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

LISTEN = re.compile(r"listening on http://([^:\s]+):(\d+)")


class ServerProc:
    def __init__(self, binary, *args, env=None, start_timeout=120, command=("serve",), wait_ready=True):
        self.binary = str(binary)
        self.wait_ready = wait_ready
        self.command = [str(c) for c in command]
        self.args = [str(a) for a in args]
        self.env = dict(os.environ, **(env or {}))
        self.start_timeout = start_timeout
        self.proc = None
        self.lines = []
        self.port = None
        self._listening = threading.Event()

    # ---- lifecycle --------------------------------------------------------
    def start(self):
        cmd = [self.binary, *self.command, "--host", "127.0.0.1", "--port", "0", *self.args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace", env=self.env)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.time() + self.start_timeout
        while not self._listening.wait(0.1):
            if self.proc.poll() is not None or time.time() > deadline:
                self.kill()
                raise RuntimeError(f"server did not start: {' '.join(cmd)}\n{self.log}")
        if not self.wait_ready:
            return self
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/ready", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server never became ready\n{self.log}")

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            m = LISTEN.search(line)
            if m and not self._listening.is_set():
                self.port = int(m.group(2))
                self._listening.set()

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=60):
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout=60):
        """Waits for the exit (after a signal sent with signal()); the log is complete afterwards."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self._reader.join(10)
        return rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- views ------------------------------------------------------------
    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self):
        return self.url + "/v1"

    @property
    def log(self):
        return "".join(self.lines)

    def health(self):
        """GET /health as a dict (it must answer 200)."""
        with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
            assert r.status == 200, r.status
            return json.loads(r.read())

    def metrics(self):
        """GET /metrics: ({(name, labels): value}, the text); every sample line must parse."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), r.status
            text = r.read().decode()
        return parse_metrics(text), text

    def sanitizer_report(self):
        """Lines of an ASan/UBSan/LSan report in the log, if any."""
        pat = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: .*Sanitizer")
        return [l for l in self.lines if pat.search(l)]


def parse_metrics(text):
    """Prometheus text exposition → {(name, labels): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
        assert m, f"bad sample line: {line!r}"
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


class Poller:
    """Calls poll() every `period` seconds on a background thread while the
    with block runs (errors of one poll are ignored: the server may be busy)."""

    def __init__(self, poll, period=0.05):
        self.poll, self.period = poll, period
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:
                pass
            self._stop.wait(self.period)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(10)
