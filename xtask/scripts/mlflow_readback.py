"""Reads an MLflow experiment back with MLflow's own Python client, for `cargo xtask it exporters`.

    python mlflow_readback.py TRACKING_URI EXPERIMENT

Prints one JSON document: the experiment's runs (oldest first), each with its name, status,
parent run id (tag mlflow.parentRunId), params, metrics, tags (MLflow's own left out) and
artifact paths. Exit 2 when the experiment does not exist.
"""

import json
import math
import sys

import mlflow
from mlflow import MlflowClient


def artifacts(client, run_id, path=None):
    out = []
    for f in client.list_artifacts(run_id, path):
        out += artifacts(client, run_id, f.path) if f.is_dir else [f.path]
    return sorted(out)


def main():
    mlflow.set_tracking_uri(sys.argv[1])
    client = MlflowClient()
    exp = client.get_experiment_by_name(sys.argv[2])
    if exp is None:
        print(json.dumps({"error": f"no experiment {sys.argv[2]!r}"}))
        sys.exit(2)
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    doc = {"experiment_id": exp.experiment_id, "name": exp.name, "runs": [{
        "run_id": r.info.run_id,
        "name": r.info.run_name,
        "status": r.info.status,
        "parent": r.data.tags.get("mlflow.parentRunId"),
        "params": r.data.params,
        "metrics": {k: (None if math.isnan(v) else v) for k, v in r.data.metrics.items()},
        "tags": {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")},
        "artifacts": artifacts(client, r.info.run_id),
    } for r in runs]}
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main()
