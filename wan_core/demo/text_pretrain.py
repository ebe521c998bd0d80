"""Grounding pretraining of the demo's umT5 encoder: token states that say which colour moves which way.

The real Wan DiT reads a pretrained umT5, whose token states already tie each word to its phrase. The demo's
encoder starts from a random initialisation, where every token mixes the whole caption about equally: in "a red
circle moving left and a blue square moving right" the state of "left" carries red and blue alike (a linear
probe reads either colour from it with the same accuracy), so the DiT's cross-attention, which sees the states
without their positions, cannot tell which object takes which direction. Two-object prompts then mostly fail
with both objects moving one way.

This stage gives the encoder that tie before the DiT sees it. A small reader asks, for each colour, "what shape
is the object of this colour and which way does it move (or is there none)?", by attending over the encoder's
states with one learned query per colour and no positions, which is the question the DiT's cross-attention must
answer at an object's pixels. Encoder and reader train together on the training captions (never the held-out
ones); the reader is then dropped and the encoder frozen for the DiT.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import data as D


@dataclass(frozen=True)
class GroundingConfig:
    """Optimizer steps, batch of captions, AdamW peak lr (warm-up, cosine) and the two-object share of batches."""

    steps: int = 1500
    batch: int = 64
    lr: float = 1e-3
    two_object_share: float = 0.5
    seed: int = 0
    train_encoder: bool = True  # False trains the reader alone: how much a random encoder's states tell it


class GroundingReader(nn.Module):
    """Per colour: one learned query attends over the token states (no positions, padding masked); two linear
    heads read the shape (or "absent") and the direction (or "absent") of that colour's object."""

    def __init__(self, dim: int, heads: int = 4):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(len(D.COLOURS), dim) / dim ** 0.5)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.shape = nn.Linear(dim, len(D.SHAPES) + 1)
        self.direction = nn.Linear(dim, len(D.DIRECTIONS) + 1)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # states [B, L, C], mask [B, L] (True: a token) -> logits [B, colours, shapes + 1], [B, colours, dirs + 1]
        q = self.queries.unsqueeze(0).expand(states.shape[0], -1, -1)
        read, _ = self.attn(q, states, states, key_padding_mask=~mask, need_weights=False)
        return self.shape(read), self.direction(read)


def grounding_targets(caption: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(shape class, direction class) per colour, ``[colours]`` each; 0 is "no object of this colour"."""
    shape = torch.zeros(len(D.COLOURS), dtype=torch.long)
    direction = torch.zeros(len(D.COLOURS), dtype=torch.long)
    colours, shapes, directions = list(D.COLOURS), list(D.SHAPES), list(D.DIRECTIONS)
    for c, s, d in D.parse_caption(caption):
        shape[colours.index(c)] = shapes.index(s) + 1
        direction[colours.index(c)] = directions.index(d) + 1
    return shape, direction


def training_captions() -> tuple[list[str], list[str]]:
    """(single-object, two-object) captions of the grammar, the held-out two-object prompts left out."""
    singles = [f"a {c} {s} moving {d}" for c in D.COLOURS for s in D.SHAPES for d in D.DIRECTIONS]
    held = set(D.HELD_OUT_TWO_OBJECT)
    pairs = [f"{a} and {b}" for a in singles for b in singles
             if a.split()[1] != b.split()[1] and f"{a} and {b}" not in held]
    return singles, pairs


def _batch(te, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = [te.tokenizer.token_ids(c, te.max_length) for c in captions]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), te.tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, :len(r)] = True
    targets = [grounding_targets(c) for c in captions]
    return ids, mask, torch.stack([t[0] for t in targets]), torch.stack([t[1] for t in targets])


def grounding_accuracy(te, reader: GroundingReader, captions: list[str]) -> float:
    """Share of captions whose every colour the reader answers right (shape and direction, or absent)."""
    ids, mask, shape, direction = _batch(te, captions)
    with torch.no_grad():
        states = te.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        ps, pd = reader(states, mask)
    right = (ps.argmax(-1) == shape) & (pd.argmax(-1) == direction)
    return float(right.all(1).float().mean())


def pretrain_grounding(te, cfg: GroundingConfig = GroundingConfig(), progress=None) -> dict:
    """Train ``te.model`` (a :class:`~wan_core.text.encoder.TextEncoder`'s umT5, in place) with a fresh reader.

    ``progress(step, total, loss)`` is called after each step. Returns the final loss and the reader's accuracy
    on the training captions and on the held-out two-object prompts (never trained on)."""
    singles, pairs = training_captions()
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    reader = GroundingReader(te.config.d_model)
    model = te.model
    model.train(cfg.train_encoder)
    model.requires_grad_(cfg.train_encoder)
    params = (list(model.parameters()) if cfg.train_encoder else []) + list(reader.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    warmup = max(1, cfg.steps // 20)
    loss = torch.zeros(())
    for step in range(cfg.steps):
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + torch.cos(torch.tensor(step / cfg.steps * torch.pi)))
        for g in opt.param_groups:
            g["lr"] = cfg.lr * float(scale)
        captions = [rng.choice(pairs) if rng.random() < cfg.two_object_share else rng.choice(singles)
                    for _ in range(cfg.batch)]
        ids, mask, shape, direction = _batch(te, captions)
        states = model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        ps, pd = reader(states, mask)
        loss = F.cross_entropy(ps.flatten(0, 1), shape.flatten()) + F.cross_entropy(pd.flatten(0, 1),
                                                                                     direction.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if progress is not None:
            progress(step + 1, cfg.steps, float(loss.detach()))
    model.eval()
    model.requires_grad_(False)
    reader.eval()
    return {"steps": cfg.steps, "final_loss": float(loss.detach()),
            "accuracy_train_pairs": grounding_accuracy(te, reader, pairs),
            "accuracy_train_singles": grounding_accuracy(te, reader, singles),
            "accuracy_held_out_pairs": grounding_accuracy(te, reader, list(D.HELD_OUT_TWO_OBJECT))}
