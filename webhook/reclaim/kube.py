"""The API calls the reclaim controller makes, over the ledger's aiohttp client (webhook/ledger/apiclient.py).

Every write is either conditional (a ConfigMap or Lease replaced on its `resourceVersion`,
an eviction with a uid precondition) or idempotent (a merge patch setting `spec.suspend`
and the annotations, an Event created under a fixed name), so a call repeated by a new
leader after a crash changes nothing the first did not.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from webhook.ledger.apiclient import ApiError, AsyncApi

TIMEOUT = (3.0, 10.0)  # (connect, read) seconds
MERGE = "application/merge-patch+json"
# Suspendable kinds (policy/reclaim/book.py SUSPENDABLE): where their objects live.
RESOURCES = {
    "Job": ("batch/v1", "jobs"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobsets"),
    "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org/v2beta1", "mpijobs"),
    "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjobs"),
    "RayJob": ("ray.io/v1", "rayjobs"),
    "RayCluster": ("ray.io/v1", "rayclusters"),
    "Pod": ("v1", "pods"),
}


def path(api_version: str, plural: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    """The REST path of a collection or object (core `v1` under /api, groups under /apis)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    p = base + (f"/namespaces/{quote(namespace, safe='')}" if namespace else "") + f"/{plural}"
    if name is not None:
        p += f"/{quote(name, safe='')}"
    return p + (f"/{sub}" if sub else "")


class Kube:
    """GET / create / replace / merge-patch / evict, each answering None for 404 where that means "gone"."""

    def __init__(self, api: AsyncApi) -> None:
        self.api = api

    async def get(self, p: str) -> dict | None:
        """The object at `p`, or None when the API answers 404."""
        try:
            return await self.api.request("GET", p, None, TIMEOUT)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, p: str, selector: str) -> list[dict]:
        """Items of the collection at `p` matching the label `selector`."""
        out = await self.api.request("GET", p + "?" + urlencode({"labelSelector": selector}), None, TIMEOUT)
        return list(out.get("items") or [])

    async def create(self, p: str, body: dict) -> dict:
        """POST (409 AlreadyExists raised as ApiError)."""
        return await self.api.request("POST", p, body, TIMEOUT)

    async def replace(self, p: str, body: dict) -> dict:
        """PUT, conditional on `body.metadata.resourceVersion` (409 Conflict raised)."""
        return await self.api.request("PUT", p, body, TIMEOUT)

    async def patch(self, p: str, body: dict) -> dict | None:
        """A JSON merge patch; None when the object is gone (404)."""
        try:
            return await self.api.request("PATCH", p, body, TIMEOUT, content_type=MERGE)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def evict(self, namespace: str, name: str, uid: str | None, *, dry_run: bool = False) -> int:
        """POST pods/NAME/eviction (policy/v1) with a uid precondition; the HTTP status (201, 404, 409, 429, ...)."""
        body: dict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        p = path("v1", "pods", namespace, name, "eviction") + ("?dryRun=All" if dry_run else "")
        try:
            await self.api.request("POST", p, body, TIMEOUT)
            return 201
        except ApiError as exc:
            return exc.status
