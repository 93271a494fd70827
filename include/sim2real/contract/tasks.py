"""Task ids (environment names) a run can train and evaluate: the trigger form offers these, the workload
registry (``sim2real.workloads.tasks``) defines each one's success criterion. Standard library only.

MuJoCo tasks are gymnasium's ids (CPU, also in the sandbox). Isaac Lab tasks run only in the Isaac Lab GPU
image (containers/isaaclab/): ``Isaac-Velocity-Rough-H1-v0`` is Isaac Lab's own registration, the SO-101
reach and lift tasks are the ones the image's ``workshop`` package registers (``Workshop-SO101-*``).
"""

from __future__ import annotations

MUJOCO_TASKS = ("Reacher-v5", "InvertedPendulum-v5", "Pusher-v5")
ISAACLAB_TASKS = ("Isaac-Velocity-Rough-H1-v0", "Workshop-SO101-Reach-v0", "Workshop-SO101-Lift-v0")
TASKS = MUJOCO_TASKS + ISAACLAB_TASKS
