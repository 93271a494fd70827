"""``torchvision.transforms`` stand-in (see the package docstring): ``ToTensor`` raises ``RuntimeError``."""


class ToTensor:
    """LeRobot's image frame conversion: not available here (raises ``RuntimeError`` when built)."""

    def __init__(self) -> None:
        raise RuntimeError("torchvision is not installed in the LeRobot test site: camera frames cannot be read")
