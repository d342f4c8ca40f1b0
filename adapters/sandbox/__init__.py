"""The sandbox every shell, git and MCP stdio process runs in (bubblewrap).

:mod:`.protected` finds the protected paths of a workspace, :mod:`.placeholders` holds the
absent ones, :mod:`.bwrap` builds the command line, :mod:`.runner` runs a call, and
:mod:`.probe` says what the sandbox can do on this machine.
"""

from tether.adapters.sandbox.bwrap import MountPlan, bwrap_argv
from tether.adapters.sandbox.placeholders import Placeholders
from tether.adapters.sandbox.probe import (
    HOW_TO_ENABLE,
    SandboxReport,
    find_sandbox,
    probe,
    render_report,
)
from tether.adapters.sandbox.protected import (
    GIT_PROTECTED,
    Target,
    UnholdablePath,
    protected_targets,
)
from tether.adapters.sandbox.runner import Sandbox

__all__ = [
    "GIT_PROTECTED",
    "HOW_TO_ENABLE",
    "MountPlan",
    "Placeholders",
    "Sandbox",
    "SandboxReport",
    "Target",
    "UnholdablePath",
    "bwrap_argv",
    "find_sandbox",
    "probe",
    "protected_targets",
    "render_report",
]
