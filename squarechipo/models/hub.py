"""Whether the Hugging Face Hub can answer, and whether it need: one request, no retries, asked before anything is
released, so that an offline machine refuses a name it cannot load in seconds instead of retrying for a minute."""

from __future__ import annotations

import os

__all__ = ["hub_unreachable", "in_hub_cache"]


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the Hub cannot be reached (``HF_HUB_OFFLINE`` set, or one HEAD request to the endpoint failed), or None."""
    import httpx
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is on"
    endpoint = os.environ.get("HF_ENDPOINT", constants.ENDPOINT)
    try:
        httpx.head(endpoint, timeout=timeout, follow_redirects=True)
    except httpx.HTTPError as error:
        return f"the Hugging Face Hub at {endpoint} cannot be reached ({type(error).__name__})"
    return None


def in_hub_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether ``repo_id`` (at ``revision``) has a model's or an adapter's config in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = [
            try_to_load_from_cache(repo_id, name, revision=revision) for name in ("config.json", "adapter_config.json")
        ]
    except ValueError:  # not a valid repo id (HFValidationError): nothing of it can be cached
        return False
    return any(isinstance(f, str) for f in found)
