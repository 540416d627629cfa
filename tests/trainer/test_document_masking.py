"""Document masking: a window holding two documents scores each as if it were alone."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.model import Transformer, document_layout

EOT = 0


def _token_losses(model: Transformer, tokens: torch.Tensor, **kw: int) -> torch.Tensor:
    logits = model(tokens[:, :-1], **kw)
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")


def test_two_documents_in_a_window_score_as_alone() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=50, max_seq_len=64)
    model = Transformer(cfg).eval()
    g = torch.Generator().manual_seed(1)
    first = torch.cat([torch.randint(1, 50, (20,), generator=g), torch.tensor([EOT])])
    second = torch.randint(1, 50, (17,), generator=g)
    window = torch.cat([first, second])[None]
    with torch.no_grad():
        joint = _token_losses(model, window, document_eot=EOT)
        alone_first = _token_losses(model, first[None])
        alone_second = _token_losses(model, second[None])
        plain = _token_losses(model, window)
    n = len(first)
    # predictions inside the first document (its EOT included) and inside the second
    torch.testing.assert_close(joint[: n - 1], alone_first, atol=1e-5, rtol=0)
    torch.testing.assert_close(joint[n:], alone_second, atol=1e-5, rtol=0)
    assert (plain[n:] - alone_second).abs().max() > 1e-3  # without the mask the second document sees the first


def test_layout_masks_across_documents_and_restarts_positions() -> None:
    tokens = torch.tensor([[5, 6, EOT, 7, EOT, 8]])
    mask, positions = document_layout(tokens, EOT)
    assert positions.tolist() == [[0, 1, 2, 0, 1, 0]]
    assert mask.shape == (1, 1, 6, 6)
    assert mask[0, 0, 3].tolist() == [False, False, False, True, False, False]
    assert mask[0, 0, 2].tolist() == [True, True, True, False, False, False]


def test_masking_off_is_the_plain_causal_model() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64, vocab_size=20, max_seq_len=16)
    model = Transformer(cfg)
    tokens = torch.randint(1, 20, (2, 12))  # no EOT: one document per window
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, document_eot=EOT), model(tokens), atol=1e-6, rtol=1e-5)


def test_a_run_trains_with_document_masking(tmp_path: Path) -> None:
    from tests.support.trainer_inputs import synthetic_run_inputs
    from trainer.fsdp_train import TrainConfig, train

    shards, tok = synthetic_run_inputs(tmp_path, vocab=96, n_docs=60, seq_len=32)
    runs = []
    for masking in (False, True):
        kw = {"micro_batch": 4, "max_steps": 3, "log_every": 1, "export_hf": False, "verify_shards": False}
        cfg = TrainConfig(shards=shards, tokenizer=tok, out=tmp_path / str(masking), document_masking=masking, **kw)
        runs.append(train(cfg))
    assert all(r.steps_done == 3 for r in runs)
    assert runs[0].losses != runs[1].losses  # the windows hold several documents: the mask matters
