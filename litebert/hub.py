"""The Hugging Face Hub on both ends: where a name that is not a local path goes, and the model card a saved
directory carries there.

One lookup rule for tokenizers (tokenizer.Tokenizer.from_pretrained) and models (weights.resolve_model_dir), so
both fail the same way, in one line, when the name is neither here nor fetchable.

README.md beside every saved model is a model card as the Hub reads one: YAML front matter (library_name, tags,
pipeline_tag, and license, base_model and metrics when known), then what the model is. library_name is
"transformers", not "litebert": the directory loads in transformers unchanged, and the Hub shows that library's
loading snippet; the "litebert" tag says where it was made. A README.md that litebert did not write (a user's own
card) is left as it is.
"""


from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object, write_text_atomically

_HUB_ID = re.compile(r"(?!\.)[\w.-]+(/[\w.-]+)?")


def looks_like_hub_id(name: str) -> bool:
    """A Hub id is "name" or "namespace/name" (word characters, "-", "."). Anything else that does not exist here
    was meant as a local path, and a Hub attempt (retries, warnings, then an error about the Hub) would only
    confuse: ./x, ../x, /abs/x, ~/x, a/b/c, a name with spaces or a backslash. A "namespace/name" whose namespace
    is a directory here is still a Hub id (albert/albert-base-v2 beside a clone of google-research/albert): a
    typo below a directory (out/rnu for out/run) costs one bounded lookup, and its error names the directory."""
    if name.startswith(("./", "../", "/", "~")) or "\\" in name:
        return False
    return _HUB_ID.fullmatch(name) is not None


HUB_TIMEOUT_S = 3.0  # how long the one lookup of a name on the Hub may take before it counts as unreachable


HUB_OPTIONS = ("revision", "cache_dir", "token")  # transformers' download keywords that litebert passes on


def hub_options(name_or_path: str, **given: Any) -> dict[str, Any]:
    """The download keywords given (HUB_OPTIONS, None left out), refused for a local path: transformers ignores
    a revision there without a word, and the user would believe they had loaded it."""
    options = {k: v for k, v in given.items() if v is not None}
    if options and os.path.exists(name_or_path):
        raise ConfigError(f"{next(iter(options))}= chooses what to download from the Hub; {name_or_path} is a "
                          "local path, loaded as it is")
    return options


