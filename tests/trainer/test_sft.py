"""SFT: the response mask is exact (hand-masked gradient, packed = unpacked), the template agrees with
the encoder, runs resume exactly, and bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl
from trainer.export_hf import model_config_from_hf
from trainer.model import Transformer
from trainer.optim import OptimConfig
from trainer.sft import SFTConfig, main, response_nll, sft
from trainer.sft_data import ChatEncoder, conversation_of, encode_rows


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sft")
    return tiny_base(root / "base", chat_tokenizer_dir(root / "tok"))


def _model(base: Path) -> Transformer:
    from safetensors.torch import load_file

    from evals.models import our_model

    cfg = model_config_from_hf(json.loads((base / "config.json").read_text()))
    return our_model(cfg, load_file(str(base / "model.safetensors"))).train()


def _conversations(n: int, seed: int = 0) -> list:
    convs = [conversation_of(r, "test") for r in arithmetic_records(n, seed)]
    convs[1] = convs[1] + [{"role": "user", "content": "And 1 more?"}, {"role": "assistant", "content": "#### 1"}]
    return convs


def test_encoder_matches_chat_template_and_masks_only_responses(base: Path) -> None:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(base))
    encoder = ChatEncoder(Tokenizer.from_file(str(base / "tokenizer.json")))
    for conv in _conversations(4):
        ids, mask = encoder.encode(conv, eot=False)
        assert ids == encoder.tok.encode(auto.apply_chat_template(conv, tokenize=False)).ids
        answers = "".join(t["content"] + "<|end|>" for t in conv if t["role"] == "assistant")
        assert (
            encoder.tok.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=False) == answers
        )
        prompt = auto.apply_chat_template(conv[:1], tokenize=False, add_generation_prompt=True)
        assert encoder.prompt(conv[:1]) == encoder.tok.encode(prompt).ids
    assert "<<" not in _conversations(2)[0][1]["content"]  # calculator annotations removed


def _grads(model: Transformer) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_gradient_equals_hand_masked_gradient_and_packed_equals_unpacked(base: Path) -> None:
    model = _model(base)
    encoder = ChatEncoder(Tokenizer.from_file(str(base / "tokenizer.json")))
    convs = _conversations(5)
    eot = encoder.ids.eot

    def loss_of(rows) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        nll, n = response_nll(model, rows.tokens, rows.mask, eot)
        loss = nll / n
        loss.backward()
        return float(loss.detach()), _grads(model)

    packed = encode_rows(convs, encoder, seq_len=255, packed=True)
    unpacked = encode_rows(convs, encoder, seq_len=255, packed=False)
    assert len(packed) == 1 and len(unpacked) == 5
    loss_packed, grad_packed = loss_of(packed)
    loss_unpacked, grad_unpacked = loss_of(unpacked)

    # by hand: each conversation alone, plain causal attention, labels of every prompt token set to -100
    model.zero_grad()
    count = 0
    hand = torch.zeros(())
    for conv in convs:
        ids, labels = [], []
        for turn in conv:
            user = turn["role"] == "user"
            piece = [encoder.ids.user if user else encoder.ids.assistant]
            piece += encoder.tok.encode(turn["content"]).ids + [encoder.ids.end]
            ids += piece
            labels += [-100] * len(piece) if user else [-100] + piece[1:]
        tokens = torch.tensor([ids])
        logits = model(tokens[:, :-1])
        hand = hand + F.cross_entropy(logits[0].float(), torch.tensor(labels[1:]), ignore_index=-100, reduction="sum")
        count += sum(label != -100 for label in labels[1:])
    (hand / count).backward()
    total = float(hand / count)
    grad_hand = _grads(model)
    assert abs(loss_packed - total) < 1e-6 and abs(loss_unpacked - total) < 1e-6
    assert (grad_packed - grad_hand).abs().max() < 1e-6
    assert (grad_unpacked - grad_hand).abs().max() < 1e-6


def _cfg(base: Path, data: Path, out: Path, **kw) -> SFTConfig:
    optim = OptimConfig(lr=3e-3, weight_decay=0.0, warmup_steps=2)
    fields = dict(micro_batch=2, grad_accum=2, seq_len=127, bf16=False, log_every=1, val_holdout=8, eval_every=3,
                  export_hf=False, device="cpu")  # fmt: skip
    return SFTConfig(base, data, out, optim=optim, **{**fields, **kw})


@pytest.mark.e2e  # five short runs
def test_sft_trains_resumes_exactly_and_exports(base: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", arithmetic_records(72))
    straight = sft(_cfg(base, data, tmp_path / "straight", export_hf=True))
    n = straight.steps_done
    assert n >= 6 and straight.val_losses[0][0] == 0
    assert straight.val_losses[-1][1] < straight.val_losses[0][1]  # learns the answers' format
    cut = sft(_cfg(base, data, tmp_path / "cut", max_steps=3, checkpoint_every=3))
    assert cut.steps_done == 3
    resumed = sft(_cfg(base, data, tmp_path / "cut", resume=True))
    both = dict(cut.losses) | dict(resumed.losses)
    assert both == dict(straight.losses)  # bit-identical
    assert dict(resumed.val_losses)[n] == dict(straight.val_losses)[n]
    records = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in records if "loss" in r) == list(range(1, n + 1))
    generation = json.loads((straight.hf_dir / "generation_config.json").read_text())
    tok = Tokenizer.from_file(str(straight.hf_dir / "tokenizer.json"))
    assert generation["eos_token_id"] == [tok.token_to_id("<|end|>"), tok.token_to_id("<|endoftext|>")]
    assert "chat_template" in json.loads((straight.hf_dir / "tokenizer_config.json").read_text())
    # a DCP checkpoint and a trainer output folder are bases too
    for source, kind in ((cut.checkpoint, "checkpoint"), (tmp_path / "straight", "hf")):
        again = sft(_cfg(source, data, tmp_path / f"from-{kind}", max_steps=1, eval_every=0))
        assert again.steps_done == 1
        assert json.loads((tmp_path / f"from-{kind}" / "run_config.json").read_text())["init_from"]["kind"] == kind


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"messages": [{"role": "user", "content": "hi"}]}], "no assistant turn"),
        ([{"question": "hi"}], "no assistant turn"),
        (
            [{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]}],
            "roles out of order",
        ),
        ([{"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q"}]}], "roles out of order"),
    ],
)
def test_bad_conversations_are_one_line_exit_2(base: Path, tmp_path: Path, capsys, records, message) -> None:
    data = write_jsonl(tmp_path / "bad.jsonl", arithmetic_records(3) + records)
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", str(base), "--data", str(data), "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err and "bad.jsonl:4" in err
    assert not (tmp_path / "out").exists()


def test_tokenizer_without_chat_tokens_is_refused(tmp_path: Path, capsys) -> None:
    plain = tiny_base(tmp_path / "base", chat_tokenizer_dir(tmp_path / "tok", chat=False))
    data = write_jsonl(tmp_path / "train.jsonl", arithmetic_records(3))
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", str(plain), "--data", str(data), "--out", str(tmp_path / "out"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "lacks the chat tokens" in err
    assert not (tmp_path / "out").exists()
