"""What the HTTP door's end-to-end tests share: the demo target, the prompt,
failing with a message, and starting a real splitspec-server whose log names
its ports."""
import os
import re
import subprocess
import sys
import time

PROMPT = "Once upon a time, there was a little robot"
MAX_TOKENS = 24


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def target(source):
    return os.path.join(source, "models", "demo-target")


def openai_package(material):
    return os.path.abspath(os.path.join(material, "npm", "node_modules", "openai"))


def start_server(bin_dir, source, args, err, want=("serving", "http"), model=None):
    """A server of `model` (the demo target by default) on free ports with
    `args`, its log in the file `err`; returns the process, {event: port}
    for the `want` start lines, and the log."""
    server = subprocess.Popen([os.path.join(bin_dir, "splitspec-server"), "--target", model or target(source), "--listen",
                               "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--threads", "1", "--log-level", "info",
                               *args], stderr=err)
    ports, log = {}, ""
    for _ in range(600):
        err.seek(0)
        log = err.read()
        for name in want:
            m = re.search(r"event=%s listen=\S+ port=(\d+)" % name, log)
            if m:
                ports[name] = int(m.group(1))
        if len(ports) == len(want):
            return server, ports, log
        if server.poll() is not None:
            fail("the server exited: " + log)
        time.sleep(0.1)
    server.kill()
    fail("the server did not start: " + log)
