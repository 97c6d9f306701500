"""GPU demand per dialect: whole GPUs, MIG, HAMi, KAI annotations, init containers and sidecars."""

from dataclasses import dataclass, field

import pytest

from policy.subject.normalize import read_demand
from tests.policy.builders import container, gpu_container, node, pod, snapshot

GI = 2**30
MI = 2**20
L4_MIB = 23034  # GFD nvidia.com/gpu.memory of an L4


@dataclass
class Case:
    name: str
    pod: dict
    want_gpus: int
    want_fraction: int | None = None
    want_memory: int | None = None
    want_product: str | None = None
    want_problems: list = field(default_factory=list)
    nodes: tuple = ()


def hami(**res):
    return pod(containers=[container(limits=res)])


CASES = [
    Case("no gpu", pod(), 0),
    Case("whole limits", pod(gpus="2"), 2000),
    Case("whole int value", pod(containers=[container(limits={"nvidia.com/gpu": 4})]), 4000),
    Case("requests only", pod(containers=[container(requests={"nvidia.com/gpu": "1"})]), 1000),
    Case("request wins over limit", pod(containers=[container(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "2"})]), 2000),
    # Kubernetes requires requests == limits for extended resources: a request below its limit is malformed.
    Case("request contradicting its limit is malformed", pod(containers=[container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"},
                                                                                 requests={"nvidia.com/gpu": "1"})]), 500, 500,
         want_problems=["MalformedResourceRequests"]),
    Case("request equal to its limit in another spelling", pod(containers=[container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": "2"})]), 2000),
    Case("requests name two keys", pod(containers=[container(requests={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20"})]), 200, 200),
    Case("same key in both tables", pod(containers=[container(limits={"nvidia.com/gpu": "3"}, requests={"nvidia.com/gpu": "3"})]), 3000),
    Case("two containers add", pod(containers=[gpu_container("1"), gpu_container("3")]), 4000),
    Case("amd whole", pod(containers=[container(limits={"amd.com/gpu": "1"})]), 1000),
    Case("cpu and memory ignored", pod(containers=[container(limits={"cpu": "8", "memory": "64Gi"})]), 0),
    Case("init container peak", pod(gpus="1", init_containers=[gpu_container("4")]), 4000),
    Case("init below app", pod(gpus="2", init_containers=[gpu_container("1")]), 2000),
    Case("sidecar adds", pod(gpus="1", init_containers=[container(limits={"nvidia.com/gpu": "1"}, restart_policy="Always")]), 2000),
    Case("mig 1g.10gb", pod(containers=[container(limits={"nvidia.com/mig-1g.10gb": "1"})]), 143, 143, 10 * GI),
    Case("mig 3g.40gb x2", pod(containers=[container(limits={"nvidia.com/mig-3g.40gb": "2"})]), 2 * 429, 429, 80 * GI),
    Case("mig 7g.80gb is whole", pod(containers=[container(limits={"nvidia.com/mig-7g.80gb": "1"})]), 1000, None, 80 * GI),
    Case("mig +me variant", pod(containers=[container(limits={"nvidia.com/mig-1g.10gb+me": "1"})]), 143, 143, 10 * GI),
    Case("mig A30 4-slice", pod(containers=[container(limits={"nvidia.com/mig-2g.12gb": "1"})]), 500, 500, 12 * GI),
    Case("hami cores", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}), 300, 300),
    Case("hami mem pct", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}), 250, 250),
    Case("hami mem vs known device", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "11517"}), 500, 500, 11517 * MI,
         nodes=(node("l4", "NVIDIA-L4", str(L4_MIB), "4"),)),
    Case("hami mem, device unknown: whole", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}), 1000, None, 4096 * MI),
    Case("hami largest share wins", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20", "nvidia.com/gpumem-percentage": "40"}), 400, 400),
    Case("hami two vgpus", hami(**{"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50", "nvidia.com/gpumem": "1000"}), 1000, 500, 2000 * MI,
         want_problems=["GpuShareLowerBound"]),  # no node: the memory share is not known, the cores' is a lower bound
    Case("hami cores and mem, device unknown: cores as a lower bound", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20", "nvidia.com/gpumem": "40000"}),
         200, 200, 40000 * MI, want_problems=["GpuShareLowerBound"]),
    Case("hami cores and mem, device known: the larger share", hami(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20", "nvidia.com/gpumem": "11517"}),
         500, 500, 11517 * MI, nodes=(node("l4", "NVIDIA-L4", str(L4_MIB)),)),
    Case("hami without gpu count", hami(**{"nvidia.com/gpucores": "10"}), 100, 100),
    Case("kai fraction", pod(annotations={"gpu-fraction": "0.25"}), 250, 250),
    Case("kai fraction num devices", pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}), 1000, 500),
    Case("kai memory MiB, device known", pod(annotations={"gpu-memory": "20389"}, node="h"), 250, 250, 20389 * MI, "NVIDIA-H100-80GB-HBM3",
         nodes=(node("h", memory_mib="81559"),)),
    Case("kai memory with unit", pod(annotations={"gpu-memory": "10Gi"}), 1000, None, 10 * GI),
    Case("product from node selector", pod(gpus="1", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"}), 1000, want_product="NVIDIA-L4"),
    Case("product from affinity", pod(gpus="1", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A", "B"]}]}]}}}),
         1000, want_product="A,B"),
    Case("product from hami use-gputype", pod(gpus="1", annotations={"nvidia.com/use-gputype": "A100, H100"}), 1000, want_product="A100,H100"),
    Case("product from bound node", pod(gpus="1", node="n1"), 1000, want_product="NVIDIA-L4", nodes=(node("n1", "NVIDIA-L4"),)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu_demand_per_dialect(case):
    snap = snapshot(*case.nodes) if case.nodes else None
    got, problems = read_demand(case.pod, snap)
    assert (got.gpus, got.fraction, got.gpu_memory, got.gpu_product) == (
        case.want_gpus, case.want_fraction, case.want_memory, case.want_product)
    assert [p.code for p in problems] == case.want_problems


def test_a_lower_bound_share_warns_and_does_not_deny():
    from policy.engine import WARN_PROBLEMS

    assert "GpuShareLowerBound" in WARN_PROBLEMS
