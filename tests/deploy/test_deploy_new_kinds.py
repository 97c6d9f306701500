"""The kinds of issue 28 reach the workload webhooks whole; a CPU batch Job still does not (docs/kinds.md)."""

import copy
from pathlib import Path

import pytest
import yaml

import deploy_apiserver as api
import deploy_builders as b
from policy.admission import wrap_manifest
from policy.manifests import configurations as m

REPO = Path(__file__).resolve().parents[2]
NEW_KINDS = {"CronJob", "MPIJob", "TFJob", "PaddleJob", "XGBoostJob", "JAXJob", "InferenceService", "LLMInferenceService",
             "InferenceSet", "AppWrapper"}
CASES = [list(yaml.safe_load_all(p.read_text())) for p in sorted((REPO / "tests/fixtures/corpus").glob("*.yaml"))]
NEW = [docs[1] for docs in CASES if docs[1]["kind"] in NEW_KINDS or docs[1]["apiVersion"].startswith("batch.volcano.sh/")]
CONTRACT = b.contract_set()


def hits(obj, operation="CREATE"):
    req = wrap_manifest(copy.deepcopy(obj), user="alice", groups=["dev"], operation=operation)["request"]
    return set(api.intercepting(m.validating_configuration(CONTRACT), req)) | set(api.intercepting(m.mutating_configuration(CONTRACT), req))


@pytest.mark.parametrize("obj", NEW, ids=lambda o: f"{o['kind']}-{o['metadata'].get('name')}")
def test_every_new_kind_is_sent_whole(obj):
    assert hits(obj) == {"workloads.validate.allot.io", "workloads.mutate.allot.io"}
    assert hits(obj, "UPDATE") == {"workloads.validate.allot.io"}


def test_a_batch_job_without_gpus_is_still_not_sent():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cpu", "namespace": "team-a"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}}
    assert hits(job) == set()
