"""Bodies of the parallel parity tests, run on every rank of a spawned gloo group (wan_core.parallel.launch).

Each function returns ``{name: max abs error}`` against the single-process result, which every rank computes
itself from the same seeded inputs (the reference is plain SDPA / skiparse / the unmodified DiT)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from wan_core.attention.skiparse import skiparse_attention
from wan_core.config import DiTConfig
from wan_core.parallel import ParallelConfig, build_groups, context_parallel, usp_attention
from wan_core.parallel.groups import padded_length

ATTN_LAYOUTS = {"ulysses2": ParallelConfig(ulysses=2), "ring2": ParallelConfig(ring=2),
                "usp2x2": ParallelConfig(ulysses=2, ring=2)}
DIT_LAYOUTS = {**ATTN_LAYOUTS, "cfg2": ParallelConfig(cfg=2), "cfg2_ulysses2": ParallelConfig(ulysses=2, cfg=2)}
CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=4, num_layers=2, text_dim=32, name="tiny-parallel")


def _chunk(x: torch.Tensor, lp: int, sp: int, index: int) -> torch.Tensor:
    c = lp // sp
    return F.pad(x, (0, 0, 0, lp - x.shape[2]))[:, :, index * c:(index + 1) * c].contiguous()


def attention(rank: int, world: int, names: tuple[str, ...] = tuple(ATTN_LAYOUTS)) -> dict[str, float]:
    errors: dict[str, float] = {}
    for name in names:
        pc = ATTN_LAYOUTS[name]
        g = build_groups(pc)
        for dtype in (torch.float64, torch.float32):
            for length in (16, 13):
                for sparse in (None, (2, "single"), (2, "group")):
                    gen = torch.Generator().manual_seed(length)
                    q, k, v = (torch.randn(2, 4, length, 8, generator=gen, dtype=torch.float64).to(dtype)
                               for _ in range(3))
                    if sparse is None:
                        ref = F.scaled_dot_product_attention(q, k, v)
                    else:
                        ref = skiparse_attention(q, k, v, sparse[0], sparse[1])
                    mult = pc.sp * (sparse[0] ** 2 if sparse and pc.ring > 1 else 1)
                    lp = padded_length(length, mult)
                    local = [_chunk(t, lp, pc.sp, g.sp_rank) for t in (q, k, v)]
                    out = usp_attention(*local, length=length, ulysses_group=g.ulysses_group,
                                        ring_group=g.ring_group, sparse=sparse)
                    want = _chunk(ref, lp, pc.sp, g.sp_rank)
                    c = lp // pc.sp
                    real = max(0, min(c, length - g.sp_rank * c))
                    err = (out[:, :, :real].double() - want[:, :, :real].double()).abs().max().item() if real else 0.0
                    tag = "" if sparse is None else f"_skiparse{sparse[1]}"
                    errors[f"{name}_{str(dtype)[6:]}_L{length}{tag}"] = err
        if pc.ring > 1:  # control: the same ring without excluding the padded keys must be visibly wrong
            gen = torch.Generator().manual_seed(13)
            q, k, v = (torch.randn(2, 4, 13, 8, generator=gen, dtype=torch.float64) for _ in range(3))
            lp = padded_length(13, pc.sp)
            local = [_chunk(t, lp, pc.sp, g.sp_rank) for t in (q, k, v)]
            out = usp_attention(*local, length=lp, ulysses_group=g.ulysses_group, ring_group=g.ring_group)
            want = _chunk(F.scaled_dot_product_attention(q, k, v), lp, pc.sp, g.sp_rank)
            real = max(0, min(lp // pc.sp, 13 - g.sp_rank * (lp // pc.sp)))
            errors[f"control_{name}_padding_not_masked"] = (out[:, :, :real] - want[:, :, :real]).abs().max().item()
    return errors


def tiny_dit(cfg: DiTConfig = CFG):
    from wan_core.dit.model import WanDiT

    torch.manual_seed(0)
    model = WanDiT(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (p[0].numel() ** -0.5 if p.dim() > 1 else 0.2))
    return model


def dit_inputs(batch: int):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(batch, 16, 5, 2, 6, generator=g)  # patch grid (5, 1, 3): 15 tokens, divisible by neither 2 nor 4
    t = torch.tensor([900.0, 300.0][:batch])
    ctx = [torch.randn(7 - i, CFG.text_dim, generator=g) for i in range(batch)]
    return x, t, ctx


def dit(rank: int, world: int, names: tuple[str, ...] = tuple(DIT_LAYOUTS)) -> dict[str, float]:
    model = tiny_dit()
    errors = {}
    with torch.no_grad():
        for name in names:
            par = context_parallel(model, build_groups(DIT_LAYOUTS[name]))
            x, t, ctx = dit_inputs(2)
            errors[f"dit_{name}"] = (par(x, t, ctx) - model(x, t, ctx)).abs().max().item()
            if name in ("ring2", "usp2x2"):  # skiparse (k 2, single then group) inside the parallel DiT
                from wan_core.attention.dispatch import AttentionDispatch
                from wan_core.attention.skiparse import SkiparseSchedule

                model.attention = AttentionDispatch(skiparse=SkiparseSchedule.custom([2, 2]))
                par = context_parallel(model, build_groups(DIT_LAYOUTS[name]))
                errors[f"dit_{name}_skiparse"] = (par(x, t, ctx) - model(x, t, ctx)).abs().max().item()
                model.attention = AttentionDispatch()
    return errors


def vace_dit(rank: int, world: int, names: tuple[str, ...] = ("ulysses2", "ring2", "cfg2")) -> dict[str, float]:
    """A VACE DiT (docs/vace.md section 1.3): the VACE tokens sharded like the hidden states, two VACE inputs."""
    model = tiny_dit(CFG.replace(num_layers=4, vace_layers=(0, 2), vace_in_dim=96, name="tiny-parallel-vace"))
    x, t, ctx = dit_inputs(2)
    g = torch.Generator().manual_seed(3)
    vace = [(torch.randn(2, 96, *x.shape[2:], generator=g), s) for s in (0.7, -0.5)]
    errors = {}
    with torch.no_grad():
        want = model(x, t, ctx, vace_context=vace)
        for name in names:
            par = context_parallel(model, build_groups(DIT_LAYOUTS[name]))
            errors[f"vace_{name}"] = (par(x, t, ctx, vace_context=vace) - want).abs().max().item()
    return errors


def sampling(rank: int, world: int, names: tuple[str, ...] = ("usp2x2", "cfg2_ulysses2")) -> dict[str, float]:
    from wan_core.pipeline import GenerationConfig, WanPipeline

    model = tiny_dit()
    x, t, ctx = dit_inputs(2)
    cfg = GenerationConfig(width=48, height=32, frames=9, steps=3, guidance=5.0, seed=3)
    with torch.inference_mode():
        ref = WanPipeline(dit=model).sample_latents([ctx[0]], [ctx[1]], cfg)
        errors = {}
        for name in names:
            par = context_parallel(model, build_groups(DIT_LAYOUTS[name]))
            out = WanPipeline(dit=par).sample_latents([ctx[0]], [ctx[1]], cfg)
            errors[f"sampling_{name}"] = (out - ref).abs().max().item()
    return errors



def everything(rank: int, world: int, layouts: tuple[str, ...], sampled: tuple[str, ...],
               extra: tuple[str, ...] = ()) -> dict[str, float]:
    """Attention, DiT and sampling checks for the named layouts, plus the ``extra`` check functions of this file
    (e.g. "fsdp"), in one spawned group (process start-up dominates the time)."""
    out = attention(rank, world, tuple(n for n in layouts if n in ATTN_LAYOUTS))
    out.update(dit(rank, world, layouts))
    out.update(sampling(rank, world, sampled))
    for name in extra:
        out.update(globals()[name](rank, world))
    return out


def fsdp(rank: int, world: int) -> dict[str, float]:
    """FSDP-sharded DiT (alone, and under Ulysses over the same ranks) vs the unsharded model."""
    from wan_core.parallel.fsdp import local_parameter_bytes, shard_dit

    model = tiny_dit()
    x, t, ctx = dit_inputs(2)
    with torch.no_grad():
        ref = model(x, t, ctx)
        full = local_parameter_bytes(model.blocks)
        sharded = shard_dit(tiny_dit())
        out = {"fsdp": (sharded(x, t, ctx) - ref).abs().max().item(),
               "fsdp_block_bytes_ratio": local_parameter_bytes(sharded.blocks) / full}
        par = context_parallel(sharded, build_groups(ParallelConfig(ulysses=2)))
        out["fsdp_ulysses2"] = (par(x, t, ctx) - ref).abs().max().item()
    return out


def vae_decode(rank: int, world: int) -> dict[str, float]:
    """Distributed tiled decode vs the single-process tiled decode (same tiles) of a tiny random VAE."""
    from wan_core.demo import randomize_
    from wan_core.parallel.vae import distributed_decode
    from wan_core.vae.config import PRESETS
    from wan_core.vae.loader import load_vae
    from wan_core.vae.model import WanVAEModel

    torch.manual_seed(0)
    model = WanVAEModel(PRESETS["tiny"])
    randomize_(model)
    vae = load_vae(model.state_dict())
    z = torch.randn(1, 16, 2, 6, 6, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = vae.decode(z, tiling="on", tile=4, overlap=2)  # 2 x 2 tiles
        out = distributed_decode(vae, z, tile=4, overlap=2)
    if rank != 0:
        return {"vae_none_elsewhere": float(out is not None)}
    assert out is not None
    return {"vae_decode": (out - ref).abs().max().item(), "vae_none_elsewhere": 0.0}


def load_dying_dit(path: str, after: int = 4, **kwargs):
    """A loaded DiT whose block 1 ends its process (``os._exit(17)``) on its ``after``-th call: in the middle of a
    forward, after block 0's collectives, while rank 0 waits in the next one (pool failure test)."""
    import os

    import wan_core

    dit = wan_core.load_dit(path, **kwargs)
    block = dit.blocks[1]
    calls = [0]

    def pre_hook(module, args):
        calls[0] += 1
        if calls[0] >= after:
            os._exit(17)

    block.register_forward_pre_hook(pre_hook)
    return dit


