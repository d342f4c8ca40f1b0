"""The built-in tools (files, search, shell, git, time) behind the ``ToolExecutor`` port.

One module per family: :mod:`.files`, :mod:`.search`, :mod:`.shell`; :mod:`.schemas` holds
their inputs and the registry (:data:`TOOLS`) the schemas and groups are derived from;
:mod:`.executor` binds them into :class:`BuiltinTools`.
"""

from tether.adapters.tools.executor import BuiltinTools
from tether.adapters.tools.schemas import TOOL_GROUP_DESCRIPTIONS, TOOL_GROUPS, TOOLS, ToolSpec

__all__ = ["TOOLS", "TOOL_GROUPS", "TOOL_GROUP_DESCRIPTIONS", "BuiltinTools", "ToolSpec"]
