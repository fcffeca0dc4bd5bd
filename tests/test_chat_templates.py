"""Chat templates rendered as transformers renders them: real templates of the shapes chat-tuned models ship (a
Llama-3, a Llama-3.1 with today's date, a Qwen2 ChatML with a default system message, a Gemma that refuses a system
role, a Mistral that checks the roles alternate), written into folders by transformers' ``save_pretrained`` (and the
older places a folder keeps one), compared with ``tokenizer.apply_chat_template(..., tokenize=False)``."""

from __future__ import annotations

import json

import pytest

from models.errors import ChatTemplateError
from models.storage.metadata import read_metadata
from models.text.chat import ChatTemplate, chat_messages, load_chat_template, render_chat

transformers = pytest.importorskip("transformers")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

QWEN2 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""  # noqa: E501 (the template's own long line)

GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

# Mistral's checks with a namespace, loop controls, dict() and a generation block, and tojson with transformers'
# semantics (no HTML escapes, non-ASCII kept, its options).
MISTRAL_LIKE = """{%- set ns = namespace(index=0, system='') %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.system = message.content %}
        {%- continue %}
    {%- endif %}
    {%- if (message.role == 'user') != (ns.index % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- set ns.index = ns.index + 1 %}
{%- endfor %}
{{- bos_token }}
{%- for message in messages if message.role != 'system' %}
    {%- if message.role == 'user' %}
        {%- set shown = dict(text=message.content, system=ns.system) %}
        {{- '[INST] ' + shown | tojson + ' ' + shown | tojson(indent=2, sort_keys=true) + ' [/INST]' }}
    {%- else %}
        {% generation %}{{- message.content + eos_token }}{% endgeneration %}
    {%- endif %}
{%- endfor %}
"""  # noqa: E501

TEMPLATES = {"llama3": LLAMA3, "llama31": LLAMA31, "qwen2": QWEN2, "gemma": GEMMA, "mistral": MISTRAL_LIKE}
SPECIAL = {"llama3": ("<|begin_of_text|>", "<|eot_id|>"), "llama31": ("<|begin_of_text|>", "<|eot_id|>"),
           "qwen2": (None, "<|im_end|>"), "gemma": ("<bos>", "<eos>"), "mistral": ("<s>", "</s>")}
TEXTS = ["Translate to Spanish: the cat sat on the mat.", "  ¿Qué? <b>bold</b> & 'quotes' \"too\" — ñ 😀\n"]
SYSTEM = "You translate English into Spanish."


