"""Hugging Face model ids (``Helsinki-NLP/opus-mt-en-de``, ``facebook/bart-base``) as checkpoints: the model folder
the local Hugging Face cache holds for an id, found through huggingface_hub's cache API without the network, and,
only when the user asks for it, the files such a folder needs downloaded into that cache.

The cache is the one every Hugging Face library shares: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (read when asked, so a changed environment
counts). A model there is ``models--ORG--NAME/`` with ``refs/main`` (the commit the name stands for),
``snapshots/COMMIT/`` (the model folder, its files links into ``blobs/``). No torch here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from ..errors import CheckpointError

# Beside the weights, every file an importer of a Hugging Face folder may read: the configs, each family's
# tokenizer files, and the chat template. Other files of a repository (other frameworks' weights, ONNX exports,
# READMEs, images) are never downloaded.
FOLDER_FILES = frozenset({
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt", "source.spm", "target.spm", "target_vocab.json",
    "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "vocab-src.json", "vocab-tgt.json",
    "chat_template.jinja", "chat_template.json"})
# The weights, safetensors preferred: one file, or shards with their index.
SAFETENSORS_WEIGHTS = re.compile(r"model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json")
PICKLED_WEIGHTS = re.compile(r"pytorch_model(-\d+-of-\d+)?\.bin|pytorch_model\.bin\.index\.json")
DEFAULT_ENDPOINT = "https://huggingface.co"
FILE_ENDINGS = (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".chkpt", ".attnviz", ".json", ".yaml", ".tsv")


def hub_cache() -> Path:
    """The local Hugging Face cache folder, by the rule huggingface_hub follows, read from the environment now."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.path.expanduser(os.environ[variable])))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.path.expanduser(os.environ["HF_HOME"]))) / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "huggingface" / "hub"


def endpoint() -> str:
    """The Hub downloads come from (``HF_ENDPOINT`` read now; huggingface.co by default)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def looks_like_file(text: str) -> bool:
    """Whether ``text`` is written like a file's path rather than a model id (a checkpoint file's ending)."""
    return text.lower().endswith(FILE_ENDINGS)


def is_model_id(text: str) -> bool:
    """Whether ``text`` can be a Hugging Face model id (``NAME`` or ``ORG/NAME``, by the Hub's own rules)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def repo_folder(model_id: str) -> Path:
    """Where the cache keeps everything of ``model_id`` (present or not)."""
    from huggingface_hub.file_download import repo_folder_name

    return hub_cache() / repo_folder_name(repo_id=model_id, repo_type="model")


def cached_model_folder(model_id: str) -> Path | None:
    """The model folder of ``model_id`` in the local cache: the snapshot of the commit ``refs/main`` names (where
    huggingface_hub's ``try_to_load_from_cache`` finds its ``config.json``), else the newest snapshot holding a
    ``config.json`` (a model downloaded at a given commit only); None when the cache has none."""
    from huggingface_hub import try_to_load_from_cache

    if not repo_folder(model_id).is_dir():  # the cheap answer for the common case
        return None
    found = try_to_load_from_cache(model_id, "config.json", cache_dir=hub_cache())
    if isinstance(found, str):
        return Path(found).parent
    snapshots = repo_folder(model_id) / "snapshots"
    folders = [folder for folder in snapshots.iterdir() if (folder / "config.json").is_file()] \
        if snapshots.is_dir() else []
    return max(folders, key=lambda folder: folder.stat().st_mtime_ns, default=None)


def is_weights(name: str) -> bool:
    """Whether a model folder's file ``name`` holds (part of) its weights, or their index."""
    return bool(SAFETENSORS_WEIGHTS.fullmatch(name) or PICKLED_WEIGHTS.fullmatch(name))


def has_weights(folder: Path) -> bool:
    return any(is_weights(item.name) for item in folder.iterdir())


def model_folder(model_id: str, *, download: bool = False,
                 announce: Callable[[str], object] | None = None) -> Path | None:
    """The model folder ``model_id`` names: from the local cache, or (``download``, and only then) downloaded
    into it when the cache lacks it or its weights (``announce`` is told, in one line, before); None when the
    cache lacks it and no download was asked for. A cached folder without weights (its config fetched alone) is
    one line saying how to get them."""
    folder = cached_model_folder(model_id)
    if folder is not None and has_weights(folder):
        return folder
    if download:
        if announce is not None:
            announce(f"downloading {model_id} from {endpoint()} into the Hugging Face cache {hub_cache()}")
        return download_model(model_id)
    if folder is not None:
        raise CheckpointError(model_id, f"in the local Hugging Face cache ({folder}) without its weights; add "
                                        "--download to fetch them")
    return None


def not_cached_reason(model_id: str) -> str:
    """The words for a model id the local cache lacks: where it was looked for, and how to get it."""
    return (f"not in the local Hugging Face cache ({hub_cache()}); add --download to fetch it from {endpoint()}, "
            "or give a model folder or file")


def folder_files(names: list[str]) -> list[str]:
    """Which of a repository's files (``names``, relative paths) make the model folder attnviz reads: the configs,
    the tokenizer files and the chat template at its top, and the weights in safetensors (one file, or shards
    with their index) where the repository has them, else its ``pytorch_model*.bin``."""
    top = [name for name in names if "/" not in name]
    safetensors = [name for name in top if SAFETENSORS_WEIGHTS.fullmatch(name)]
    weights = safetensors or [name for name in top if PICKLED_WEIGHTS.fullmatch(name)]
    return sorted(name for name in top if name in FOLDER_FILES) + sorted(weights)


def download_model(model_id: str) -> Path:
    """Download ``model_id``'s model folder (``folder_files`` of its main branch) into the local cache, with
    huggingface_hub's progress bars, and return it. Any failure (no network, an unknown or gated model, a
    disk that filled up) is one line."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    source = endpoint()
    try:
        info = HfApi(endpoint=source).model_info(model_id)
        files = folder_files([entry.rfilename for entry in info.siblings or []])
        if not any(is_weights(name) for name in files):
            raise CheckpointError(model_id, f"on {source}, it has no model.safetensors nor pytorch_model.bin at its "
                                            "top: not a model folder attnviz reads")
        folder = snapshot_download(model_id, allow_patterns=files, cache_dir=hub_cache(), endpoint=source)
    except GatedRepoError:
        raise CheckpointError(model_id, f"a gated model: accept its terms at {source}/{model_id}, then log in "
                                        "(hf auth login) and add --download again") from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise CheckpointError(model_id, f"no such model on {source} (or a private one: log in with "
                                        "hf auth login)") from None
    except CheckpointError:
        raise
    except Exception as failure:  # the network, the server, the disk: whatever stopped it, in one line
        reason = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
        raise CheckpointError(model_id, f"could not be downloaded from {source} ({reason})") from None
    return Path(folder)
