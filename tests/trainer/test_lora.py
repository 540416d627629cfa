"""LoRA SFT: only the adapters train, the merged export gives the unmerged model's logits, and the
PEFT-format adapter loaded by `peft` on the base export gives them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evals.models import our_model
from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl
from trainer.export_hf import hf_name, model_config_from_hf
from trainer.lora import LoRASpec
from trainer.optim import OptimConfig
from trainer.sft import SFTConfig, main, sft


def _ours(folder: Path) -> torch.nn.Module:
    cfg = model_config_from_hf(json.loads((folder / "config.json").read_text()))
    return our_model(cfg, load_file(str(folder / "model.safetensors")))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, LoRASpec]:
    root = tmp_path_factory.mktemp("lora")
    base = tiny_base(root / "base", chat_tokenizer_dir(root / "tok"))
    data = write_jsonl(root / "train.jsonl", arithmetic_records(48))
    targets = "q_proj,wk,wv,wo,w1,w2,w3"
    optim = OptimConfig(lr=1e-2, weight_decay=0.0, warmup_steps=1)
    cfg = SFTConfig(base, data, root / "sft", micro_batch=4, seq_len=127, bf16=False, device="cpu", lora_rank=4,
                    lora_alpha=8.0, lora_targets=targets, optim=optim)  # fmt: skip
    result = sft(cfg)
    assert result.losses[-1][1] < result.losses[0][1]
    return base, root / "sft", LoRASpec.parse(4, 8.0, targets)


def test_only_adapters_change_and_merged_equals_unmerged(tuned: tuple[Path, Path, LoRASpec]) -> None:
    base, out, spec = tuned
    ids = torch.tensor([list(range(3, 60))])
    unmerged = _ours(base)
    spec.apply(unmerged)
    adapters = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert len(adapters) == 2 * 7 * 2  # A and B, 7 layers a block, 2 blocks
    for name, module in unmerged.named_modules():
        if hasattr(module, "lora_A"):
            prefix = "base_model.model." + hf_name(f"{name}.weight").removesuffix(".weight")
            module.lora_A.data = adapters[f"{prefix}.lora_A.weight"]
            module.lora_B.data = adapters[f"{prefix}.lora_B.weight"]
            assert module.lora_B.abs().max() > 0  # trained
    merged = _ours(out / "hf")
    with torch.no_grad():
        a, b, plain = unmerged(ids), merged(ids), _ours(base)(ids)
    assert (a - b).abs().max() < 1e-5
    assert (a - plain).abs().max() > 1e-3  # the adapters moved the model
    base_w, merged_w = load_file(str(base / "model.safetensors")), load_file(str(out / "hf" / "model.safetensors"))
    assert torch.equal(base_w["model.embed_tokens.weight"], merged_w["model.embed_tokens.weight"])  # frozen


def test_peft_loads_the_adapter_on_the_base_export(tuned: tuple[Path, Path, LoRASpec]) -> None:
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    base, out, _ = tuned
    ids = torch.tensor([list(range(3, 60))])
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with_adapter = peft.PeftModel.from_pretrained(model, out / "adapter").eval()
    merged = transformers.AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        diff = (with_adapter(ids).logits - merged(ids).logits).abs().max()
    assert diff < 1e-5


def test_bad_lora_settings_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", arithmetic_records(2))
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", str(tmp_path), "--data", str(data), "--out", str(tmp_path / "o"), "--lora-rank", "4",
              "--lora-targets", "wq,embed"])  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--lora-targets" in err
