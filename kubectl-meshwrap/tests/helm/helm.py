"""Real Helm for the chart tests: PyPI's helm-python-sdk, which carries
Helm 4 as a library (libhelm_c.so, a C ABI over Helm's Go SDK), with no helm
binary and nothing downloaded at run time. kubectl-meshwrap/tests/chart.rs
runs it once per request: a JSON request on stdin, a JSON answer on stdout
({"error": ...} and exit 1 when Helm said no).

The calls, as helm-python-sdk 0.2.2 defines them (helm_python/chart.py,
config.py; the option keys are helm-c-sdk's, pkg/wrapper):
- render:  Chart.load(path), then helm_render(chart, values, {"name",
  "namespace", "kube_version"}); the Python wrapper's Chart.render has no
  kube_version argument, the C function's options do (RenderOptions).
- lint:    helm_python.lint(path, values, strict=True, namespace=...,
  kube_version=...).
- package: helm_python.package(path, destination=...).
- install: Config(kubeconfig_content=...).install(...) with dry_run="client"
  does not touch a cluster; the post_renderer and post_renderer_args keys
  (helm-c-sdk's renderTweaks) go through helm_install itself, since the
  wrapper does not pass them; skip_schema_validation (`helm install
  --skip-schema-validation`) lets a test reach the templates' own checks.
  Helm finds the plugin in HELM_PLUGINS with its own loader
  (internal/plugin/loader.go), read when the library loads: the caller sets
  it in this process's environment.
- render with lookup: Config.render (helm_render_with_config) against a
  stand-in API server started here, which answers discovery and serves the
  objects the request names, so `lookup` sees them as on an upgrade.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import helm_python as helm
from helm_python import _native


def render(req):
    with helm.Chart.load(req["chart"]) as chart:
        opts = {"name": req.get("name", "meshwrap"), "namespace": req["namespace"]}
        if req.get("kube_version"):
            opts["kube_version"] = req["kube_version"]
        out = _native.call_string(
            "helm_render", chart._raw(), json.dumps(req.get("values", {})), json.dumps(opts)
        )
    return {"manifests": json.loads(out)}


def lint(req):
    return helm.lint(
        req["chart"],
        req.get("values", {}),
        strict=True,
        namespace=req["namespace"],
        kube_version=req.get("kube_version"),
    )


def package(req):
    return {"path": helm.package(req["chart"], destination=req["destination"])}


def schema(req):
    with helm.Chart.load(req["chart"]) as chart:
        chart.validate_schema(req.get("values", {}))
    return {}


def metadata(req):
    with helm.Chart.load(req["chart"]) as chart:
        return {"metadata": chart.metadata, "values": chart.values}


def offline_kubeconfig():
    # Never dialled: a client-side dry run swaps in Helm's fake clients.
    return kubeconfig("https://127.0.0.1:1")


def kubeconfig(server):
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


def install(req):
    with helm.Config(kubeconfig_content=offline_kubeconfig(), namespace=req["namespace"]) as cfg:
        with helm.Chart.load(req["chart"]) as chart:
            opts = {"namespace": req["namespace"], "dry_run": "client"}
            for key in ("kube_version", "post_renderer", "post_renderer_args", "skip_schema_validation"):
                if req.get(key) is not None:
                    opts[key] = req[key]
            out = _native.call_string(
                "helm_install",
                cfg._raw(),
                _native.HANDLE(0),
                chart._raw(),
                None,
                req.get("name", "train"),
                json.dumps(req.get("values", {})),
                json.dumps(opts),
            )
    return json.loads(out)


class StandIn(BaseHTTPRequestHandler):
    """The API server's discovery and GETs of the objects it was given."""

    objects = {}

    def log_message(self, *args):
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/version":
            return self.answer(200, {"major": "1", "minor": "36", "gitVersion": "v1.36.0"})
        if path == "/api":
            return self.answer(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return self.answer(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            return self.answer(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": "v1",
                    "resources": [
                        {"name": "secrets", "singularName": "secret", "namespaced": True,
                         "kind": "Secret", "verbs": ["get", "list"]},
                    ],
                },
            )
        if path in self.objects:
            return self.answer(200, self.objects[path])
        self.answer(
            404,
            {"kind": "Status", "apiVersion": "v1", "status": "Failure",
             "reason": "NotFound", "code": 404, "message": f"{path} not found"},
        )


def render_with_lookup(req):
    objects = {}
    for obj in req.get("objects", []):
        meta = obj["metadata"]
        objects[f"/api/v1/namespaces/{meta['namespace']}/secrets/{meta['name']}"] = obj
    StandIn.objects = objects
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with helm.Config(kubeconfig_content=kubeconfig(url), namespace=req["namespace"]) as cfg:
            with helm.Chart.load(req["chart"]) as chart:
                out = cfg.render(
                    chart,
                    req.get("values", {}),
                    name=req.get("name", "meshwrap"),
                    namespace=req["namespace"],
                    is_upgrade=True,
                )
    finally:
        server.shutdown()
    return {"manifests": out}


OPS = {
    "render": render,
    "lint": lint,
    "package": package,
    "schema": schema,
    "metadata": metadata,
    "install": install,
    "render_with_lookup": render_with_lookup,
}


def main():
    req = json.load(sys.stdin)
    try:
        out = OPS[req["op"]](req)
    except helm.HelmError as e:
        json.dump({"error": str(e), "type": type(e).__name__}, sys.stdout)
        sys.exit(1)
    out["helm"] = helm.helm_sdk_version()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