WINDOW_LAYOUTS = {"windows2": (ParallelConfig(windows=2), None),
                  "windows2_ulysses2": (ParallelConfig(ulysses=2, windows=2), ParallelConfig(ulysses=2))}


def window_cases():
    """Context windows over 9 latent frames (33 real): static (3 windows), uniform with stride 2 (windows that
    slide and dilate, different counts per step), and static with a cache that reuses."""
    from wan_core.cache import CacheConfig
    from wan_core.sampling.context_windows import ContextWindows

    return {"static": (ContextWindows.from_frames(17, 8), "off"),
            "uniform": (ContextWindows.from_frames(13, 4, schedule="uniform", stride=2), "off"),
            "static_cache": (ContextWindows.from_frames(17, 8),
                             CacheConfig.preset("easycache", threshold=1.0, start=0.0, end=1.0))}


def windows(rank: int, world: int, names: tuple[str, ...] = ("windows2",)) -> dict[str, float]:
    """Context windows spread over the window ranks vs the same windows sampled one after another (by the plain
    model, or for a layout with Ulysses inside each window rank by one Ulysses replica): the latents, and each
    window's cache decisions on the rank that owns it."""
    from wan_core.pipeline import GenerationConfig, WanPipeline

    model = tiny_dit()
    _, _, ctx = dit_inputs(2)
    base = GenerationConfig(width=48, height=32, frames=33, steps=5, guidance=5.0, seed=3)
    out: dict[str, float] = {}
    with torch.inference_mode():
        for name in names:
            spread_config, replica_config = WINDOW_LAYOUTS[name]
            par = context_parallel(model, build_groups(spread_config))
            seq_model = model if replica_config is None else context_parallel(model, build_groups(replica_config))
            for case, (context, cache) in window_cases().items():
                cfg = base.replace(context=context)
                seq = WanPipeline(dit=seq_model)
                ref = seq.sample_latents([ctx[0]], [ctx[1]], cfg, cache=cache)
                pipe = WanPipeline(dit=par)
                got = pipe.sample_latents([ctx[0]], [ctx[1]], cfg, cache=cache)
                tag = f"windows_{name}_{case}"
                out[tag] = (got - ref).abs().max().item()
                mine, everyone = pipe.cache_report.reports, seq.cache_report.reports
                out[f"count_{tag}_rank{rank}"] = float(len(mine))
                out[f"count_{tag}_sequential"] = float(len(everyone))
                differ = [w for w in mine if w not in everyone or mine[w].status != everyone[w].status]
                out[f"count_{tag}_decisions_differ"] = float(len(differ))
                out[f"count_{tag}_reused"] = float(seq.cache_report.total - seq.cache_report.computed)
            if replica_config is None:  # control: the windows change the result (the check is not vacuous)
                plain = WanPipeline(dit=model).sample_latents([ctx[0]], [ctx[1]], base)
                out[f"control_{name}_windows_vs_plain"] = (plain - ref).abs().max().item()
            if replica_config is not None:  # and the single-process model, to the fp32 tolerance of Ulysses
                cfg = base.replace(context=window_cases()["static"][0])
                ref = WanPipeline(dit=model).sample_latents([ctx[0]], [ctx[1]], cfg)
                got = WanPipeline(dit=par).sample_latents([ctx[0]], [ctx[1]], cfg)
                out[f"sampling_{name}_vs_one_process"] = (got - ref).abs().max().item()
    return out


