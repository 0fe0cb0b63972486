"""The tool-call families, their written syntax, and how a chat template names its family.

Detection follows llama.cpp's ``common/chat.cpp`` (``common_chat_try_specialized_template``
and the markers its differential parser finds): each family's template renders past calls
with the same markers the model writes, so the template's source names the family. A
template that names no family gets the generic JSON form, as llama.cpp gives it.
"""

from __future__ import annotations

import enum
import re
from typing import Final

from app.engine.tool_calls.syntax import (
    CallId,
    CallSyntax,
    GemmaArgs,
    JsonArgs,
    JsonCall,
    Lit,
    Name,
    PyCall,
    TagParams,
)

__all__ = ["SYNTAXES", "ToolCallFormat", "detect_tool_format", "template_declares_tools"]


class ToolCallFormat(enum.Enum):
    """A family's way of writing tool calls (the examples show one call to ``f``)."""

    GENERIC = "generic"  # {"tool_calls": [{"name": "f", "arguments": {...}}]}
    HERMES = "hermes"  # <tool_call>{"name": "f", "arguments": {...}}</tool_call>
    QWEN3_CODER = "qwen3_coder"  # <tool_call><function=f><parameter=k>v</parameter>...
    SEED_OSS = "seed_oss"  # <seed:tool_call><function=f><parameter=k>v</parameter>...
    GLM = "glm"  # <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
    HY3 = "hy3"  # <tool_calls:opensource><tool_call:opensource>f<tool_sep:opensource>...
    MINIMAX_M2 = "minimax_m2"  # <minimax:tool_call><invoke name="f"><parameter name="k">
    DEEPSEEK_DSML = "deepseek_dsml"  # <｜DSML｜tool_calls><｜DSML｜invoke name="f">...
    MINICPM5 = "minicpm5"  # <function name="f"><param name="k">v</param></function>
    LLAMA3_JSON = "llama3_json"  # {"name": "f", "parameters": {...}} (or <|python_tag|>)
    MISTRAL_JSON = "mistral_json"  # [TOOL_CALLS][{"name": "f", "arguments": {...}}]
    MISTRAL_ARGS = "mistral_args"  # [TOOL_CALLS]f[ARGS]{...}
    MISTRAL_CALL_ID = "mistral_call_id"  # [TOOL_CALLS]f[CALL_ID]abcdefghi[ARGS]{...}
    HARMONY = "harmony"  # gpt-oss: <|channel|>commentary to=functions.f<|message|>{...}<|call|>
    DEEPSEEK_R1 = (
        "deepseek_r1"  # <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
    )
    DEEPSEEK_V31 = "deepseek_v31"  # <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
    KIMI_K2 = "kimi_k2"  # <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0...
    KIMI_K3 = "kimi_k3"  # <|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>...
    GRANITE = "granite"  # <|tool_call|>[{"name": "f", "arguments": {...}}]
    LFM2 = "lfm2"  # <|tool_call_start|>[f(k="v")]<|tool_call_end|>
    GEMMA4 = "gemma4"  # <|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>
    FUNCTIONARY_V31 = "functionary_v31"  # <function=f>{...}</function>
    FIREFUNCTION = "firefunction"  # functools[{"name": "f", "arguments": {...}}]
    COMMAND_ACTION = "command_action"  # <|START_ACTION|>[{"tool_name": "f", "parameters": ..}]
    COMMAND_R_PLUS = "command_r_plus"  # Action: ```json [{"tool_name": "f", ...}] ```
    APRIEL = "apriel"  # <tool_calls>[{"name": "f", "arguments": {...}}]</tool_calls>
    MINIMAX_M1 = "minimax_m1"  # <tool_calls>\n{"name": "f", "arguments": {...}}\n</tool_calls>
    NEMOTRON_V2 = "nemotron_v2"  # <TOOLCALL>[{"name": "f", "arguments": {...}}]</TOOLCALL>
    GIGACHAT = "gigachat"  # <|function_call|>{"name": "f", "arguments": {...}}
    SOLAR = "solar"  # <|tool_calls|><|tool_call:begin|>id<|tool_call:name|>f<|tool_call:args|>
    APERTUS = "apertus"  # <|tools_prefix|>[{"f": {...}}]<|tools_suffix|>


