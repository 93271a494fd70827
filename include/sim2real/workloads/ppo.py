"""skrl PPO with time-limit truncation handled correctly for gymnasium vector environments.

Why: a truncated episode (the time limit hit, e.g. Reacher-v5 at step 50, which never terminates) did not end
in a terminal state, so its last transition's value target is ``r + γ·V(s_final)``, where ``s_final`` is the
observation the episode really ended in. A gymnasium vector env in its ``SAME_STEP`` autoreset mode returns,
for an environment that just ended, the **first observation of the next episode** as ``next_obs`` and puts
the real final observation in ``infos["final_obs"][i]`` (mask ``infos["_final_obs"]``; gymnasium 1.x
``gymnasium/vector/sync_vector_env.py``, ``AutoresetMode.SAME_STEP``).

skrl 2.1.1's PPO (``skrl/agents/torch/ppo/ppo.py``) with ``time_limit_bootstrap=False`` computes GAE straight
across the boundary (the last steps of an episode take credit from the next, random episode); with
``time_limit_bootstrap=True`` it stops GAE at the boundary but bootstraps from ``next_observations`` — the reset
observation. :class:`TimeLimitBootstrapPPO` keeps skrl's own algorithm and only feeds it the right observation:
it overrides the public ``record_transition`` hook, replaces the rows of ``next_observations`` of truncated
environments by their ``final_obs`` and turns ``time_limit_bootstrap`` on, so skrl adds ``γ·V(final_obs)`` to
the reward of each truncated step and GAE does not cross episode boundaries.

Termination wins over truncation: a step that is both (the episode failed on its last allowed step) is treated
as terminated (no bootstrap), as gymnasium defines a terminal state to have no future value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from skrl.agents.torch.ppo import PPO


class MissingFinalObservationError(RuntimeError):
    """An episode was truncated but the step's ``infos`` do not carry its real final observation."""


def final_observations(infos: Any, rows: torch.Tensor, like: torch.Tensor, observation_space) -> torch.Tensor:
    """The real final observations of the environments in ``rows``, as a tensor shaped like ``like[rows]``.

    :param infos: the vector env's ``infos`` of the step (gymnasium ``SAME_STEP`` autoreset: ``final_obs``
        object array with one entry per environment, and the ``_final_obs`` mask).
    :param rows: 1-D tensor of environment indices whose final observation is wanted.
    :param like: the step's ``next_observations`` tensor (for dtype, device and flattening).
    :param observation_space: the single-environment observation space (skrl's tensorize/flatten rules).
    :raises MissingFinalObservationError: when ``infos`` has no final observation for one of ``rows`` (the
        env does not autoreset in ``SAME_STEP`` mode, or it is not a gymnasium vector env): bootstrapping from
        ``next_observations`` would use the next episode's reset observation, so it is refused.
    """
    from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space

    indices = [int(i) for i in rows.tolist()]
    final = infos.get("final_obs") if isinstance(infos, dict) else None
    mask = infos.get("_final_obs") if isinstance(infos, dict) else None
    if final is None or mask is None or not all(bool(mask[i]) for i in indices):
        raise MissingFinalObservationError(
            f"environments {indices} were truncated but the step's infos hold no final observation for them "
            "(infos['final_obs'] / infos['_final_obs']): make the vector env with gymnasium's "
            "autoreset_mode=AutoresetMode.SAME_STEP, or the value would be bootstrapped from a reset observation")
    stacked = np.stack([np.asarray(final[i]) for i in indices])
    tensor = flatten_tensorized_space(tensorize_space(observation_space, stacked, device=like.device))
    return tensor.to(dtype=like.dtype).reshape(len(indices), *like.shape[1:])


class TimeLimitBootstrapPPO(PPO):
    """skrl's PPO whose value targets bootstrap truncated episodes from their real final observation.

    Same constructor as :class:`skrl.agents.torch.ppo.PPO`; ``cfg.time_limit_bootstrap`` is forced on (skrl then
    stops GAE at ``terminated | truncated`` and adds ``discount_factor · V(next_observation) · truncated`` to the
    reward). Needs a vector env in gymnasium's ``SAME_STEP`` autoreset mode (see the module docstring).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg.time_limit_bootstrap = True

    def record_transition(self, *, rewards: torch.Tensor, next_observations: torch.Tensor,
                          terminated: torch.Tensor, truncated: torch.Tensor, infos: Any, **kwargs: Any) -> None:
        """skrl's ``record_transition`` with the truncated rows of ``next_observations`` set to ``final_obs``.

        Keyword arguments as :meth:`skrl.agents.torch.ppo.PPO.record_transition`. ``truncated`` is passed on as
        ``truncated & ~terminated``; ``rewards`` as a copy (skrl adds the bootstrap term in place, which would
        otherwise change the rewards the trainer's loop sees and counts into episode returns).

        :raises MissingFinalObservationError: see :func:`final_observations`.
        """
        truncated = truncated & ~terminated
        if self.training and truncated.any():
            rows = torch.nonzero(truncated.view(-1)).view(-1)
            next_observations = next_observations.clone()
            next_observations[rows] = final_observations(infos, rows, next_observations, self.observation_space)
        super().record_transition(rewards=rewards.clone(), next_observations=next_observations,
                                  terminated=terminated, truncated=truncated, infos=infos, **kwargs)
