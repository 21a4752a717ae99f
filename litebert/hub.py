"""Where a name that is not a local path goes: the HuggingFace Hub, when it is installed and online.

One rule for tokenizers (tokenizer.Tokenizer.from_pretrained) and models (weights.resolve_model_dir), so
both fail the same way, in one line, when the name is neither here nor fetchable.
"""

from __future__ import annotations

import re

_HUB_ID = re.compile(r"(?!\.)[\w.-]+(/[\w.-]+)?")


def looks_like_hub_id(name: str) -> bool:
    """A Hub id is "name" or "namespace/name" (word characters, "-", "."). Anything else that does not exist here
    (./x, /abs/x, a/b/c, a name with spaces) was meant as a local path: a Hub error about it would only confuse."""
    return bool(_HUB_ID.fullmatch(name))


def fetch_from_hub(repo_id: str, fetch) -> str:
    """fetch(huggingface_hub) -> a local path, when huggingface_hub is installed and online; otherwise one
    line saying that `repo_id` is neither a local directory nor fetchable (offline, no such repo, no file)."""
    try:
        import huggingface_hub
    except ImportError:
        raise FileNotFoundError(f"no such directory: {repo_id} (and huggingface_hub is not installed to fetch it "
                                "as a Hub id)") from None
    try:
        return fetch(huggingface_hub)
    except Exception as e:
        raise FileNotFoundError(f"no such directory: {repo_id}, and fetching it from the Hub failed "
                                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
