"""Task ids (environment names) a run can train and evaluate: the trigger form offers these, the workload
registry (``sim2real.workloads.tasks``) defines each one's success criterion. Standard library only.

MuJoCo tasks are gymnasium's ids (CPU, also in the sandbox). Isaac Lab tasks run only in the Isaac Lab GPU
image (containers/isaaclab/): ``Isaac-Velocity-Rough-H1`` is Isaac Lab 3.0's own registration (the image's
default; 3.0 ids carry no version suffix: isaac-sim/IsaacLab release v3.0.0, isaaclab_tasks and its task tests),
``Isaac-Velocity-Rough-H1-v0`` the same task as Isaac Lab 2.x registers it (an image built for 2.x), the SO-101
reach and lift tasks are the ones the image's ``workshop`` package registers (``Workshop-SO101-*``).
"""

from __future__ import annotations

MUJOCO_TASKS = ("Reacher-v5", "InvertedPendulum-v5", "Pusher-v5")
ISAACLAB_TASKS = ("Isaac-Velocity-Rough-H1", "Isaac-Velocity-Rough-H1-v0", "Workshop-SO101-Reach-v0",
                  "Workshop-SO101-Lift-v0")
TASKS = MUJOCO_TASKS + ISAACLAB_TASKS
