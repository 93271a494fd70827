"""Health check of a policy model as an edge device would run it (used by the emulated core device).

:func:`check_policy_endpoint` starts :class:`~sim2real.edge.policy_server.PolicyServer` on a free
loopback port and then talks to it only over the wire, as a robot's client would: ``ping``,
``get_metadata`` (the modality layout with widths), ``get_modality_config``, one GR00T N1.6
``get_action`` built from the layout, checks the reply (one float32 ``(1, H, width)`` array per action
key), and stops the server. The sandbox maps ``ok`` to the device's SUCCEEDED/FAILED status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim2real.contract.modality import ModalityLayout
from sim2real.edge.policy_client import PolicyClient, layout_observation
from sim2real.edge.policy_server import PolicyServer


def check_policy_endpoint(model_path: str | Path, action_horizon: int | None = None,
                          timeout_ms: int = 5000) -> tuple[bool, str, dict[str, Any]]:
    """Serve ``model_path`` briefly on 127.0.0.1 and check it over the protocol.

    Args:
        model_path: the ``.onnx`` policy (its modality layout is in its metadata).
        action_horizon: H the chunks must have; None = whatever the model's layout declares.
        timeout_ms: client timeout per request, milliseconds.

    Returns:
        ``(ok, reason, details)``: ``ok`` True when every action key of the layout comes back float32
        ``(1, H, width)`` and finite, and ``get_modality_config`` lists the layout's keys; ``reason``
        says what failed (or "policy server answered ping, get_modality_config and get_action");
        ``details`` has ``port``, ``provider``, ``model_sha256``, ``modality_layout``,
        ``action_shapes``, ``latency_ms`` where known. Never raises: every failure (model missing or
        invalid, bind error, timeout, error reply, wrong shape) is returned as ``ok=False``.
    """
    details: dict[str, Any] = {"model_path": str(model_path)}
    try:
        handle = PolicyServer(model_path, host="127.0.0.1", port=0, action_horizon=action_horizon).start_in_thread()
    except Exception as exc:
        return False, f"policy server did not start: {type(exc).__name__}: {exc}", details
    details["port"] = handle.port
    try:
        with PolicyClient("127.0.0.1", handle.port, timeout_ms=timeout_ms) as client:
            ping = client.ping()
            if ping.get("status") != "ok":
                return False, f"unexpected ping reply {ping!r}", details
            meta = client.metadata()
            layout = ModalityLayout.from_dict(meta["modality_layout"])
            details.update(provider=meta.get("provider"), model_sha256=meta.get("model_sha256"),
                           modality_layout=layout.to_dict())
            config = client.modality_config()
            if config.get("state", {}).get("modality_keys") != layout.state_keys or \
                    config.get("action", {}).get("modality_keys") != layout.action_keys:
                return False, f"get_modality_config {config!r} does not list the layout's keys", details
            actions, info = client.get_action(layout_observation(layout, batch=1, seed=None))
        horizon = layout.action_horizon
        details.update(action_shapes={k: list(getattr(v, "shape", ())) for k, v in actions.items()},
                       latency_ms=info.get("latency_ms"))
        if set(actions) != set(layout.action_keys):
            return False, f"get_action answered keys {sorted(actions)}, expected {layout.action_keys}", details
        for key, width in layout.action:
            arr = actions[key]
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.shape != (1, horizon, width):
                return False, (f"action {key!r} is {getattr(arr, 'shape', type(arr).__name__)} "
                               f"{getattr(arr, 'dtype', '')}, expected (1, {horizon}, {width}) float32"), details
            if not np.isfinite(arr).all():
                return False, f"action {key!r} contains NaN or Inf", details
        return True, "policy server answered ping, get_modality_config and get_action", details
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}", details
    finally:
        handle.stop()
