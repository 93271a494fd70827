"""Local AWS sandbox: moto server + gap patches + responders that play what AWS would run.

Public API: :class:`~sim2real.dev.sandbox.server.Sandbox`, :func:`~sim2real.dev.sandbox.provision.provision`,
:class:`~sim2real.dev.sandbox.approver.Approver`. Imports are lazy so that importing the package
does not import moto.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names __all__ exports, for type checkers and linters (imported lazily below)
    from sim2real.dev.sandbox.approver import Approver
    from sim2real.dev.sandbox.provision import provision
    from sim2real.dev.sandbox.server import Sandbox

__all__ = ["Approver", "Sandbox", "provision"]


def __getattr__(name: str) -> Any:
    if name == "Sandbox":
        from sim2real.dev.sandbox.server import Sandbox

        return Sandbox
    if name == "provision":
        from sim2real.dev.sandbox.provision import provision

        return provision
    if name == "Approver":
        from sim2real.dev.sandbox.approver import Approver

        return Approver
    raise AttributeError(name)