def fuse_orders(rank: int, world: int) -> dict[str, float]:
    """The two ways to combine windows across ranks on the same random velocities (7 windows of 5 frames over 13,
    pyramid weights): an all-gather fused in window order on every rank, and an all-reduce of each rank's weighted
    partial sums. Returns each one's largest difference from the sequential fuse (docs/parallel.md)."""
    import torch.distributed as dist

    from wan_core.sampling.context_windows import ContextWindows

    cw = ContextWindows(5, 2)
    frames = 13
    wins = cw.windows(frames)
    gen = torch.Generator().manual_seed(11)
    vs = [torch.randn(1, 16, len(w), 8, 8, generator=gen) for w in wins]

    def fuse(parts):
        total, weight = torch.zeros(1, 16, frames, 8, 8), torch.zeros(frames)
        for i, v in parts:
            wt = cw.weights(wins[i], frames)
            total.index_add_(2, torch.tensor(wins[i]), v * wt.view(1, 1, -1, 1, 1))
            weight.index_add_(0, torch.tensor(wins[i]), wt)
        return total, weight

    total, weight = fuse(list(enumerate(vs)))
    ref = total / weight.view(1, 1, -1, 1, 1)
    gathered = [torch.empty_like(torch.stack(vs)) for _ in range(world)]
    dist.all_gather(gathered, torch.stack(vs))  # every rank sends all: the order of the fuse is what matters
    total, weight = fuse([(i, gathered[i % world][i]) for i in range(len(wins))])
    out = {"fuse_allgather": (total / weight.view(1, 1, -1, 1, 1) - ref).abs().max().item()}
    total, weight = fuse([(i, vs[i]) for i in range(rank, len(wins), world)])
    dist.all_reduce(total)
    dist.all_reduce(weight)
    out["fuse_allreduce"] = (total / weight.view(1, 1, -1, 1, 1) - ref).abs().max().item()
    return out


def windows_and_fuses(rank: int, world: int, names: tuple[str, ...]) -> dict[str, float]:
    """:func:`windows` and :func:`fuse_orders` in one spawned group."""
    return {**windows(rank, world, names), **fuse_orders(rank, world)}
