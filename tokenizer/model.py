"""An untrained byte-level BPE tokenizer: the pieces that must match between training and use."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

EOT = "<|endoftext|>"


def new_bpe(pattern: str) -> Tokenizer:
    """Byte-level BPE with a regex split and no normalizer, so decode(encode(x)) == x for any text.

    No post-processor either: the document separator is added by the shard writer (see
    tokenizer/README.md), so `tokenizer(prompt)` in transformers or an eval harness adds nothing.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok
