#!/usr/bin/env python3
"""The schema half of tests/corpus.rs: for each DIR/N.in.yaml and
DIR/N.out.yaml (a corpus file before and after inject), every document of
a kind a schema is known for that validates before inject must validate
after it. Schemas and their conversion are ../shared's (validate.py's
functions, imported, never copied): Argo's api/jsonschema for its kinds,
KubeRay's and Trainer's own CRDs from the corpus's _crds, all as published
(upstream's examples are not written for unknown-field strictness).

usage: validate_pairs.py DIR SHARED   (prints one line per failure; exit 1 if any)
"""
import glob
import os
import sys

import yaml


def main():
    pairs, shared = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(shared, "k8s-schemas"))
    import validate as v  # ../shared/k8s-schemas/validate.py

    crds = os.path.join(shared, "upstream-corpus", "_crds")
    argo = v.argo_jsonschema(False)
    cache = {}

    def crd(kind, version):
        if (kind, version) not in cache:
            found = None
            for path in glob.glob(os.path.join(crds, "**", "*.yaml"), recursive=True):
                try:
                    found = v.crd_to_jsonschema(v.crd_schema(path, kind, version), False)
                    break
                except SystemExit:
                    continue
            cache[(kind, version)] = found
        return cache[(kind, version)]

    def errors(doc):
        if not isinstance(doc, dict):
            return None
        api, kind = doc.get("apiVersion", ""), doc.get("kind", "")
        if api.startswith("argoproj.io/") and kind in ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"):
            schema = {"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}", "definitions": argo["definitions"]}
            import jsonschema
            return list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
        if api.startswith("ray.io/") or api.startswith("trainer.kubeflow.org/"):
            schema = crd(kind, api.split("/")[1])
            return None if schema is None else v.validate_crd(doc, schema)
        return None

    failures, checked = [], 0
    for before in sorted(glob.glob(os.path.join(pairs, "*.in.yaml"))):
        after = before.replace(".in.yaml", ".out.yaml")
        with open(os.path.join(pairs, os.path.basename(before)[:-8] + ".name")) as f:
            name = f.read().strip()
        docs_in = [d for d in yaml.safe_load_all(open(before)) if d is not None]
        docs_out = [d for d in yaml.safe_load_all(open(after)) if d is not None]
        if len(docs_in) != len(docs_out):
            failures.append(f"{name}: {len(docs_in)} documents in, {len(docs_out)} out")
            continue
        for i, (a, b) in enumerate(zip(docs_in, docs_out)):
            was = errors(a)
            if was is None or was:
                continue
            checked += 1
            now = errors(b)
            if now:
                failures.append(f"{name} document {i + 1} ({b.get('kind')}): valid before inject, not after: {now[0].message[:200]}")
    for f in failures:
        print(f)
    print(f"checked {checked} documents", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
