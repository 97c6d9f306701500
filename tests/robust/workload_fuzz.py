"""What the workload-reader fuzzers share: the example budget, the fixture cluster, a small engine over every block kind."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

from lang import compile_policies
from policy.cluster.snapshot import ClusterSnapshot
from policy.engine import Engine

EXAMPLES = int(os.environ.get("ALLOT_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REPO = Path(__file__).resolve().parents[2]
CLUSTER = ClusterSnapshot.from_text((REPO / "policies/fixtures/cluster.yaml").read_text())
POLICY = '''
quota all { gpus 8 }
fraction slices { min 0.1 max 0.5 }
gang gangs { for kind != "Pod"  require min_members }
priority batch 100 default
'''
ENGINE = Engine(compile_policies([("fuzz.policy", POLICY)])[0])