_QWEN_PARAMS: Final = TagParams("<parameter=", ">\n", "", "\n</parameter>\n")
_GLM_PARAMS: Final = TagParams("<arg_key>", "</arg_key>\n", "<arg_value>", "</arg_value>\n")
_INVOKE_PARAMS: Final = TagParams('<parameter name="', '">', "", "</parameter>\n")
_DSML_PARAMS: Final = TagParams(
    '<｜DSML｜parameter name="',
    '"',
    "",
    "</｜DSML｜parameter>\n",
    ">",
    ' string="true"',
    ' string="false"',
)


def _dsml(block: str) -> CallSyntax:
    return CallSyntax(
        section_open=f"<｜DSML｜{block}>\n",
        call=(
            Lit('<｜DSML｜invoke name="'),
            Name(),
            Lit('">\n'),
            _DSML_PARAMS,
            Lit("</｜DSML｜invoke>\n"),
        ),
        section_close=f"</｜DSML｜{block}>",
    )


def _json_list(open_: str, close: str, call: JsonCall | None = None) -> CallSyntax:
    body = call if call is not None else JsonCall()
    return CallSyntax(section_open=open_, call=(body,), separator=", ", section_close=close)


_COHERE_CALL: Final = JsonCall(name_keys=("tool_name",), args_keys=("parameters",))

