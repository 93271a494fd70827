"""The policy/value networks the trainer builds with skrl, the checkpoint format, and the
deterministic policy (observation → mean action) that the evaluator runs and the ONNX export serves.

Checkpoint format (one ``torch.save`` dict, file ``agent_<iteration:06d>.pt``): skrl's agent modules
as ``Agent.save`` writes them (``policy``, ``value``, ``optimizer``, ``observation_preprocessor``,
``value_preprocessor`` state dicts) plus a ``sim2real`` entry with the metadata needed to rebuild the
networks without the environment (:data:`CHECKPOINT_FORMAT`, task, iteration, timesteps, sizes,
action bounds, hidden sizes, seed, library versions).

Imports torch (and skrl for :func:`build_models`): only the workloads import this module.
"""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any, Mapping

import torch
from torch import nn

CHECKPOINT_FORMAT = 1


def mlp(in_dim: int, hidden: tuple[int, ...] | list[int], out_dim: int) -> nn.Sequential:
    """``Linear → ELU`` per hidden size, then a final ``Linear`` to ``out_dim`` (no activation)."""
    layers: list[nn.Module] = []
    last = in_dim
    for size in hidden:
        layers += [nn.Linear(last, int(size)), nn.ELU()]
        last = int(size)
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def build_models(observation_space, action_space, hidden, device, initial_log_std: float = 0.0) -> dict[str, Any]:
    """Build skrl's Gaussian policy and deterministic value model for a Box observation/action space.

    :param observation_space: gymnasium ``Box`` (single-env space).
    :param action_space: gymnasium ``Box`` (single-env space).
    :param hidden: hidden layer sizes shared by both MLPs.
    :param device: torch device.
    :param initial_log_std: initial log standard deviation of the Gaussian policy (per action).
    :return: ``{"policy": GaussianMixin model, "value": DeterministicMixin model}``.
    """
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model

    obs_dim = int(observation_space.shape[0])
    act_dim = int(action_space.shape[0])

    class Policy(GaussianMixin, Model):
        def __init__(self):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            GaussianMixin.__init__(self, clip_actions=True, clip_log_std=True, min_log_std=-20.0, max_log_std=2.0)
            self.net = mlp(obs_dim, hidden, act_dim)
            self.log_std_parameter = nn.Parameter(torch.full((act_dim,), float(initial_log_std)))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {"log_std": self.log_std_parameter}

    class Value(DeterministicMixin, Model):
        def __init__(self):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            DeterministicMixin.__init__(self, clip_actions=False)
            self.net = mlp(obs_dim, hidden, 1)

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    return {"policy": Policy(), "value": Value()}


class DeterministicPolicy(nn.Module):
    """Observation → mean action: ``clamp(net(clamp((obs - mean) / (sqrt(var) + eps), ±clip)), low, high)``.

    This is exactly what skrl's PPO computes for ``mean_actions`` (its RunningStandardScaler in eval
    mode, then the policy MLP) followed by clipping to the action space bounds, which the environment
    would apply anyway. Input ``(batch, obs_dim)`` float32, output ``(batch, act_dim)`` float32.
    """

    def __init__(self, *, obs_dim: int, act_dim: int, hidden, action_low, action_high, clip_threshold: float = 5.0,
                 epsilon: float = 1e-8):
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim)
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        self.register_buffer("action_low", torch.as_tensor(action_low, dtype=torch.float32).reshape(act_dim))
        self.register_buffer("action_high", torch.as_tensor(action_high, dtype=torch.float32).reshape(act_dim))
        self.clip_threshold = float(clip_threshold)
        self.epsilon = float(epsilon)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        x = (observation - self.obs_mean) / (self.obs_std + self.epsilon)
        x = torch.clamp(x, -self.clip_threshold, self.clip_threshold)
        action = self.net(x)
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)


