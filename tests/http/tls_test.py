#!/usr/bin/env python3
"""The HTTP door speaks the gRPC door's TLS (ctest Http.TlsAndClientCertificates).

A real server with mutual TLS (--tls-client-ca, --tls-client-names robot-1),
bearer tokens and --http-listen:
- the official `openai` npm client with robot-1's certificate and the token
  streams the text `splitspec generate` gets over gRPC with the same
  certificate;
- the same client without a certificate fails at the TLS handshake (no HTTP
  status); a certificate the CA signed for another name gets 403;
- curl over plain HTTP gets no HTTP answer at all;
- a rotated server certificate is served to new connections within
  tls_reload_s;
- --check-config refuses an HTTP door weaker than the gRPC door, and
  --http-tls upstream (TLS ends in a proxy) starts with the log saying so.
Certificates are made with the openssl command. Exit 77 (skip) without node
or the npm package.

usage: tls_test.py BIN_DIR SOURCE_DIR MATERIAL_DIR
"""
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from harness import MAX_TOKENS, PROMPT, fail, openai_package, start_server, target

BIN, SOURCE, MATERIAL = sys.argv[1:4]
PACKAGE = openai_package(MATERIAL)
TARGET = target(SOURCE)


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def make_pki(d):
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh("openssl", "req", "-x509", *key, "-keyout", d + "/ca.key", "-out", d + "/ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    with open(d + "/san.ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who in ("server", "server-rotated", "robot-1", "intruder"):
        base = d + "/" + who
        sh("openssl", "req", *key, "-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=" + who)
        sh("openssl", "x509", "-req", "-in", base + ".csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
           "-CAcreateserial", "-days", "2", "-out", base + ".pem",
           *(["-extfile", d + "/san.ext"] if who.startswith("server") else []))


def start(args, err):
    return start_server(BIN, SOURCE, args, err)


def node(base, *extra):
    out = subprocess.run(["node", os.path.join(SOURCE, "tests", "http", "openai_tls_client.mjs"), PACKAGE, base,
                          "robot-1", PROMPT, str(MAX_TOKENS), *extra], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        fail("the openai client: " + out.stderr + out.stdout)
    return json.loads(out.stdout)


def served_name(port, d):
    """The common name of the certificate the HTTP door serves now."""
    context = ssl.create_default_context(cafile=d + "/ca.pem")
    context.load_cert_chain(d + "/robot-1.pem", d + "/robot-1.key")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
            return subject.get("commonName")


def main():
    if not shutil.which("node") or not os.path.isfile(os.path.join(PACKAGE, "package.json")):
        print("SKIP: node or the openai npm package is missing (scripts/setup_test_material.sh installs it)")
        return 77
    d = tempfile.mkdtemp()
    make_pki(d)
    for f in ("server.pem", "server.key"):  # the server reads copies, which the rotation replaces
        shutil.copy(os.path.join(d, f), os.path.join(d, "live-" + f))
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write("robot-1\n")
    server_bin = os.path.join(BIN, "splitspec-server")

    # An HTTP door weaker than the gRPC door is refused, with the reason.
    refusals = [
        (["--http-tls", "upstream"], "http_tls is upstream but the gRPC port has no TLS"),
        (["--auth-tokens-file", tokens], "http_listen speaks plaintext HTTP"),
    ]
    for args, reason in refusals:
        r = subprocess.run([server_bin, "--target", TARGET, "--http-listen", "127.0.0.1:0", "--check-config", *args],
                           capture_output=True, text=True)
        if r.returncode == 0 or reason not in r.stderr:
            fail("--check-config %s: exit %d, %r" % (args, r.returncode, r.stderr))

    tls = ["--tls-cert", d + "/live-server.pem", "--tls-key", d + "/live-server.key", "--tls-client-ca", d + "/ca.pem",
           "--tls-client-names", "robot-1", "--tls-reload-s", "1", "--auth-tokens-file", tokens]
    err = open(os.path.join(d, "server.err"), "w+")
    server, ports, log = start(tls + ["--max-sessions", "2"], err)
    try:
        if not re.search(r"event=http listen=\S+ port=\d+ tls=mutual", log):
            fail("the start log does not say the HTTP door is mutual TLS: " + log)
        base = "https://127.0.0.1:%d/v1" % ports["http"]
        cli = subprocess.run([os.path.join(BIN, "splitspec"), "generate", "--mode", "cloud-ar", "--server",
                              "127.0.0.1:%d" % ports["serving"], "--tokenizer", TARGET, "--auth-token-file", tokens,
                              "--tls-ca", d + "/ca.pem", "--tls-cert", d + "/robot-1.pem", "--tls-key",
                              d + "/robot-1.key", "--tls-server-name", "localhost", "--prompt", PROMPT,
                              "--max-new-tokens", str(MAX_TOKENS), "--json"], capture_output=True, text=True)
        if cli.returncode != 0:
            fail("splitspec generate over mutual TLS: " + cli.stderr)
        want = json.loads(cli.stdout)["text"]

        got = node(base, d + "/ca.pem", d + "/robot-1.pem", d + "/robot-1.key")
        print("generate:", json.dumps(want))
        print("https:   ", json.dumps(got.get("streamed")), "in", got.get("chunks"), "chunks")
        if got.get("streamed") != want or got.get("chunks", 0) < 2:
            fail("the HTTPS stream with a client certificate: %s" % got)

        bare = node(base, d + "/ca.pem")
        print("no certificate:", bare)
        if "error" not in bare or bare.get("status") is not None:
            fail("a client without a certificate got an HTTP answer: %s" % bare)

        other = node(base, d + "/ca.pem", d + "/intruder.pem", d + "/intruder.key")
        print("intruder:", other)
        if other.get("status") != 403:
            fail("a certificate for a name not in tls_client_names: %s" % other)

        curl = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                               "http://127.0.0.1:%d/v1/models" % ports["http"]], capture_output=True, text=True)
        print("curl over plain HTTP: exit %d, status %s" % (curl.returncode, curl.stdout))
        if curl.stdout != "000" or curl.returncode == 0:
            fail("plain HTTP got an answer: exit %d status %s" % (curl.returncode, curl.stdout))

        # Rotation: new files are served to new connections within tls_reload_s.
        if served_name(ports["http"], d) != "server":
            fail("the served certificate is not the server's")
        shutil.copy(d + "/server-rotated.key", d + "/live-server.key.new")
        shutil.copy(d + "/server-rotated.pem", d + "/live-server.pem.new")
        os.replace(d + "/live-server.key.new", d + "/live-server.key")
        os.replace(d + "/live-server.pem.new", d + "/live-server.pem")
        for _ in range(50):
            if served_name(ports["http"], d) == "server-rotated":
                break
            time.sleep(0.2)
        else:
            fail("the rotated certificate was not served within 10 s (tls_reload_s 1)")
        print("rotated: served server-rotated")
    finally:
        server.terminate()
        server.wait(timeout=60)

    # TLS ending upstream: plaintext HTTP, said at start.
    err = open(os.path.join(d, "upstream.err"), "w+")
    server, ports, log = start(tls + ["--http-tls", "upstream"], err)
    try:
        if "event=http_tls_upstream" not in log or not re.search(r"event=http listen=\S+ port=\d+ tls=upstream", log):
            fail("the start log does not say TLS ends upstream: " + log)
        curl = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-H",
                               "Authorization: Bearer robot-1", "http://127.0.0.1:%d/v1/models" % ports["http"]],
                              capture_output=True, text=True)
        if curl.stdout != "200":
            fail("behind an upstream TLS proxy the endpoint should answer plain HTTP: %s" % curl.stdout)
    finally:
        server.terminate()
        server.wait(timeout=60)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
