"""A stand-in for Istio's pilot-agent in the istio-proxy container, for
tests/istio.rs: it starts Envoy as its child, serves the status port (15020)
and reads Envoy's readiness from Envoy's stats, as pilot-agent does. Only
what meshwrap meets is here:

- GET /healthz/ready (Envoy's 15021 listener routes it here): first the
  config check, CDS and LDS each updated at least once
  (cluster_manager.cds.update_success, listener_manager.lds.update_success),
  then server.state LIVE (0) and listener_manager.workers_started 1, each
  from GET /stats?usedonly&filter=... on Envoy's admin, both cached once
  true; 200 or 503 (istio/istio 1.28.10
  pilot/cmd/pilot-agent/status/ready/probe.go, status/util/stats.go,
  status/server.go handleReadyProbe).
- POST /quitquitquit (403 off localhost, 405 for another method): 200 "OK",
  then the agent ends Envoy (status/server.go handleQuit; pkg/envoy/agent.go
  terminate). Istio 1.26+ (mode 1.26, tag 1.26.0) skips the drain: Envoy is
  killed at once (SIGKILL, Go's cmd.Process.Kill on abort). 1.24-1.25
  (mode 1.25, tag 1.25.5) drains: POST /drain_listeners?inboundonly&graceful
  (pkg/envoy/admin.go DrainListeners for a sidecar), waits the termination
  drain duration (5 s by default), then kills Envoy.
- Envoy exiting by itself ends the agent (agent.go Run).

Usage: pilot_agent.py MODE ADMIN_PORT STATUS_PORT -- ENVOY_COMMAND...
"""

import http.server
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

DRAIN_SECONDS = 5
READY_STATS = r"^(server\.state|listener_manager\.workers_started)"
UPDATE_STATS = r"^(cluster_manager\.cds|listener_manager\.lds)\.(update_success|update_rejected)$"


def say(line):
    print(f"agent: {line}", flush=True)


class Agent:
    def __init__(self, mode, admin_port, envoy_cmd):
        self.mode = mode
        self.admin = f"http://127.0.0.1:{admin_port}"
        self.received_first_update = False
        self.at_least_once_ready = False
        self.quitting = False
        self.lock = threading.Lock()
        self.envoy = subprocess.Popen(envoy_cmd)
        say(f"started Envoy, pid {self.envoy.pid}")

    def stats(self, regex):
        url = f"{self.admin}/stats?usedonly&filter={urllib.parse.quote(regex)}"
        with urllib.request.urlopen(url, timeout=3) as reply:
            text = reply.read().decode()
        return {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in text.splitlines()) if v}

    def check(self):
        """None when ready, else why not (probe.go Check)."""
        try:
            if not self.received_first_update:
                s = self.stats(UPDATE_STATS)
                cds = int(s.get("cluster_manager.cds.update_success", 0)) > 0
                lds = int(s.get("listener_manager.lds.update_success", 0)) > 0
                if not (cds and lds):
                    return f"config not received from XDS server: {s}"
                self.received_first_update = True
            if not self.at_least_once_ready:
                s = self.stats(READY_STATS)
                if "server.state" not in s or "listener_manager.workers_started" not in s:
                    return f"readiness stats not yet updated: {s}"
                if s["server.state"] != "0":
                    return f"server is not live, state {s['server.state']}"
                if s["listener_manager.workers_started"] != "1":
                    return "workers have not yet started"
                self.at_least_once_ready = True
            return None
        except OSError as e:
            return f"failed to get readiness stats: {e}"

    def quit(self):
        if self.mode == "1.26":
            self.envoy.kill()
            say("quit: Envoy killed at once (Istio 1.26+)")
        else:
            try:
                drain = urllib.request.Request(f"{self.admin}/drain_listeners?inboundonly&graceful", method="POST")
                urllib.request.urlopen(drain, timeout=3).read()
            except OSError as e:
                say(f"drain failed: {e}")
            say(f"quit: draining for {DRAIN_SECONDS}s (Istio 1.24-1.25)")
            time.sleep(DRAIN_SECONDS)
            self.envoy.kill()
            say("quit: drain over, Envoy killed")


def handler(agent):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, code, body):
            body = body.encode()
            self.send_response(code)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path != "/healthz/ready":
                return self.reply(404, "not found\n")
            with agent.lock:
                why = agent.check()
            self.reply(503 if why else 200, why or "")

        def do_POST(self):
            if self.path != "/quitquitquit":
                return self.reply(404, "not found\n")
            if not self.client_address[0].startswith("127."):
                return self.reply(403, "Only requests from localhost are allowed\n")
            self.reply(200, "OK")
            with agent.lock:
                if agent.quitting:
                    say("quit received again")
                    return
                agent.quitting = True
            say("quit received")
            threading.Thread(target=agent.quit, daemon=True).start()

        def do_PUT(self):
            self.reply(405, "Method Not Allowed\n")

    return Handler


def main():
    mode, admin_port, status_port, dash, *envoy_cmd = sys.argv[1:]
    assert mode in ("1.25", "1.26") and dash == "--", "usage: MODE ADMIN_PORT STATUS_PORT -- ENVOY..."
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(status_port)), None)
    agent = Agent(mode, admin_port, envoy_cmd)
    server.RequestHandlerClass = handler(agent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say(f"status server on :{status_port}")
    code = agent.envoy.wait()
    say(f"Envoy exited ({code}); exiting")


if __name__ == "__main__":
    main()
