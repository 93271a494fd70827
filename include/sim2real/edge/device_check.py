"""Health check of a policy model as an edge device would run it (used by the emulated core device).

:func:`check_policy_endpoint` starts :class:`~sim2real.edge.policy_server.PolicyServer` on a free
loopback port, pings it, sends one ``get_action`` with a zero observation of the right width, checks
the reply, and stops the server. The sandbox maps ``ok`` to the device's SUCCEEDED/FAILED status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim2real.edge.policy_server import PolicyClient, PolicyServer


def check_policy_endpoint(model_path: str | Path, observation_dim: int, action_horizon: int = 16,
                          timeout_ms: int = 5000) -> tuple[bool, str, dict[str, Any]]:
    """Serve ``model_path`` briefly on 127.0.0.1 and check ping + one ``get_action``.

    Args:
        model_path: the ``.onnx`` policy.
        observation_dim: D, the flat state width the policy expects.
        action_horizon: H of the chunk the server must return.
        timeout_ms: client timeout per request, milliseconds.

    Returns:
        ``(ok, reason, details)``: ``ok`` True when the action is float32 ``(1, H, A)`` and finite;
        ``reason`` says what failed (or "policy server answered ping and get_action");
        ``details`` has ``port``, ``provider``, ``model_sha256``, ``action_shape``, ``latency_ms``
        where known. Never raises: every failure (model missing or invalid, bind error, timeout,
        error reply, wrong shape) is returned as ``ok=False``.
    """
    details: dict[str, Any] = {"model_path": str(model_path), "observation_dim": observation_dim}
    try:
        server = PolicyServer(model_path, host="127.0.0.1", port=0, action_horizon=action_horizon)
        handle = server.start_in_thread()
    except Exception as exc:
        return False, f"policy server did not start: {type(exc).__name__}: {exc}", details
    details.update(port=handle.port, provider=server.policy.provider, model_sha256=server.policy.sha256)
    try:
        with PolicyClient("127.0.0.1", handle.port, timeout_ms=timeout_ms) as client:
            ping = client.ping()
            if ping.get("status") != "ok":
                return False, f"unexpected ping reply {ping!r}", details
            keys = server.policy.state_keys or ["state"]
            if len(keys) != 1:
                return False, f"model declares several state keys {keys}; give per-key widths", details
            obs = {"state": {keys[0]: np.zeros((1, 1, int(observation_dim)), np.float32)}}
            actions, info = client.get_action(obs)
        action = actions.get("action") if isinstance(actions, dict) else None
        if not isinstance(action, np.ndarray):
            return False, "get_action reply has no 'action' array", details
        details.update(action_shape=list(action.shape), action_dtype=str(action.dtype),
                       latency_ms=info.get("latency_ms"))
        a_dim = server.policy.action_dim
        if action.dtype != np.float32 or action.ndim != 3 or action.shape[:2] != (1, action_horizon) or (
                a_dim is not None and action.shape[2] != a_dim):
            return False, f"action has shape {action.shape} {action.dtype}, expected (1, {action_horizon}, {a_dim}) float32", details
        if not np.isfinite(action).all():
            return False, "action contains NaN or Inf", details
        return True, "policy server answered ping and get_action", details
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}", details
    finally:
        handle.stop()
