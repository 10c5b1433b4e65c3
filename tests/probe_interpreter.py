"""One fresh interpreter that runs many probe snippets in turn, for the tests that probe a framework
in a subprocess (TensorFlow and torch never share the pytest process). Importing TensorFlow costs
about 10 CPU-seconds per process; a module whose probes each started their own interpreter paid it
once per probe.

A snippet prints one JSON object last, as it would in an interpreter of its own; it runs in a
namespace of its own, its standard output captured. A snippet that configures the framework's
devices (which must happen before the framework's first operation) needs an interpreter of its own.
"""

import json
import subprocess
import threading

# What the interpreter runs: one JSON line per snippet in, one marked JSON line per snippet out
# (the framework's native code may write to the same standard output, unmarked).
MARK = ":::PROBE-ANSWER "
SERVE = f"""
import contextlib, io, json, sys, traceback
for line in sys.stdin:
    captured = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(captured):
            exec(compile(json.loads(line), "<probe>", "exec"), {{"__name__": "__probe__"}})
    except BaseException:
        error = traceback.format_exc()
    sys.stdout.write({MARK!r} + json.dumps({{"stdout": captured.getvalue(), "error": error}}) + "\\n")
    sys.stdout.flush()
"""


class ProbeInterpreter:
    """`python` started once; `run(code)` is what `python -c code` would print, as JSON."""

    def __init__(self, python: str):
        self.python = python
        self.process = None

    def run(self, code: str, timeout: float = 300) -> dict:
        if self.process is None:
            self.process = subprocess.Popen([self.python, "-c", SERVE], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        watchdog = threading.Timer(timeout, self.process.kill)
        watchdog.start()
        try:
            answer = self._answer()
        finally:
            watchdog.cancel()
        assert answer["error"] is None, answer["error"][-3000:]
        return json.loads(answer["stdout"].strip().splitlines()[-1])

    def _answer(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise AssertionError(f"the probe interpreter ended (status {self.process.wait()}) before answering")

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)
            self.process = None