# Each family's syntaxes, the first being the one forced calls are written in.
SYNTAXES: Final[dict[ToolCallFormat, tuple[CallSyntax, ...]]] = {
    ToolCallFormat.GENERIC: (_json_list('{"tool_calls": [', "]}"),),
    ToolCallFormat.HERMES: (
        CallSyntax(call=(Lit("<tool_call>\n"), JsonCall(), Lit("\n</tool_call>"))),
    ),
    ToolCallFormat.QWEN3_CODER: (
        CallSyntax(
            call=(
                Lit("<tool_call>\n<function="),
                Name(),
                Lit(">\n"),
                _QWEN_PARAMS,
                Lit("</function>\n</tool_call>"),
            )
        ),
    ),
    ToolCallFormat.SEED_OSS: (
        CallSyntax(
            call=(
                Lit("<seed:tool_call>\n<function="),
                Name(),
                Lit(">\n"),
                TagParams("<parameter=", ">", "", "</parameter>\n"),
                Lit("</function>\n</seed:tool_call>"),
            )
        ),
    ),
    ToolCallFormat.GLM: (
        CallSyntax(call=(Lit("<tool_call>"), Name(), Lit("\n"), _GLM_PARAMS, Lit("</tool_call>"))),
    ),
    ToolCallFormat.HY3: (
        CallSyntax(
            section_open="<tool_calls:opensource>\n",
            call=(
                Lit("<tool_call:opensource>"),
                Name(),
                Lit("<tool_sep:opensource>\n"),
                TagParams(
                    "<arg_key:opensource>",
                    "</arg_key:opensource>\n",
                    "<arg_value:opensource>",
                    "</arg_value:opensource>\n",
                ),
                Lit("</tool_call:opensource>\n"),
            ),
            section_close="</tool_calls:opensource>",
        ),
    ),
    ToolCallFormat.MINIMAX_M2: (
        CallSyntax(
            section_open="<minimax:tool_call>\n",
            call=(Lit('<invoke name="'), Name(), Lit('">\n'), _INVOKE_PARAMS, Lit("</invoke>\n")),
            section_close="</minimax:tool_call>",
        ),
    ),
    ToolCallFormat.DEEPSEEK_DSML: (_dsml("tool_calls"), _dsml("function_calls")),
    ToolCallFormat.MINICPM5: (
        CallSyntax(
            call=(
                Lit('<function name="'),
                Name(),
                Lit('">'),
                TagParams('<param name="', '">', "", "</param>"),
                Lit("</function>"),
            )
        ),
    ),
    ToolCallFormat.LLAMA3_JSON: (
        CallSyntax(call=(JsonCall(),), start_only=True),
        CallSyntax(call=(Lit("<|python_tag|>"), JsonCall())),
    ),
    ToolCallFormat.MISTRAL_JSON: (_json_list("[TOOL_CALLS][", "]"),),
    ToolCallFormat.MISTRAL_ARGS: (
        CallSyntax(call=(Lit("[TOOL_CALLS]"), Name(), Lit("[ARGS]"), JsonArgs())),
    ),
    ToolCallFormat.MISTRAL_CALL_ID: (
        CallSyntax(
            call=(
                Lit("[TOOL_CALLS]"),
                Name(),
                Lit("[CALL_ID]"),
                CallId(9),
                Lit("[ARGS]"),
                JsonArgs(),
            )
        ),
    ),
    # gpt-oss writes each call as a message of its own; parsed by harmony.py, written thus.
    ToolCallFormat.HARMONY: (
        CallSyntax(
            call=(
                Lit("<|channel|>commentary to=functions."),
                Name(),
                Lit(" <|constrain|>json<|message|>"),
                JsonArgs(),
                Lit("<|call|>"),
            )
        ),
    ),
    ToolCallFormat.DEEPSEEK_R1: (
        CallSyntax(
            section_open="<｜tool▁calls▁begin｜>",
            call=(
                Lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>"),
                Name(),
                Lit("\n```json\n"),
                JsonArgs(),
                Lit("\n```<｜tool▁call▁end｜>"),
            ),
            section_close="<｜tool▁calls▁end｜>",
        ),
    ),
    ToolCallFormat.DEEPSEEK_V31: (
        CallSyntax(
            section_open="<｜tool▁calls▁begin｜>",
            call=(
                Lit("<｜tool▁call▁begin｜>"),
                Name(),
                Lit("<｜tool▁sep｜>"),
                JsonArgs(),
                Lit("<｜tool▁call▁end｜>"),
            ),
            section_close="<｜tool▁calls▁end｜>",
        ),
    ),
    ToolCallFormat.KIMI_K2: (
        CallSyntax(
            section_open="<|tool_calls_section_begin|>",
            call=(
                Lit("<|tool_call_begin|>functions."),
                Name(),
                Lit(":"),
                CallId(shape="functions.{name}:{id}"),
                Lit("<|tool_call_argument_begin|>"),
                JsonArgs(),
                Lit("<|tool_call_end|>"),
            ),
            section_close="<|tool_calls_section_end|>",
        ),
    ),
    ToolCallFormat.KIMI_K3: (
        CallSyntax(
            section_open="<|open|>tools<|sep|>",
            call=(
                Lit('<|open|>call tool="'),
                Name(),
                Lit('" index="'),
                CallId(),
                Lit('"<|sep|>'),
                TagParams(
                    '<|open|>argument key="',
                    '"',
                    "",
                    "<|close|>argument<|sep|>",
                    "<|sep|>",
                    ' type="string"',
                    ' type="json"',
                ),
                Lit("<|close|>call<|sep|>"),
            ),
            section_close="<|close|>tools<|sep|>",
        ),
    ),
    ToolCallFormat.GRANITE: (_json_list("<|tool_call|>[", "]"),),
    ToolCallFormat.LFM2: (
        CallSyntax(
            section_open="<|tool_call_start|>[",
            call=(PyCall(),),
            separator=", ",
            section_close="]<|tool_call_end|>",
        ),
    ),
    ToolCallFormat.GEMMA4: (
        CallSyntax(call=(Lit("<|tool_call>call:"), Name(), GemmaArgs(), Lit("<tool_call|>"))),
    ),
    ToolCallFormat.FUNCTIONARY_V31: (
        CallSyntax(call=(Lit("<function="), Name(), Lit(">"), JsonArgs(), Lit("</function>"))),
    ),
    ToolCallFormat.FIREFUNCTION: (_json_list("functools[", "]"),),
    ToolCallFormat.COMMAND_ACTION: (
        _json_list("<|START_ACTION|>[\n", "\n]<|END_ACTION|>", _COHERE_CALL),
    ),
    ToolCallFormat.COMMAND_R_PLUS: (
        _json_list("Action: ```json\n[\n", "\n]\n```", _COHERE_CALL),
        # as its template writes past calls (indented, the fence right after the list)
        _json_list("Action:\n```json\n[", "]```", _COHERE_CALL),
    ),
    ToolCallFormat.APRIEL: (_json_list("<tool_calls>[", "]</tool_calls>"),),
    ToolCallFormat.MINIMAX_M1: (
        CallSyntax(
            section_open="<tool_calls>\n",
            call=(JsonCall(),),
            separator="\n",
            section_close="\n</tool_calls>",
        ),
    ),
    ToolCallFormat.NEMOTRON_V2: (_json_list("<TOOLCALL>[", "]</TOOLCALL>"),),
    ToolCallFormat.GIGACHAT: (CallSyntax(call=(Lit("<|function_call|>"), JsonCall())),),
    ToolCallFormat.SOLAR: (
        CallSyntax(
            section_open="<|tool_calls|>",
            call=(
                Lit("<|tool_call:begin|>"),
                CallId(),
                Lit("<|tool_call:name|>"),
                Name(),
                Lit("<|tool_call:args|>"),
                JsonArgs(),
                Lit("<|tool_call:end|>"),
            ),
            section_close="<|calls|>",
        ),
    ),
    ToolCallFormat.APERTUS: (
        _json_list("<|tools_prefix|>[", "]<|tools_suffix|>", JsonCall(name_is_key=True)),
    ),
}


