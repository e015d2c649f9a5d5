"""Batched, seeded response generation with the model's chat template."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import torch
import transformers
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

from squarechipo.models.embedded import resolve_model_path
from squarechipo.models.runtime import torch_dtype

__all__ = [
    "MIXTURE_FILE",
    "SAMPLING_DEFAULTS",
    "ExponentialRaceSampler",
    "exact_warpers",
    "generate_responses",
    "generate_with_model",
    "mixture_members",
]

#: Written by the self-play recipe: {"members": [paths], ...}; members relative to the folder or absolute.
MIXTURE_FILE = "mixture.json"


def generate_responses(model_name_or_path: str, prompts: list, *, device: str | None = None, **settings) -> list[str]:
    """One response per prompt (string or list of messages) from a model folder, hub id or ``embedded``.

    ``settings`` are the keyword arguments of :func:`generate_with_model` (``max_new_tokens``, ``batch_size``,
    ``do_sample``, ``temperature``, ``top_p``, ``seed``, ``desc``) and ``dtype``, the weights' dtype by name
    (default: the checkpoint's). A folder holding a self-play ``mixture.json``
    (iterative Square-χPO, Zhou et al. 2025 (Square-χPO), Alg. 3) is a uniform mixture of policies: each prompt is
    answered by an iterate drawn uniformly, seeded by ``seed``.
    """
    seed, desc = settings.get("seed", 0), settings.get("desc", "generating")
    members = mixture_members(model_name_or_path)
    if members is not None:
        draw = np.random.default_rng([seed, len(members)]).integers(len(members), size=len(prompts))
        outputs: list[str] = [""] * len(prompts)
        for k, member in enumerate(members):
            chosen = np.flatnonzero(draw == k)
            if chosen.size:
                answers = generate_responses(
                    member,
                    [prompts[i] for i in chosen],
                    device=device,
                    **{**settings, "desc": f"{desc} (iterate {k + 1}/{len(members)})"},
                )
                for i, answer in zip(chosen, answers):
                    outputs[i] = answer
        return outputs
    path = resolve_model_path(model_name_or_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path)
    settings = dict(settings)
    dtype = torch_dtype(settings.pop("dtype", None))  # None: the checkpoint's, as from_pretrained's default
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    return generate_with_model(model, tokenizer, prompts, **settings)


def mixture_members(model_name_or_path) -> list[str] | None:
    """The member paths of a saved policy mixture (``mixture.json``), or None for a single model."""
    folder = Path(str(model_name_or_path))
    record = folder / MIXTURE_FILE
    if not record.is_file():
        return None
    members = json.loads(record.read_text(encoding="utf-8"))["members"]
    return [
        m if m == "embedded" or Path(m).is_absolute() or not (folder / m).exists() else str(folder / m)
        for m in members
    ]


class ExponentialRaceSampler(LogitsProcessor):
    """Draws each row's next token from softmax(scores) and returns scores that are 0 at the drawn token and −inf
    elsewhere, so that greedy decoding emits it.

    The draw is a race of exponential clocks: token j arrives at E_j / p_j with E_j ~ Exp(1) independent, and the
    first arrival (argmax p_j / E_j) is token j with probability p_j. This is ``torch.multinomial``'s own algorithm,
    so two policies given the same clocks draw the same token wherever their distributions agree: the coupling that
    makes a policy's samples and the SFT policy's common random numbers (inverse-CDF sampling keeps almost none of it
    over a 49k-token vocabulary). On CPU each row of a batch has a stream of its own (``numpy.random.Generator``
    seeded ``[seed, row]``: numpy's ziggurat sampler, several times faster than torch's, which draws one clock at a
    time), so a row's clocks do not depend on the other rows and a row that has ended draws none; on an accelerator
    the batch's clocks come from one ``torch.Generator`` on that device and each row keeps its own. Neither touches
    the global random state.
    """

    def __init__(self, seed: int, device: torch.device | str = "cpu"):
        self.device, self.seed = torch.device(device), seed
        if self.device.type == "cpu":
            self.streams: list[np.random.Generator] = []
        else:
            self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def clocks(self, rows: list[int], batch: int, vocabulary: int) -> torch.Tensor:
        """Exp(1) draws for ``rows`` of a batch of ``batch``, float32 (never 0: a token of probability 0 is never
        drawn)."""
        if self.device.type != "cpu":
            clocks = torch.empty((batch, vocabulary), device=self.device).exponential_(generator=self.generator)
            clocks = clocks[torch.as_tensor(rows, device=self.device)]
        else:
            while len(self.streams) < batch:
                self.streams.append(np.random.default_rng([self.seed, len(self.streams)]))
            # Drawn in float64: float32's ziggurat returns 0 about once in 2^24 draws, a clock that lets any token of
            # the 49k win (a token in about one answer in three); a float64 draw below float32's least value is
            # as rare as a probability of 1e-38.
            drawn = np.empty((len(rows), vocabulary))
            for out, row in zip(drawn, rows):
                self.streams[row].standard_exponential(out=out)
            clocks = torch.from_numpy(drawn).float()
        return clocks.clamp_(min=torch.finfo(torch.float32).tiny)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        drawn = self.draw(scores)[:, None]
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn, 0.0)

    def draw(self, scores: torch.Tensor, rows: torch.Tensor | None = None, batch: int | None = None) -> torch.Tensor:
        """The drawn token of each row of ``scores``. ``rows``: which rows of a batch of ``batch`` these are (a batch
        whose finished rows were dropped); each row draws from its own clocks."""
        listed = list(range(scores.shape[0])) if rows is None else rows.tolist()
        probs = torch.softmax(scores.float(), dim=-1)
        clocks = self.clocks(listed, batch or scores.shape[0], scores.shape[1]).to(probs.device)
        return torch.argmax(probs / clocks, dim=-1)


#: ``do_sample``'s temperature and top-p where the caller gives none.
SAMPLING_DEFAULTS = {"temperature": 0.7, "top_p": 0.95}


def exact_warpers(*, temperature: float | None, top_k: int | None, top_p: float | None) -> list[LogitsProcessor]:
    """transformers' own warpers for what the caller asked of an exact draw, in the order ``generate`` applies them
    when sampling (temperature, then top-k, then top-p), after the processors a generation config adds (a repetition
    penalty) and before the race. None, a temperature of 1, top-k 0 and top-p 1 leave the distribution as it is."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature={temperature}: give a temperature above 0, or None for the model's own (1).")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p}: give a share in (0, 1], or None for the whole vocabulary.")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k={top_k}: give a count of tokens (0 or None: the whole vocabulary).")
    warpers: list[LogitsProcessor] = []
    if temperature is not None and temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def _sampling(seed: int, device, *, exact: bool, do_sample: bool, temperature, top_p, top_k) -> dict:
    """``generate``'s sampling arguments for one batch, seeded ``seed``: the exponential race (after the warpers asked
    for, :func:`exact_warpers`) as logits processors under greedy decoding, or transformers' own sampling (seeded
    through the global state, which ``generate`` reads)."""
    if exact:
        race = ExponentialRaceSampler(seed, device)
        chain = [*exact_warpers(temperature=temperature, top_k=top_k, top_p=top_p), race]
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None,
                "logits_processor": LogitsProcessorList(chain)}  # fmt: skip
    transformers.set_seed(seed)
    if not do_sample:  # None overrides a checkpoint's sampling settings, which greedy decoding would warn about
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    temperature = SAMPLING_DEFAULTS["temperature"] if temperature is None else temperature
    top_p = SAMPLING_DEFAULTS["top_p"] if top_p is None else top_p
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k}


