"""A chat-tuned model's chat template: the Jinja program in its folder that lays a conversation out as the text the
model was tuned on (``<|im_start|>user\\n…<|im_end|>``), rendered exactly as transformers'
``tokenizer.apply_chat_template(messages, tokenize=False)`` renders it, in jinja2's immutable sandbox (templates come
from strangers: they may read what they are given and nothing else).

What transformers' renderer provides, and so this one: ``trim_blocks`` and ``lstrip_blocks``; the ``loopcontrols``
extension and the ``{% generation %}`` block (rendered as its body); the globals ``raise_exception(message)`` (a
template's refusal, here one line), ``strftime_now(format)`` (the local time now), ``dict`` and ``namespace``
(which refuses names starting with ``_``); the ``tojson`` filter as ``json.dumps`` (not HTML-escaped, non-ASCII kept,
with ``indent``, ``separators`` and ``sort_keys``); and the variables ``messages``, ``tools`` and ``documents``
(None here), ``add_generation_prompt``, and the tokenizer's named special tokens (``bos_token``, ``eos_token``, …).

A folder's template (``load_chat_template``), in the order transformers reads them: ``chat_template.jinja``, else
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates: the one named ``default``),
else the ``chat_template`` of ``chat_template.json`` (a processor's older file). No torch here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ChatTemplateError

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
PROCESSOR_TEMPLATE_FILE = "chat_template.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
# The named special tokens transformers hands every template (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
DEFAULT_TEMPLATE_NAME = "default"


@dataclass(frozen=True)
class ChatTemplate:
    """A folder's chat template and the special tokens it is rendered with (``file``: where it was read)."""

    source: str
    special_tokens: dict[str, str] = field(default_factory=dict)
    file: str = TEMPLATE_FILE

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        return render_chat(self.source, messages, add_generation_prompt=add_generation_prompt,
                           special_tokens=self.special_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.source, "special_tokens": dict(self.special_tokens), "file": self.file}

    @classmethod
    def from_dict(cls, entry: Any) -> ChatTemplate:
        """The template a checkpoint stored (``to_dict``); anything else is one line."""
        if not (isinstance(entry, dict) and isinstance(entry.get("template"), str)
                and isinstance(entry.get("special_tokens", {}), dict)
                and all(isinstance(value, str) for value in entry.get("special_tokens", {}).values())):
            raise ChatTemplateError("the stored chat template is not a template with its special tokens")
        return cls(entry["template"], dict(entry.get("special_tokens", {})), str(entry.get("file", TEMPLATE_FILE)))


def chat_messages(text: str, system: str | None = None) -> list[dict[str, str]]:
    """The conversation a prompt is: ``text`` as the user's one message, after ``system``'s when one is given."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    return messages + [{"role": "user", "content": text}]


def render_chat(template_source: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                special_tokens: dict[str, str] | None = None) -> str:
    """``messages`` laid out by the chat template ``template_source`` as transformers does (``add_generation_prompt``:
    end with the opening of the assistant's turn; ``special_tokens``: ``bos_token`` and the like, by name). A
    template that cannot be read, that refuses the conversation (``raise_exception``) or that fails on it is one
    line (``ChatTemplateError``)."""
    template = _compiled(template_source)
    if not messages:
        raise ChatTemplateError("a chat prompt needs at least one message")
    conversation = [_message(message) for message in messages]
    variables = _plain(dict(special_tokens or {}))
    try:
        return template.render(messages=conversation, tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **variables)
    except _Refusal as refusal:
        raise ChatTemplateError(f"the model's chat template refuses this conversation: {_one_line(refusal)}") from None
    except Exception as failure:  # a template is a stranger's program: whatever stops it, said in one line
        raise ChatTemplateError(f"the model's chat template failed on this conversation "
                                f"({type(failure).__name__}: {_one_line(failure)})") from None


def load_chat_template(folder: str | Path) -> ChatTemplate | None:
    """The chat template of a Hugging Face model folder with its special tokens (None when it has none); a file
    that cannot be read is one line naming it."""
    folder = Path(folder)
    config = _json_file(folder / TOKENIZER_CONFIG) or {}
    if (folder / TEMPLATE_FILE).is_file():
        try:
            source, file = (folder / TEMPLATE_FILE).read_text(encoding="utf-8"), TEMPLATE_FILE
        except (OSError, UnicodeDecodeError) as error:
            raise ChatTemplateError(f"{folder / TEMPLATE_FILE}: cannot be read ({_one_line(error)})") from None
    elif config.get("chat_template") is not None:
        source, file = _default_template(config["chat_template"], folder / TOKENIZER_CONFIG), TOKENIZER_CONFIG
    elif (folder / PROCESSOR_TEMPLATE_FILE).is_file():
        entry = _json_file(folder / PROCESSOR_TEMPLATE_FILE)
        source, file = _default_template(entry.get("chat_template"), folder / PROCESSOR_TEMPLATE_FILE), \
            PROCESSOR_TEMPLATE_FILE
    else:
        return None
    return ChatTemplate(source, special_tokens_of(folder, config), file)


def special_tokens_of(folder: Path, config: dict[str, Any]) -> dict[str, str]:
    """The named special tokens a template is given, as transformers' ``special_tokens_map`` has them: the standard
    ones from ``tokenizer_config.json`` (an older folder's ``special_tokens_map.json``, one whose config has no
    ``added_tokens_decoder``, overrides them), then a model's own (its config's other ``*_token`` entries and an
    ``extra_special_tokens`` given by name, else its ``model_specific_special_tokens``)."""
    entries = {name: config.get(name) for name in SPECIAL_TOKEN_NAMES}
    if "added_tokens_decoder" not in config and (folder / SPECIAL_TOKENS_MAP).is_file():
        legacy = _json_file(folder / SPECIAL_TOKENS_MAP)
        entries.update({name: legacy[name] for name in SPECIAL_TOKEN_NAMES if name in legacy})
    own = {key: value for key, value in config.items()  # transformers takes a dict here only as an added token
           if key.endswith("_token") and key not in SPECIAL_TOKEN_NAMES and _token_text(value) is not None
           and (not isinstance(value, dict) or value.get("__type") == "AddedToken")}
    if isinstance(config.get("extra_special_tokens"), dict):
        own.update(config["extra_special_tokens"])
    if not own and isinstance(config.get("model_specific_special_tokens"), dict):
        own = dict(config["model_specific_special_tokens"])
    tokens = {name: _token_text(value) for name, value in {**entries, **own}.items()}
    return {name: text for name, text in tokens.items() if text is not None}


def _token_text(value: Any) -> str | None:
    """A special token as a config writes it: its text, or an added token's ``{"content": ...}``."""
    content = value.get("content") if isinstance(value, dict) else value
    return content if isinstance(content, str) else None


