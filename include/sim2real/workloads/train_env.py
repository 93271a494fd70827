"""What the trainer trains: the vectorised gymnasium environment, skrl's wrapper on the right device, the PPO agent.

:func:`_make_env` builds the gymnasium ``make_vec`` sync environment (``SAME_STEP`` autoreset, which the agent's
time-limit bootstrap needs), :func:`wrap_for_device` wraps it for skrl on a given device, :func:`build_agent`
builds :class:`sim2real.workloads.ppo.TimeLimitBootstrapPPO` with its models, memory and standardisers, and
:func:`library_versions` names the versions recorded in checkpoints and manifests. Used by
:mod:`sim2real.workloads.train` (and the benchmark, which builds exactly the same). torch, skrl and gymnasium are
imported inside the functions, so that importing this module costs nothing.
"""

from __future__ import annotations

import os

def library_versions() -> dict[str, str]:
    """Installed versions of torch, skrl, gymnasium and mujoco (``"unknown"`` when not installed)."""
    import importlib.metadata as md

    out = {}
    for name in ("torch", "skrl", "gymnasium", "mujoco"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "unknown"
    return out


def _make_env(task: str, num_envs: int):
    import gymnasium

    return gymnasium.make_vec(
        task, num_envs=num_envs, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
    )


def wrap_for_device(vec_env, device):
    """skrl's gymnasium wrapper around ``vec_env``, producing tensors on ``device``.

    skrl's wrapper takes its device from the unwrapped env's ``device`` attribute, else ``cuda:0`` whenever CUDA
    is available — on rank 1 of a 2-GPU node that would put observations on GPU 0 and the models on GPU 1 (and,
    with ``DEVICE=cpu`` on a GPU machine, observations on a GPU). So the wanted device is set on the env first.
    """
    from skrl.envs.wrappers.torch import wrap_env

    vec_env.unwrapped.device = str(device)
    env = wrap_env(vec_env, wrapper="gymnasium")
    if env.device != device:  # pragma: no cover - a skrl version that ignores the attribute
        env._device = device
    return env


def build_agent(spec, env, device, tb_dir: str, write_tb: bool):
    """Create the PPO agent (RandomMemory, Gaussian policy, value MLP, running standardisers) for ``env``.

    The agent is :class:`sim2real.workloads.ppo.TimeLimitBootstrapPPO`: skrl's PPO whose value targets bootstrap
    time-limit truncations from the real final observation (``env`` must come from :func:`_make_env`, gymnasium's
    ``SAME_STEP`` autoreset).

    :param env: a skrl-wrapped vectorised env.
    :param tb_dir: directory for TensorBoard events (skrl's experiment directory).
    :return: the (un-initialised) PPO agent.
    """
    from skrl.agents.torch.ppo import PPO_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.resources.preprocessors.torch import RunningStandardScaler

    from sim2real.workloads.policy import build_models
    from sim2real.workloads.ppo import TimeLimitBootstrapPPO

    ppo = dict(spec.ppo)
    rollouts = int(ppo["rollouts"])
    models = build_models(env.observation_space, env.action_space, spec.hidden, device, initial_log_std=spec.initial_log_std)
    memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=device)
    cfg = PPO_CFG(
        **ppo,
        observation_preprocessor=RunningStandardScaler,
        observation_preprocessor_kwargs={"size": env.observation_space, "device": device},
        value_preprocessor=RunningStandardScaler,
        value_preprocessor_kwargs={"size": 1, "device": device},
    )
    cfg.experiment.directory = os.path.dirname(tb_dir)
    cfg.experiment.experiment_name = os.path.basename(tb_dir)
    cfg.experiment.write_interval = rollouts if write_tb else 0
    cfg.experiment.checkpoint_interval = 0  # checkpoints are written here (sidecars, upload, manifest)
    return TimeLimitBootstrapPPO(models=models, memory=memory, observation_space=env.observation_space,
               action_space=env.action_space, device=device, cfg=cfg)