def state_digest(modules: Mapping[str, Any]) -> str:
    """Hex sha256 over the state of ``modules`` (name → ``nn.Module`` or state dict), bit-exact.

    Each entry's state dict is walked in sorted key order; every tensor contributes its key, dtype,
    shape and raw bytes (moved to CPU). Two processes whose modules hold bitwise identical parameters
    (and buffers) give the same digest, whatever device they live on. ``None`` entries are skipped;
    non-tensor values contribute their ``repr``.
    """
    digest = hashlib.sha256()
    for name in sorted(modules):
        module = modules[name]
        if module is None:
            continue
        state = module.state_dict() if hasattr(module, "state_dict") else module
        for key in sorted(state):
            value = state[key]
            digest.update(f"{name}.{key}".encode())
            if isinstance(value, torch.Tensor):
                tensor = value.detach().to("cpu").contiguous()
                digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
                digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                digest.update(repr(value).encode())
    return digest.hexdigest()


#: Globals the checkpoint format needs beyond what ``torch.load(weights_only=True)`` already allows
#: (tensors, storages, dtypes, ``OrderedDict`` and plain containers/scalars). skrl's module, optimizer and
#: preprocessor state dicts and the ``sim2real`` metadata dict are made of those only, so none is added:
#: anything else in the pickle stream (a class, a function such as ``os.system``) is refused.
CHECKPOINT_SAFE_GLOBALS: tuple[Any, ...] = ()


class UnsafeCheckpointError(ValueError):
    """The checkpoint's pickle stream references objects outside the weights-only allow-list."""


def load_checkpoint(path_or_uri: str) -> dict[str, Any]:
    """Load a checkpoint dict from a local path or ``s3://`` URI (CPU tensors), without running its code.

    The file is unpickled with ``torch.load(..., weights_only=True)``: only tensors, ``OrderedDict`` and
    plain containers/scalars (plus :data:`CHECKPOINT_SAFE_GLOBALS`) can be rebuilt, so a checkpoint that
    tries to import or call anything else fails before any of it runs.

    :raises FileNotFoundError: when it does not exist.
    :raises UnsafeCheckpointError: when the pickle stream references a global outside the allow-list
        (a tampered or foreign file); the message names the global torch refused.
    :raises ValueError: when it is not a sim2real checkpoint (no ``sim2real`` metadata entry) or not a
        torch checkpoint at all (corrupt or truncated bytes).
    """
    import pickle

    from sim2real.contract import storage

    data = storage.read_bytes(path_or_uri)
    try:
        with torch.serialization.safe_globals(list(CHECKPOINT_SAFE_GLOBALS)):
            ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = " ".join(str(exc).split())
        found = re.search(r"(?:unsupported GLOBAL|Unsupported global: GLOBAL) ([\w.]+)", text)
        if found:
            raise UnsafeCheckpointError(
                f"{path_or_uri}: refused to load the checkpoint: its pickle stream references {found.group(1)}, which "
                "is outside the weights-only allow-list of a sim2real checkpoint (tensors, state dicts, plain "
                "containers). It was not written by the trainer or it was tampered with; unpickling it could run "
                "arbitrary code, so it is not loaded") from exc
        opcode = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|\.|$)", text)
        raise ValueError(f"{path_or_uri} is not a valid torch checkpoint (corrupt, truncated or not written by "
                         f"torch.save): {opcode.group(1) if opcode else text[:200]}") from exc
    except (RuntimeError, EOFError, ValueError) as exc:
        raise ValueError(f"{path_or_uri} is not a torch checkpoint: {type(exc).__name__}: {exc}") from exc
    if not isinstance(ckpt, dict) or "sim2real" not in ckpt or "policy" not in ckpt:
        raise ValueError(f"{path_or_uri} is not a sim2real checkpoint (expected a dict with 'policy' and 'sim2real')")
    return ckpt


def deterministic_policy(ckpt: dict[str, Any]) -> DeterministicPolicy:
    """Build the :class:`DeterministicPolicy` (eval mode) from a checkpoint dict of :func:`load_checkpoint`."""
    meta = ckpt["sim2real"]
    policy = DeterministicPolicy(
        obs_dim=meta["obs_dim"], act_dim=meta["act_dim"], hidden=meta["hidden"],
        action_low=meta["action_low"], action_high=meta["action_high"],
    )
    net_state = {k[len("net."):]: v for k, v in ckpt["policy"].items() if k.startswith("net.")}
    policy.net.load_state_dict(net_state)
    scaler = ckpt.get("observation_preprocessor")
    if scaler:
        policy.obs_mean.copy_(scaler["running_mean"].float())
        policy.obs_std.copy_(torch.sqrt(scaler["running_variance"].float()))
    policy.eval()
    return policy