def fetch_from_hub(repo_id: str, fetch, local_files_only: bool = False, options: dict[str, Any] | None = None
                   ) -> str:
    """fetch(huggingface_hub, local_files_only) -> a local path, for a name that is not a local path; otherwise
    one line saying that `repo_id` is neither here nor fetchable, within about HUB_TIMEOUT_S.

    The Hub client retries a failed request and warns on each try (about 24 s for a mistyped name), so the name
    is first looked up once, with a short timeout and no retries: a name the Hub does not have fails at once; a
    Hub that does not answer falls back to the local cache (as HF_HUB_OFFLINE=1 does, without asking); a name
    it has is downloaded (or its cached copy checked) by the client as usual. local_files_only (transformers'
    keyword) reads the cache alone, as HF_HUB_OFFLINE=1 does. `options` (hub_options' dict): its revision and
    token go to the lookup too (fetch takes them, and cache_dir, itself)."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError:
        raise FileNotFoundError(f"no such directory: {repo_id} (and huggingface_hub is not installed to fetch it "
                                "as a Hub id)") from None
    online = not (constants.HF_HUB_OFFLINE or local_files_only)
    why_offline = "local_files_only=True" if local_files_only else "HF_HUB_OFFLINE is set"
    asked = {k: v for k, v in (options or {}).items() if k != "cache_dir"}  # a lookup caches nothing
    missing = _hub_lookup(huggingface_hub, repo_id, asked) if online else why_offline
    if missing is None:
        try:
            return fetch(huggingface_hub, False)
        except Exception as e:
            raise FileNotFoundError(f"no such directory: {repo_id}, and fetching it from the Hub failed "
                                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if not missing.startswith("the Hub has no"):
        try:
            return fetch(huggingface_hub, True)  # a copy downloaded before
        except Exception as e:  # not cached (LocalEntryNotFoundError, a FileNotFoundError), or said as it is
            missing += (", and the Hugging Face cache holds no copy" if isinstance(e, FileNotFoundError) else
                        f", and its copy in the Hugging Face cache could not be read ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''})")
    namespace, _, rest = repo_id.partition("/")
    if rest and os.path.isdir(namespace):
        missing += f"; {namespace}/ is a directory here: a typo in a path below it?"
    raise FileNotFoundError(f"no such directory: {repo_id} ({missing})")


def _hub_lookup(huggingface_hub, repo_id: str, asked: dict[str, Any]) -> str | None:
    """None when the Hub has `repo_id` (at `asked`'s revision, with its token); else why not, in words. One
    request, waited for at most about HUB_TIMEOUT_S (a thread: a name lookup that hangs is not bounded by the
    request's own timeout)."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    answer: list[BaseException | None] = []

    def ask() -> None:
        try:
            huggingface_hub.HfApi().model_info(repo_id, timeout=HUB_TIMEOUT_S, **asked)
            answer.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below, in words
            answer.append(e)

    thread = threading.Thread(target=ask, name="litebert-hub-lookup", daemon=True)
    thread.start()
    thread.join(HUB_TIMEOUT_S + 0.5)
    if not answer:
        return f"the Hub did not answer within {HUB_TIMEOUT_S:g} s"
    error = answer[0]
    if error is None:
        return None
    if isinstance(error, RevisionNotFoundError):
        return f"the Hub has no revision {asked.get('revision')!r} of it"
    if isinstance(error, RepositoryNotFoundError) and not isinstance(error, GatedRepoError):
        return "the Hub has no model of that name either"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"the Hub could not be asked: {type(error).__name__}: {text}"


CARD_NAME = "README.md"
MARKER = "<!-- model card written by litebert -->"
PIPELINE_TAGS = {"AlbertModel": "feature-extraction", "AlbertForPreTraining": "fill-mask",
                 "AlbertForMaskedLM": "fill-mask", "AlbertForSequenceClassification": "text-classification",
                 "AlbertForTokenClassification": "token-classification",
                 "AlbertForQuestionAnswering": "question-answering"}  # the Hub has no multiple-choice pipeline


def model_card(architecture: str, config: dict[str, Any], parameters: int, base_model: str | None = None,
               license: str | None = None, metrics: dict[str, float] | None = None,
               summary: str | None = None) -> str:
    """The text of README.md. `config` is config.json's dict; `metrics` ({name: value}) and `summary` (a line
    on how it was trained) come from the run that saved it, when it says."""
    meta: list[str] = ["library_name: transformers", "tags:", "- albert", "- litebert"]
    if architecture in PIPELINE_TAGS:
        meta.append(f"pipeline_tag: {PIPELINE_TAGS[architecture]}")
    if license:
        meta.append(f"license: {license}")
    hub_base = base_model if base_model and looks_like_hub_id(base_model) and not os.path.exists(base_model) else None
    if hub_base:
        meta.append(f"base_model: {hub_base}")
    shape = (f"hidden size {config.get('hidden_size')}, {config.get('num_hidden_layers')} layers over "
             f"{config.get('num_hidden_groups')} parameter group(s), embeddings {config.get('embedding_size')}, "
             f"{config.get('num_attention_heads')} heads, {config.get('max_position_embeddings')} positions, "
             f"vocabulary {config.get('vocab_size')}")
    body = [MARKER, f"# {architecture}", "",
            f"An ALBERT model ({parameters / 1e6:.2f}M parameters; {shape}) saved by litebert. "
            "It loads in transformers as it is "
            f"(`transformers.{architecture}.from_pretrained(path)`) and in litebert "
            f"(`litebert.{architecture}.from_pretrained(path)`)."]
    labels = config.get("id2label")
    if labels and architecture in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
        body += ["", "Labels: " + ", ".join(f"{i} {name}" for i, name in sorted((int(k), v) for k, v in labels.items()))]
    if base_model:
        body += ["", f"Initialised from `{base_model}`."]
    if summary:
        body += ["", "## Training", "", summary]
    if metrics:
        body += ["", "## Results", "", "| metric | value |", "|---|---|"]
        body += [f"| {name} | {value:.4g} |" if isinstance(value, float) else f"| {name} | {value} |"
                 for name, value in metrics.items()]
    return "---\n" + "\n".join(meta) + "\n---\n" + "\n".join(body) + "\n"


def write_model_card(directory: str | os.PathLike, architecture: str, parameters: int, **card: Any) -> bool:
    """Write README.md into a model directory holding config.json, unless a README.md there is someone else's.
    Returns whether it wrote. `card`: model_card's base_model, license, metrics, summary."""
    path = Path(directory) / CARD_NAME
    if path.is_file() and MARKER not in path.read_text(encoding="utf-8", errors="replace"):
        return False
    config = read_json_object(Path(directory) / "config.json", CheckpointError)
    write_text_atomically(path, model_card(architecture, config, parameters, **card))
    return True
