"""Local umT5 tokenizers: a SentencePiece model (``spiece.model`` or ComfyUI's embedded ``spiece_model``)
or a ``tokenizer.json``, producing Wan's token layout (docs/wan_spec.md section 4.1).

Content tokens are truncated to ``max_length - 1`` and EOS is appended, as transformers' T5 tokenizer
does with ``truncation=True, max_length=512``; batches are right-padded with the pad id and masked.
Nothing is ever downloaded.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

TOKENIZER_FILES = ("tokenizer.json", "spiece.model")


class TokenizerError(ValueError):
    """No usable tokenizer; the message says where one was looked for and how to pass one."""


class PromptTokenizer:
    """Base class: ``encode_text`` gives content ids (no specials); ``__call__`` builds padded batches."""

    kind = "base"

    def __init__(self, source: str, eos_id: int, pad_id: int, vocab_size: int):
        self.source = source
        self.eos_id = int(eos_id)
        self.pad_id = int(pad_id)
        self.vocab_size = int(vocab_size)

    def encode_text(self, text: str) -> list[int]:
        raise NotImplementedError

    def token_ids(self, text: str, max_length: int = 512) -> list[int]:
        """Ids of one (already cleaned) prompt: content truncated to ``max_length - 1``, then EOS."""
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        return self.encode_text(text)[: max_length - 1] + [self.eos_id]

    def __call__(self, texts: list[str], max_length: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
        """``texts`` -> (ids [B, L] int64, mask [B, L] int64) with L the longest prompt (<= max_length)."""
        rows = [self.token_ids(t, max_length) for t in texts]
        width = max((len(r) for r in rows), default=1)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        return ids, mask

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, vocab={self.vocab_size}, eos={self.eos_id})"


class SentencePieceTokenizer(PromptTokenizer):
    """A SentencePiece model (file or serialized bytes), used directly through ``sentencepiece``.

    Control pieces written literally in a prompt (``</s>``, ``<pad>``, ``<unk>``) become their ids, as in
    transformers' tokenizer, instead of being spelled out character by character.
    """

    kind = "sentencepiece"

    def __init__(self, model: bytes | str | os.PathLike, source: str | None = None, default_eos: int = 1,
                 default_pad: int = 0):
        try:
            import sentencepiece as spm
        except ImportError as e:  # pragma: no cover - a declared dependency
            raise TokenizerError("reading a SentencePiece tokenizer needs the 'sentencepiece' package "
                                 "(pip install sentencepiece)") from e
        if isinstance(model, (bytes, bytearray)):
            src = source or "<spiece_model bytes>"
            kwargs: dict[str, Any] = {"model_proto": bytes(model)}
        else:
            src = source or os.fspath(model)
            kwargs = {"model_file": os.fspath(model)}
        try:
            sp = spm.SentencePieceProcessor(**kwargs)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError with C++ messages
            raise TokenizerError(f"{src}: not a valid SentencePiece model ({str(e).strip()[:200]})") from e
        n = sp.get_piece_size()
        eos = sp.eos_id() if sp.eos_id() >= 0 else default_eos
        pad = sp.pad_id() if sp.pad_id() >= 0 else default_pad
        super().__init__(src, eos, pad, n)
        self._sp = sp
        specials = {sp.id_to_piece(i): i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)}
        specials = {p: i for p, i in specials.items() if p}
        self._specials = specials
        self._split = (re.compile("(" + "|".join(re.escape(p) for p in sorted(specials, key=len, reverse=True)) + ")")
                       if specials else None)

    def encode_text(self, text: str) -> list[int]:
        if self._split is None:
            return list(self._sp.encode(text))
        ids: list[int] = []
        for part in self._split.split(text):
            if not part:
                continue
            special = self._specials.get(part)
            ids.extend([special] if special is not None else self._sp.encode(part))
        return ids


class JsonTokenizer(PromptTokenizer):
    """A ``tokenizer.json`` (transformers' fast tokenizer format), used through the ``tokenizers`` package."""

    kind = "tokenizers"

    def __init__(self, path: str | os.PathLike, default_eos: int = 1, default_pad: int = 0):
        try:
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - installed with transformers
            raise TokenizerError(f"{path}: reading tokenizer.json needs the 'tokenizers' package") from e
        try:
            tok = Tokenizer.from_file(os.fspath(path))
        except Exception as e:
            raise TokenizerError(f"{path}: not a valid tokenizer.json ({str(e).strip()[:200]})") from e
        tok.no_truncation()
        tok.no_padding()
        eos = tok.token_to_id("</s>")
        pad = tok.token_to_id("<pad>")
        super().__init__(os.fspath(path), default_eos if eos is None else eos, default_pad if pad is None else pad,
                         tok.get_vocab_size(with_added_tokens=True))
        self._tok = tok

    def encode_text(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def load_tokenizer(spec, source: str | None = None) -> PromptTokenizer:
    """A tokenizer from ``spec``: a folder holding ``tokenizer.json`` or ``spiece.model`` (tokenizer.json
    preferred, as transformers' AutoTokenizer does), a ``tokenizer.json`` / ``*.model`` file, SentencePiece
    model bytes, a uint8 tensor of those bytes (ComfyUI's ``spiece_model``), or a PromptTokenizer.
    """
    if isinstance(spec, PromptTokenizer):
        return spec
    if isinstance(spec, torch.Tensor):
        return SentencePieceTokenizer(spec.detach().cpu().to(torch.uint8).numpy().tobytes(), source=source)
    if isinstance(spec, (bytes, bytearray)):
        return SentencePieceTokenizer(bytes(spec), source=source)
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"tokenizer must be a folder, a file path, SentencePiece bytes or None; "
                        f"got {type(spec).__name__}")
    path = Path(os.fspath(spec)).expanduser()
    if path.is_dir():
        found = tokenizer_file_in(path)
        if found is None:
            raise TokenizerError(f"{path}: this folder has no tokenizer.json or spiece.model; pass the folder "
                                 f"of the umT5 tokenizer (e.g. google/umt5-xxl)")
        path = found
    elif not path.exists():
        raise TokenizerError(f"{path}: no such tokenizer file or folder")
    if path.suffix.lower() == ".json":
        return JsonTokenizer(path)
    return SentencePieceTokenizer(path)


def tokenizer_file_in(folder: Path) -> Path | None:
    """``tokenizer.json`` or ``spiece.model`` inside ``folder`` (in that order), else None."""
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


__all__ = ["PromptTokenizer", "SentencePieceTokenizer", "JsonTokenizer", "TokenizerError", "load_tokenizer",
           "tokenizer_file_in", "TOKENIZER_FILES"]
