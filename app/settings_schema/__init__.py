"""One schema for every setting a user may change: context fields and sampling fields.

Each field is described once, by a frozen :class:`FieldSpec`: its label, help text, unit,
default, valid range (plus one special value such as ``-1 = random``), choices, whether a
change applies live or rebuilds the context, and its command-line flags. Everything else is
built from it:

- :mod:`app.engine.settings` declares ``ContextSettings`` and ``SamplingParams`` with
  :func:`spec_field` (default and spec attached as ``dataclasses.field`` metadata) and
  validates them with :meth:`FieldSpec.problem` (errors name their field);
- :mod:`app.storage.settings` migrates stored values with :meth:`FieldSpec.migrate`;
- the settings panel and the chat's sampling controls build their editors from the specs;
- ``llamadesk run`` / ``bench`` build their flags from :attr:`FieldSpec.cli`;
- the API server builds its request parameters from :func:`api_parameters`.

The package imports only the standard library: storage and the engine both use it, and
neither may import the other (nor Qt). Its rooms:

- :mod:`.field_spec`: :class:`FieldSpec` and its parts (:class:`Apply`, :class:`Special`,
  :class:`CliOption`, :data:`MISSING`), :func:`spec_field`, :func:`specs_of`;
- :mod:`.llama_values`: llama.cpp's numbers behind the choices (KV cache types, flash
  attention, RoPE scaling, pooling, attention type) and its limits;
- :mod:`.context_fields`: the context fields and the settings panel's groups of them;
- :mod:`.sampling_fields`: the sampling fields and their API-server parameters;
- :mod:`.conversation_fields`: settings of one conversation (not engine parameters);
- :mod:`.model_fields`: settings of one model that are not context fields (its chat
  template);
- :mod:`.device_fields`: where a model's layers go (GPU layers, split, devices, RPC);
- :mod:`.machine_defaults`: thread counts from this machine's cores;
- :mod:`.units`: the app's one byte formatter and the number format of messages.
"""

from app.settings_schema.context_fields import (
    ADVANCED_CONTEXT_GROUPS,
    BASIC_CONTEXT_FIELDS,
    CONTEXT_FIELDS,
    CONTEXT_GROUPS,
)
from app.settings_schema.conversation_fields import CONVERSATION_FIELDS
from app.settings_schema.device_fields import DEVICE_FIELDS
from app.settings_schema.field_spec import (
    MISSING,
    SPEC_KEY,
    Apply,
    CliOption,
    FieldSpec,
    Kind,
    Special,
    spec_field,
    specs_of,
)
from app.settings_schema.llama_values import (
    ATTENTION,
    FLASH_ATTN,
    FROM_MODEL,
    KV_TYPES,
    MAX_SEQUENCES,
    POOLING,
    ROPE_SCALING,
)
from app.settings_schema.machine_defaults import default_batch_threads, default_threads
from app.settings_schema.model_fields import MODEL_FIELDS
from app.settings_schema.sampling_fields import SAMPLING_FIELDS, api_parameters
from app.settings_schema.units import format_bytes

__all__ = [
    "ADVANCED_CONTEXT_GROUPS",
    "ATTENTION",
    "BASIC_CONTEXT_FIELDS",
    "CONTEXT_FIELDS",
    "CONTEXT_GROUPS",
    "CONVERSATION_FIELDS",
    "DEVICE_FIELDS",
    "FLASH_ATTN",
    "FROM_MODEL",
    "KV_TYPES",
    "MAX_SEQUENCES",
    "MISSING",
    "MODEL_FIELDS",
    "POOLING",
    "ROPE_SCALING",
    "SAMPLING_FIELDS",
    "SPEC_KEY",
    "Apply",
    "CliOption",
    "FieldSpec",
    "Kind",
    "Special",
    "api_parameters",
    "default_batch_threads",
    "default_threads",
    "format_bytes",
    "spec_field",
    "specs_of",
]