def generate_with_model(
    model,
    tokenizer,
    prompts: list,
    *,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    do_sample: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int = 0,
    exact_sampling: bool = False,
    desc: str = "generating",
) -> list[str]:
    """One response per prompt from a loaded model, chat template applied, left-padded batches.

    Sampling is seeded per batch with ``transformers.set_seed(seed + batch_index)``; ``temperature`` and ``top_p``
    default to :data:`SAMPLING_DEFAULTS`, ``top_k=0`` is the whole vocabulary, None the model's generation config.
    ``exact_sampling``, in place of ``do_sample``: :class:`ExponentialRaceSampler` seeded ``seed + batch_index`` on
    the model's distribution warped by the ``temperature``, ``top_k`` and ``top_p`` given (none: temperature 1, the
    whole vocabulary). The tokenizer's padding side is restored afterwards."""
    if exact_sampling and do_sample:
        raise ValueError(
            "generate_with_model: exact_sampling draws with the exponential race (coupled samples) in place of "
            "do_sample; pass one of them."
        )
    sampling = partial(
        _sampling, exact=exact_sampling, do_sample=do_sample, temperature=temperature, top_p=top_p, top_k=top_k
    )
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    conversations = [[{"role": "user", "content": p}] if isinstance(p, str) else list(p) for p in prompts]
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    outputs: list[str] = []
    batches = range(0, len(texts), batch_size)
    # Progress in token steps, not batches: a batch of 64 prompts can take minutes on a CPU, and a bar per batch
    # stood at 0% (no estimate) for all of the first one.
    progress = tqdm(total=len(batches) * max_new_tokens, desc=f"{desc} ({len(batches)} batches)", unit="token")
    try:
        for index, start in enumerate(batches):
            batch = tokenizer(
                texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(device)
            settings = {**sampling(seed + index, device), "max_new_tokens": max_new_tokens}
            outputs.extend(_generate_batch(model, tokenizer, batch, settings, progress))
    finally:
        progress.close()
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return outputs


def _generate_batch(model, tokenizer, batch, settings: dict, progress: tqdm) -> list[str]:
    """One batch's responses; each token step advances ``progress``, and a batch that ended early its remaining
    steps. Greedy and exact draws run :func:`_decode` (finished rows leave the batch) where the model's generation
    config adds nothing to them; anything else runs ``generate``."""
    if not settings["do_sample"] and _plain_generation_config(model):
        with torch.no_grad():
            new_tokens = _decode(model, batch, settings, tokenizer.pad_token_id, progress)
    else:
        steps = _Steps(progress)
        with torch.no_grad():
            generated = model.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id, streamer=steps)
        progress.update(settings["max_new_tokens"] - steps.steps)
        new_tokens = generated[:, batch["input_ids"].shape[1] :]
    return [t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]