def save_tokenizer(folder, name: str):
    """A real tokenizer folder written by transformers' save_pretrained with the template ``name`` (its files:
    tokenizer.json, tokenizer_config.json with the special tokens, chat_template.jinja); reloaded from the folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    bos, eos = SPECIAL[name]
    words = ["<unk>", eos, *([bos] if bos else []), "the", "cat", "sat"]
    backend = Tokenizer(models.WordLevel({word: index for index, word in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokens = {"unk_token": "<unk>", "eos_token": eos, **({"bos_token": bos} if bos else {})}
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=TEMPLATES[name],
                                         **tokens).save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def expected(tokenizer, messages, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


@pytest.mark.parametrize("name", ["llama3", "llama31", "qwen2", "gemma", "mistral"])
def test_a_folders_template_renders_as_transformers_renders_it(tmp_path, name):
    tokenizer = save_tokenizer(tmp_path, name)
    template = load_chat_template(tmp_path)
    assert template.file == "chat_template.jinja" and template.special_tokens == tokenizer.special_tokens_map
    conversations = [chat_messages(text) for text in TEXTS]
    if name != "gemma":
        conversations += [chat_messages(text, SYSTEM) for text in TEXTS]
    for messages in conversations:
        for add_generation_prompt in (True, False):
            rendered = template.render(messages, add_generation_prompt=add_generation_prompt)
            assert rendered == expected(tokenizer, messages, add_generation_prompt), (messages, add_generation_prompt)
            assert rendered == render_chat(template.source, messages, add_generation_prompt=add_generation_prompt,
                                           special_tokens=tokenizer.special_tokens_map)


def test_the_qwen_template_adds_its_default_system_message_and_llama_31_todays_date(tmp_path):
    from datetime import datetime

    qwen = load_chat_template(save_tokenizer(tmp_path / "qwen", "qwen2") and tmp_path / "qwen")
    assert qwen.render(chat_messages("hola")) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhola<|im_end|>\n<|im_start|>assistant\n")
    llama = load_chat_template(save_tokenizer(tmp_path / "llama", "llama31") and tmp_path / "llama")
    assert f"Today Date: {datetime.now():%d %b %Y}\n\n" in llama.render(chat_messages("hola"))


def test_a_template_that_refuses_the_conversation_is_one_line(tmp_path):
    tokenizer = save_tokenizer(tmp_path, "gemma")
    messages = chat_messages("hello", SYSTEM)
    with pytest.raises(Exception, match="System role not supported"):  # transformers refuses it too
        expected(tokenizer, messages, True)
    with pytest.raises(ChatTemplateError) as refused:
        load_chat_template(tmp_path).render(messages)
    assert str(refused.value) == "the model's chat template refuses this conversation: System role not supported"
    mistral = load_chat_template(save_tokenizer(tmp_path / "mistral", "mistral") and tmp_path / "mistral")
    with pytest.raises(ChatTemplateError, match="conversation roles must alternate") as refused:
        mistral.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert "\n" not in str(refused.value)


def test_a_models_own_named_special_tokens_reach_the_template(tmp_path):
    """Special tokens a model names itself (``extra_special_tokens`` by name, other ``*_token`` entries of its
    config) are variables of the template, as transformers gives them."""
    save_tokenizer(tmp_path, "gemma")
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "extra_special_tokens": {"image_token": "<image_soft_token>"},
                                       "boi_token": "<start_of_image>", "audio_token": {"content": "<audio>"},
                                       "eoi_token": {"content": "<end_of_image>", "__type": "AddedToken"}}))
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}{{ boi_token }}{{ image_token }}{{ eoi_token }}"
                                                  "{{ audio_token }}{{ messages[0].content }}", encoding="utf-8")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    template = load_chat_template(tmp_path)
    assert template.special_tokens == tokenizer.special_tokens_map and "audio_token" not in template.special_tokens
    messages = chat_messages("hi")
    assert template.render(messages) == expected(tokenizer, messages, True)


def test_the_sandbox_keeps_a_template_to_its_data():
    escapes = ["{{ messages.__class__.__mro__ }}", "{% set ns = namespace(_hidden=1) %}{{ ns }}",
               "{{ messages.append(1) }}", "{{ cycler.__init__.__globals__.os }}"]
    for source in escapes:
        with pytest.raises(ChatTemplateError, match="failed on this conversation \\(SecurityError: ") as failed:
            render_chat(source, chat_messages("hi"), add_generation_prompt=True)
        assert "\n" not in str(failed.value)
    assert render_chat("{{ raise_exception.__globals__ }}", chat_messages("hi")) == ""  # undefined: nothing shown
    with pytest.raises(ChatTemplateError, match=r"cannot be read: .*\(line 2\)"):
        render_chat("ok\n{% for message in messages %}", chat_messages("hi"))
    with pytest.raises(ChatTemplateError, match="at least one message"):
        render_chat(LLAMA3, [])


def test_the_older_places_a_folder_keeps_its_template(tmp_path):
    """tokenizer_config.json's ``chat_template`` (a string, or named templates of which ``default`` is used), and a
    processor's chat_template.json; transformers reads the first two the same way."""
    tokenizer = save_tokenizer(tmp_path, "llama3")
    (tmp_path / "chat_template.jinja").unlink()
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    for stored in (LLAMA3, [{"name": "default", "template": LLAMA3}, {"name": "tool_use", "template": QWEN2}]):
        config_path.write_text(json.dumps({**config, "chat_template": stored}))
        template = load_chat_template(tmp_path)
        reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
        messages = chat_messages(TEXTS[1])
        assert template.file == "tokenizer_config.json"
        assert template.render(messages) == expected(reloaded, messages, True) == expected(tokenizer, messages, True)
    config_path.write_text(json.dumps(config))
    assert load_chat_template(tmp_path) is None
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": GEMMA}))
    assert load_chat_template(tmp_path).source == GEMMA
    config_path.write_text("{not json")
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json: cannot be read as JSON"):
        load_chat_template(tmp_path)


def test_a_converted_checkpoint_keeps_its_folders_chat_template(capsys, tmp_path):
    """A model folder with a chat template converts into a checkpoint that keeps it (header only, no torch to read)."""
    from attnviz.cli import main
    from tests.test_import_marian import build_marian

    (tmp_path / "marian").mkdir()
    folder = build_marian(tmp_path / "marian")[0]
    assert main(["convert", str(folder), "-o", str(tmp_path / "plain.safetensors")]) == 0
    assert "chat_template" not in read_metadata(tmp_path / "plain.safetensors")
    (folder / "chat_template.jinja").write_text(QWEN2, encoding="utf-8")
    assert main(["convert", str(folder), "-o", str(tmp_path / "chat.safetensors")]) == 0
    stored = ChatTemplate.from_dict(read_metadata(tmp_path / "chat.safetensors")["chat_template"])
    assert stored == load_chat_template(folder) and stored.source == QWEN2
    assert stored.render(chat_messages("hola")).endswith("<|im_start|>user\nhola<|im_end|>\n<|im_start|>assistant\n")
