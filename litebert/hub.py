"""Where a name that is not a local path goes: the HuggingFace Hub, when it is installed and online.

One rule for tokenizers (tokenizer.Tokenizer.from_pretrained) and models (weights.resolve_model_dir), so
both fail the same way, in one line, when the name is neither here nor fetchable.
"""

from __future__ import annotations

import os
import re

_HUB_ID = re.compile(r"(?!\.)[\w.-]+(/[\w.-]+)?")


def looks_like_hub_id(name: str) -> bool:
    """A Hub id is "name" or "namespace/name" (word characters, "-", "."). Anything else that does not exist here
    was meant as a local path, and a Hub attempt (retries, warnings, then an error about the Hub) would only
    confuse: ./x, ../x, /abs/x, ~/x, a/b/c, a name with spaces or a backslash, and a "namespace/name" whose
    namespace is a directory here (out/rnu for out/run: a typo below a directory that exists)."""
    if name.startswith(("./", "../", "/", "~")) or "\\" in name:
        return False
    if not _HUB_ID.fullmatch(name):
        return False
    namespace, _, rest = name.partition("/")
    return not (rest and os.path.exists(namespace))


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
