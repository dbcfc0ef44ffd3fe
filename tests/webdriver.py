"""A W3C WebDriver client over HTTP (requests) for the headless Chromium tests: chromedriver is
Debian's (chromium-driver) and speaks the protocol's JSON REST API, so no browser-automation
package is needed.

    with Browser() as b:
        b.get(url)
        b.find("#prompt").send_keys("Hello\\n")
        b.run("return document.title")
"""
import shutil
import socket
import subprocess
import time

import requests

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Element:
    def __init__(self, browser, eid):
        self.b, self.eid = browser, eid

    def send_keys(self, text):
        self.b.call("POST", f"element/{self.eid}/value", {"text": text})

    def clear(self):
        self.b.call("POST", f"element/{self.eid}/clear", {})

    def click(self):
        self.b.call("POST", f"element/{self.eid}/click", {})


class Browser:
    def __init__(self, timeout=60):
        self.timeout = timeout
        self.driver = shutil.which("chromedriver")
        self.chromium = shutil.which("chromium")
        if not self.driver or not self.chromium:
            raise RuntimeError("chromium and chromium-driver (Debian) are needed: scripts/setup.sh installs them")

    def __enter__(self):
        self.port = free_port()
        self.proc = subprocess.Popen([self.driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while True:
            try:
                if requests.get(self.base + "/status", timeout=2).json()["value"]["ready"]:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise RuntimeError("chromedriver did not start")
            time.sleep(0.1)
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": self.chromium,
                                       "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage", "--window-size=1200,900"]}}
        r = requests.post(self.base + "/session", json={"capabilities": {"alwaysMatch": caps}}, timeout=self.timeout)
        value = r.json()["value"]
        if "sessionId" not in value:
            raise RuntimeError(f"no browser session: {value}")
        self.session = value["sessionId"]
        return self

    def __exit__(self, *exc):
        try:
            requests.delete(f"{self.base}/session/{self.session}", timeout=30)
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def call(self, method, path, body=None):
        r = requests.request(method, f"{self.base}/session/{self.session}/{path}", json=body, timeout=self.timeout)
        value = r.json().get("value")
        if r.status_code != 200:
            raise RuntimeError(f"{method} {path}: {value}")
        return value

    def get(self, url):
        self.call("POST", "url", {"url": url})

    def find(self, css):
        return Element(self, self.call("POST", "element", {"using": "css selector", "value": css})[ELEMENT])

    def run(self, script, *args):
        return self.call("POST", "execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, script, timeout=60, *args):
        """Polls a script until it returns something truthy; returns that."""
        deadline = time.time() + timeout
        while True:
            v = self.run(script, *args)
            if v:
                return v
            if time.time() > deadline:
                raise TimeoutError(f"waited {timeout} s for: {script}")
            time.sleep(0.05)

    def console(self):
        """The browser console's entries so far ([{level, message}])."""
        return self.call("POST", "se/log", {"type": "browser"})
