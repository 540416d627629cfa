"""Generation: the KV cache gives the full forward's logits, greedy equals transformers' generate on the
fine-tuned export (chat template in, tokens out), GSM8K answers are scored exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evals import run as evals_run
from evals.generate import Generator, KVCache, Sampling, forward_cached, generate_ids, load_transformer, main
from evals.gsm8k import final_answer, is_formatted, read_problems, score
from evals.tasks import TaskDataError, load_tasks
from tests.support.sft_inputs import arithmetic_records, chat_tokenizer_dir, tiny_base, write_jsonl
from trainer.optim import OptimConfig
from trainer.sft import SFTConfig, sft


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny QK-norm base fine-tuned a few steps on arithmetic answers: its HF export."""
    root = tmp_path_factory.mktemp("gen")
    base = tiny_base(root / "base", chat_tokenizer_dir(root / "tok"), qk_norm=True)
    data = write_jsonl(root / "train.jsonl", arithmetic_records(48))
    cfg = SFTConfig(base, data, root / "sft", micro_batch=4, seq_len=127, bf16=False, device="cpu",
                    optim=OptimConfig(lr=1e-2, weight_decay=0.0, warmup_steps=1))  # fmt: skip
    return sft(cfg).hf_dir  # type: ignore[return-value]


def test_kv_cache_gives_the_full_forward_logits(tuned: Path) -> None:
    model, tok = load_transformer(tuned, "cpu")
    ids = torch.tensor([tok.encode("Tom has 3 apples and gets 4 more. How many?").ids])
    full = model(ids)
    cache = KVCache(len(model.layers))
    stepped = [forward_cached(model, ids[:, :5], cache)] + [forward_cached(model, ids[:, i : i + 1], cache)
                                                             for i in range(5, ids.shape[1])]  # fmt: skip
    assert (torch.cat(stepped, dim=1) - full).abs().max() < 1e-5


def test_greedy_equals_transformers_generate_with_the_chat_template(tuned: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tuned, dtype=torch.float32).eval()
    auto = transformers.AutoTokenizer.from_pretrained(str(tuned))
    gen = Generator(*load_transformer(tuned, "cpu"))
    for question in ("What is 7 plus 12?", "Tom has 30 apples and gets 9 more. How many apples does he have?"):
        text = auto.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                        add_generation_prompt=True)  # fmt: skip
        prompt = auto(text, return_tensors="pt")["input_ids"]
        assert prompt[0].tolist() == gen.prompt_ids(question, chat=True)
        theirs = hf.generate(prompt, max_new_tokens=40, do_sample=False)[0, prompt.shape[1] :].tolist()
        stop = {gen.eot, gen.chat_ids[2]}
        ours = generate_ids(gen.model, prompt[0].tolist(), 40, stop)
        assert ours == theirs and len(ours) > 3


def test_sampling_is_seeded_and_respects_top_k(tuned: Path) -> None:
    gen = Generator(*load_transformer(tuned, "cpu"))
    prompt = gen.prompt_ids("What is 7 plus 12?", chat=True)
    one = generate_ids(gen.model, prompt, 10, set(), Sampling(temperature=1.0, top_p=0.9, seed=3))
    assert one == generate_ids(gen.model, prompt, 10, set(), Sampling(temperature=1.0, top_p=0.9, seed=3))
    assert generate_ids(gen.model, prompt, 10, set(), Sampling(temperature=5.0, top_k=1)) == generate_ids(
        gen.model, prompt, 10, set()
    )


def test_gsm8k_scoring_and_cli(tuned: Path, tmp_path: Path, capsys) -> None:
    assert final_answer("so 3 + 4 = 7\n#### 1,234") == "1234" and final_answer("no answer") is None
    assert is_formatted("steps\n#### 72") and not is_formatted("#### 72 because")
    problems = read_problems(write_jsonl(tmp_path / "p.jsonl", arithmetic_records(4, seed=5)))
    golds = [p.gold for p in problems]
    result = score([f"x\n#### {golds[0]}", "x\n#### -1", "x", f"#### {golds[3]}.0"], problems)
    assert result == {"n": 4, "exact": 2, "accuracy": 0.5, "formatted": 3, "format_rate": 0.75}
    out = tmp_path / "g.json"
    assert main([str(tuned), "--chat", "--gsm8k", str(tmp_path / "p.jsonl"), "--limit", "2", "--device", "cpu",
                 "--max-new-tokens", "24", "--out", str(out)]) == 0  # fmt: skip
    assert '"n": 2' in out.read_text()


def test_chat_without_chat_tokens_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    plain = tiny_base(tmp_path / "base", chat_tokenizer_dir(tmp_path / "tok", chat=False))
    assert main([str(plain), "--chat", "--prompt", "hi", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chat tokens" in err


def test_gsm8k_as_an_evals_run_task_equals_evals_generate(tuned: Path, tmp_path: Path) -> None:
    """`evals.run --task gsm8k=FILE` is GSM8K's protocol (greedy, chat prompt on a chat model, exact final
    number) with the same answers and figures as `evals.generate --chat --gsm8k`."""
    problems = write_jsonl(tmp_path / "p.jsonl", arithmetic_records(3, seed=7))
    generated, judged = tmp_path / "gen.json", tmp_path / "run.json"
    common = ["--device", "cpu", "--max-new-tokens", "24", "--out"]
    assert main([str(tuned), "--chat", "--gsm8k", str(problems), *common, str(generated)]) == 0
    assert evals_run.main([str(tuned), "--task", f"gsm8k={problems}", "--no-progress", *common, str(judged)]) == 0
    ours, theirs = json.loads(judged.read_text())["tasks"]["gsm8k"], json.loads(generated.read_text())
    assert ours["prompt"] == "chat" and ours["n"] == 3
    assert {k: ours[k] for k in theirs["gsm8k"]} == theirs["gsm8k"]
    assert [g["text"] for g in ours["generations"]] == [g["text"] for g in theirs["generations"]]
    assert [g["gold"] for g in ours["generations"]] == [p.gold for p in read_problems(problems)]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--task", "gsm8k=/nonexistent.jsonl"], "does not exist"),
        (["--task", "gsm8k=BAD", "--backend", "hf"], "drop --backend hf"),
        (["--task", "gsm8k=BAD", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["--task", "gsm8k=BAD", "--gsm8k-prompt", "chat"], "chat tokens"),
    ],
)
def test_gsm8k_task_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, extra: list[str], needle: str) -> None:
    plain = tiny_base(tmp_path / "base", chat_tokenizer_dir(tmp_path / "tok", chat=False))
    data = write_jsonl(tmp_path / "p.jsonl", arithmetic_records(2))
    args = [str(plain), *[a.replace("BAD", str(data)) for a in extra], "--out", str(tmp_path / "o" / "r.json")]
    try:
        code = evals_run.main(args)
    except SystemExit as exit_:  # a flag out of its range is refused while argv is parsed
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:") and needle in err
    assert not (tmp_path / "o").exists()


def test_the_trainer_refuses_gsm8k_as_an_eval_task() -> None:
    with pytest.raises(TaskDataError, match="generative task"):
        load_tasks(["gsm8k=anything.jsonl"], "--eval-task")
