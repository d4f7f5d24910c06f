"""Nova 34's own MetricsFilter and MetricsWeigher, for
``tests/differential/test_metrics_agree_with_nova.py`` (runs in the Nova virtualenv of
``scripts/nova-venv``, never in novaq's).

JSON lines on stdin/stdout. ``{"cases": [{"metrics": {[metrics] options}, "host":
{...}}, ...]}`` → ``{"answers": [{"passes": bool | "raised: ...", "weight": float |
"raised: ...", "multiplier": float, "values": {name: value}}, ...]}``. The host is
``tests/differential/cases.py``'s, with ``metrics`` (a compute node's metrics text); it
becomes Nova's ``HostState`` through ``nova_verdicts._host_state``. Each case sets the
``[metrics]`` options, then builds the filter and the weigher (both read them at start).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from nova_verdicts import _host_state, _nova, _request_spec

REQUEST = {"flavor_name": "small", "extra_specs": {}, "image_properties": {}, "hints": {}}


def _raised(exc: Exception) -> str:
    return f"raised: {type(exc).__name__}: {exc}"


def _answer(case: dict[str, Any], spec: Any) -> dict[str, Any]:
    import nova.conf
    from nova.scheduler.filters.metrics_filter import MetricsFilter
    from nova.scheduler.weights.metrics import MetricsWeigher

    conf = nova.conf.CONF
    for option, value in case["metrics"].items():
        conf.set_override(option, value, group="metrics")
    state = _host_state(case["host"])
    answer: dict[str, Any] = {"values": {m.name: m.value for m in state.metrics}}
    try:
        answer["passes"] = bool(MetricsFilter().host_passes(state, spec))
    except Exception as exc:  # noqa: BLE001 - the verdict is that Nova raised
        answer["passes"] = _raised(exc)
    weigher = MetricsWeigher()
    answer["multiplier"] = float(weigher.weight_multiplier(state))
    try:
        answer["weight"] = float(weigher._weigh_object(state, spec))
    except Exception as exc:  # noqa: BLE001
        answer["weight"] = _raised(exc)
    return answer


def main() -> int:
    _nova()
    spec = _request_spec(REQUEST)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "cases" not in command:
            return 0
        answers = [_answer(case, spec) for case in command["cases"]]
        print(json.dumps({"answers": answers}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
