"""What the model is sent and what it costs.

:mod:`.prompt` assembles the system prompt from the workspace, :mod:`.context` shapes
each request (with :mod:`.turns` and :mod:`.stale_results`), :mod:`.compaction` plans
compaction, :mod:`.titles` names sessions, :mod:`.models` and :mod:`.pricing` read the
per-model table, and :mod:`.redact` (with :mod:`.secret_rules`, :mod:`.secret_patterns`
and :mod:`.redact_scan`) masks secrets in what streams out. All pure.
"""

from tether.actors.model.models import DEFAULT_MODEL, MODELS, model_info
from tether.actors.model.pricing import cost_usd, price_of
from tether.actors.model.prompt import assemble_system_prompt, read_workspace
from tether.actors.model.redact import Redactor, StreamRedactor
from tether.actors.model.titles import title_request, wants_title

__all__ = ["DEFAULT_MODEL", "MODELS", "Redactor", "StreamRedactor", "assemble_system_prompt",
           "cost_usd", "model_info", "price_of", "read_workspace", "title_request",
           "wants_title"]