#: Generation-config fields that make ``generate`` add a logits processor, a stopping rule or a search of its own
#: when they differ from their defaults; :func:`_decode` applies none of them, so such a model goes to ``generate``.
_GENERATE_ONLY = (
    "repetition_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "min_length",
    "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "suppress_tokens", "begin_suppress_tokens",
    "sequence_bias", "exponential_decay_length_penalty", "renormalize_logits", "guidance_scale", "epsilon_cutoff",
    "eta_cutoff", "typical_p", "min_p", "stop_strings", "num_beams", "num_return_sequences", "max_time",
    "watermarking_config", "assistant_model", "prompt_lookup_num_tokens",
)  # fmt: skip


def _plain_generation_config(model) -> bool:
    """Whether the model's generation config asks ``generate`` for nothing beyond the processors passed to it."""
    config, default = model.generation_config, transformers.GenerationConfig()
    return not model.config.is_encoder_decoder and all(
        getattr(config, name, None) in (None, getattr(default, name, None)) for name in _GENERATE_ONLY
    )


def _eos_ids(model, device) -> torch.Tensor:
    eos = model.generation_config.eos_token_id
    return torch.tensor([] if eos is None else [eos] if isinstance(eos, int) else list(eos), device=device)


def _decode(model, batch, settings: dict, pad_token_id: int, progress: tqdm) -> torch.Tensor:
    """``generate``'s greedy decoding (or an exact draw: the race closes ``settings["logits_processor"]``) over a
    left-padded batch, with a KV cache from which each row is dropped once it has emitted an end-of-sequence token:
    the steps after most answers ended no longer run the whole batch. The same positions, masks and processors as
    ``generate`` (a row's tokens do not depend on the others); the new tokens, padded after each row's end."""
    from transformers import DynamicCache

    ids, mask = batch["input_ids"], batch["attention_mask"]
    n, device = ids.shape[0], ids.device
    chain = list(settings.get("logits_processor") or [])
    race = chain.pop() if chain and isinstance(chain[-1], ExponentialRaceSampler) else None
    eos = _eos_ids(model, device)
    out = torch.full((n, settings["max_new_tokens"]), pad_token_id, dtype=ids.dtype, device=device)
    rows = torch.arange(n, device=device)  # the batch row of each running row
    position = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    # transformers renamed ``past_key_values`` to ``cache`` (5.2x; the old name warns until 5.40).
    cache = {_cache_argument(model): DynamicCache(config=model.config)}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True, logits_to_keep=1,
                   **cache).logits[:, -1]  # fmt: skip
    seen, position = ids, position[:, -1:]
    for step in range(settings["max_new_tokens"]):
        scores = logits.float()
        for processor in chain:
            scores = processor(seen, scores)
        token = race.draw(scores, rows, n) if race is not None else scores.argmax(-1)
        out[rows, step] = token
        progress.update(1)
        running = ~torch.isin(token, eos)
        if step + 1 == settings["max_new_tokens"] or not running.any():
            progress.update(settings["max_new_tokens"] - step - 1)
            break
        if not running.all():
            keep = running.nonzero().squeeze(1)
            next(iter(cache.values())).batch_select_indices(keep)
            rows, token, mask, seen, position = rows[keep], token[keep], mask[keep], seen[keep], position[keep]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        seen, position = torch.cat([seen, token[:, None]], dim=1), position + 1
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, use_cache=True,
                       **cache).logits[:, -1]  # fmt: skip
    return out


def _cache_argument(model) -> str:
    """The name the model's forward takes its KV cache by: ``cache`` in newer transformers, ``past_key_values``
    before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class _Steps(BaseStreamer):
    """Counts ``generate``'s token steps into a progress bar (the first call is the prompt, not a step)."""

    def __init__(self, progress: tqdm) -> None:
        self.progress, self.steps, self._prompt_seen = progress, 0, False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.steps += 1
        self.progress.update(1)

    def end(self) -> None:
        pass
