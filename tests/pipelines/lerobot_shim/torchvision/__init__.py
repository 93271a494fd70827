"""Stand-in for ``torchvision`` under LeRobot 0.3.3's dataset reader (``make lerobot-site``; see
requirements-lerobot.txt): PyPI's torchvision needs the CUDA torch, the dev venv has the CPU one.

``lerobot.datasets.utils`` imports ``torchvision.transforms`` and ``lerobot.datasets.video_utils`` imports
``torchvision``; both use it only for camera frames (``transforms.ToTensor``, video decoding), which the toy
datasets of the reader test do not have. Any use raises, so a test that reaches it fails instead of passing
without the real library.
"""

from . import transforms  # noqa: F401


def set_video_backend(backend: str) -> None:
    """LeRobot's video decoding path: not available here (raises ``RuntimeError``)."""
    raise RuntimeError("torchvision is not installed in the LeRobot test site: no video decoding")