# (needles that must all appear, needles that must not, format), first match wins: the
# order of chat.cpp's specialised handlers, then the markers its differential parser finds.
_DETECTION: Final[tuple[tuple[tuple[str, ...], tuple[str, ...], ToolCallFormat], ...]] = (
    (("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]"), ("[CALL_ID]",), ToolCallFormat.MISTRAL_ARGS),
    (("[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"), (), ToolCallFormat.MISTRAL_CALL_ID),
    (("[TOOL_CALLS]", "[ARGS]"), (), ToolCallFormat.MISTRAL_ARGS),
    (("<|channel|>",), (), ToolCallFormat.HARMONY),
    (("<|tool_calls_section_begin|>", "<|tool_call_begin|>"), (), ToolCallFormat.KIMI_K2),
    (("<|open|>", "<|close|>", "<|end_of_msg|>"), (), ToolCallFormat.KIMI_K3),
    (("<role>ASSISTANT</role>", "<arg_key>"), (), ToolCallFormat.GLM),
    (("<|START_ACTION|>",), (), ToolCallFormat.COMMAND_ACTION),
    (("<|tool_list_start|>",), (), ToolCallFormat.LFM2),
    (("List of tools: [",), (), ToolCallFormat.LFM2),
    (("<|function_call|>",), (), ToolCallFormat.GIGACHAT),
    (("dsml_token", "DSML"), (), ToolCallFormat.DEEPSEEK_DSML),
    (("'<|tool_call>call:'",), (), ToolCallFormat.GEMMA4),
    (("Tool usage guidelines:", '<function name="', '<param name="'), (), ToolCallFormat.MINICPM5),
    (("<seed:tool_call>",), (), ToolCallFormat.SEED_OSS),
    (("<tool_call>", "<function=", "<parameter="), (), ToolCallFormat.QWEN3_CODER),
    (("<minimax:tool_call>", "<invoke name="), (), ToolCallFormat.MINIMAX_M2),
    (("'<tool_call{}>'", "'<arg_key{}>'", "opensource"), (), ToolCallFormat.HY3),
    (("<tool_call>", "<arg_key>"), (), ToolCallFormat.GLM),
    (("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "```json"), (), ToolCallFormat.DEEPSEEK_R1),
    (("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"), (), ToolCallFormat.DEEPSEEK_V31),
    (("<|tool_call:begin|>", "<|tool_call:name|>"), (), ToolCallFormat.SOLAR),
    (("<|tools_prefix|>",), (), ToolCallFormat.APERTUS),
    (("<tool_calls>[",), (), ToolCallFormat.APRIEL),
    (("<tool_calls>",), (), ToolCallFormat.MINIMAX_M1),
    (("<TOOLCALL>",), (), ToolCallFormat.NEMOTRON_V2),
    (("functools[",), (), ToolCallFormat.FIREFUNCTION),
    (("<|tool_call|>",), (), ToolCallFormat.GRANITE),
    (("Action:", "```json", "tool_name"), (), ToolCallFormat.COMMAND_R_PLUS),
    (("<function=", "</function>"), ("<parameter=",), ToolCallFormat.FUNCTIONARY_V31),
    # MiniMax-M3 wraps its markup in "]<]minimax[>[" namespace tokens: not parsed (generic).
    (("<tool_call>",), ("]<]minimax[>[",), ToolCallFormat.HERMES),
    (("<|python_tag|>",), (), ToolCallFormat.LLAMA3_JSON),
    (("<|start_header_id|>", '"parameters"'), (), ToolCallFormat.LLAMA3_JSON),
    (("[TOOL_CALLS]",), (), ToolCallFormat.MISTRAL_JSON),
)

_TOOLS_NAMED: Final = re.compile(r"\btools\b|\btool_calls\b")


def template_declares_tools(source: str) -> bool:
    """Whether a chat template renders tools or past tool calls (it names ``tools`` or
    ``tool_calls``)."""
    return _TOOLS_NAMED.search(source) is not None


def detect_tool_format(source: str) -> ToolCallFormat:
    """The tool-call family of the model whose chat template is ``source``."""
    for needles, excluded, fmt in _DETECTION:
        if all(n in source for n in needles) and not any(n in source for n in excluded):
            return fmt
    return ToolCallFormat.GENERIC