def _default_template(value: Any, path: Path) -> str:
    """A config's ``chat_template``: a string, or a list of ``{"name", "template"}`` of which ``default`` is used."""
    if isinstance(value, list):
        named = {entry.get("name"): entry.get("template") for entry in value if isinstance(entry, dict)}
        value = named.get(DEFAULT_TEMPLATE_NAME)
        if value is None:
            raise ChatTemplateError(f"{path}: its chat templates ({', '.join(map(str, named))}) have none named "
                                    f"{DEFAULT_TEMPLATE_NAME!r}")
    if not isinstance(value, str):
        raise ChatTemplateError(f"{path}: its chat_template is not a template (a {type(value).__name__})")
    return value


def _json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ChatTemplateError(f"{path}: cannot be read as JSON ({_one_line(error)})") from None
    if not isinstance(document, dict):
        raise ChatTemplateError(f"{path}: not a JSON object")
    return document


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _plain(value: Any) -> Any:
    """What a template may see, as transformers hands it over: plain JSON data rebuilt (subclasses of str, int and
    the like lose their methods; anything else becomes a placeholder naming its type)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value) if type(value) in (list, tuple) else \
            [_plain(item) for item in value]
    return f"<{type(value).__name__}>"


def _message(message: Any) -> dict[str, Any]:
    """One message as a template sees it: its plain data, without the keys whose value is None."""
    if not isinstance(message, dict):
        raise ChatTemplateError(f"a chat message is a dict of role and content; got a {type(message).__name__}")
    return {key: value for key, value in _plain(message).items() if value is not None}


class _Refusal(Exception):
    """Raised by a template's ``raise_exception``: stands in for jinja2's TemplateError (set up in ``_compiled``)."""


@lru_cache(maxsize=16)
def _compiled(source: str):
    """``source`` compiled in the sandbox transformers renders chat templates in (one compilation per template)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[_generation_block(), jinja2.ext.loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_TemplateDict(),
                               namespace=_namespace_class())
    try:
        return environment.from_string(source)
    except jinja2.TemplateSyntaxError as error:
        raise ChatTemplateError(f"the model's chat template cannot be read: {error.message} (line {error.lineno})") \
            from None


def _raise_exception(message: str):
    raise _refusal_class()(message)


@lru_cache(maxsize=1)
def _refusal_class():
    """``_Refusal`` as a jinja2 ``TemplateError`` too (as transformers raises it), made once jinja2 is imported."""
    import jinja2

    return type("TemplateRefusal", (_Refusal, jinja2.exceptions.TemplateError), {})


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """transformers' ``tojson``: ``json.dumps`` as is (jinja2's own escapes ``<``, ``>``, ``&`` and ``'`` for HTML)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` in a template, without the type itself (no attribute tricks)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


@lru_cache(maxsize=1)
def _namespace_class():
    """jinja2's ``namespace``, refusing names that start with ``_`` (CPython's internals)."""
    import jinja2.exceptions
    import jinja2.utils

    def check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not store {name!r} on a namespace")

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # Namespace's own signature trick: namespace(self=...) works
            self, args = args[0], args[1:]
            attributes = dict(*args, **kwargs)
            for name in attributes:
                check(name)
            jinja2.utils.Namespace.__init__(self, attributes)

        def __setitem__(self, name, value):
            check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    return TemplateNamespace


@lru_cache(maxsize=1)
def _generation_block():
    """The ``{% generation %}…{% endgeneration %}`` tag transformers adds (it marks the assistant's tokens); its body
    is rendered as is."""
    import jinja2.ext
    import jinja2.nodes

    class GenerationBlock(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            line = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(line)

        def _body(self, caller):
            return caller()

    return GenerationBlock
