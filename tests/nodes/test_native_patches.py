"""The native-MODEL patches' cores without ComfyUI (nodes/native.py; docs/native_patches.md).

* The attention override, called the way ComfyUI's ``wrap_attn`` calls it (q/k/v ``[B, L, heads*d]``,
  ``transformer_options`` holding ``grid_sizes``/``block_index``/``total_blocks``), computes exactly
  ``wan_core``'s attention dispatch for the same q/k/v and grid.
* Skiparse through the override equals the DiT's own skiparse path on the same weights: our DiT with its
  attention routed through the override like a native Wan forward, against the DiT with a skiparse dispatch.
* The cache run driven like ComfyUI's wrappers: per-branch state keyed by ``cond_or_uncond`` (batched and
  unbatched CFG decide the same), EasyCache outputs, block-stack residual reuse, the CFG cache.
* The nodes: refuse non-Wan models in one line, never change the input MODEL, no-ops for sdpa/none/off.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from nodes import native
from nodes.native import NativeAttention, NativeCache, NativeCacheRun
from wan_core.attention import AttentionCall, AttentionDispatch, SkiparseSchedule
from wan_core.cache import CacheConfig, Calibration
from wan_core.dit.model import WanDiT

from ..attention.helpers import CFG, dit_inputs, random_dit_state


def native_sdpa(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False, skip_output_reshape=False,
                **kwargs):
    """ComfyUI's ``attention_pytorch`` for unmasked calls, written from its definition."""
    b = q.shape[0]
    if not skip_reshape:
        q, k, v = (t.view(b, -1, heads, t.shape[-1] // heads).transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out if skip_output_reshape else out.transpose(1, 2).reshape(b, -1, out.shape[1] * out.shape[-1])


def flat(x):  # [B, N, L, d] -> [B, L, N*d]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def qkv(b=2, heads=2, length=3 * 6 * 5, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, heads, length, d, generator=g) for _ in range(3))


GRID = (3, 6, 5)  # 90 tokens: not a multiple of 16, so osp13 k=4 pads


@pytest.mark.parametrize("backend", ["sdpa", "int8"])
@pytest.mark.parametrize("block", [0, 2, 3])
def test_override_equals_wan_core_attention(backend, block):
    q, k, v = qkv()
    layers = 6
    override = NativeAttention(backend, "osp13", k=4)
    to = {"grid_sizes": GRID, "block_index": block, "total_blocks": layers}
    out = override(native_sdpa, flat(q), flat(k), flat(v), heads=2, transformer_options=to)
    ref = AttentionDispatch(backend, skiparse=SkiparseSchedule.osp13(layers, 4))(q, k, v, AttentionCall("self", block))
    assert out.shape == (2, 90, 64)
    assert (out - flat(ref)).abs().max().item() <= 1e-6
    # the second call of the block is the cross-attention: dense, never skiparse
    cross = override(native_sdpa, flat(q), flat(k), flat(v), heads=2, transformer_options=to)
    dense = AttentionDispatch(backend)(q, k, v, AttentionCall("cross", block))
    assert (cross - flat(dense)).abs().max().item() <= 1e-6


def test_override_head_layout_and_dense_sdpa_is_comfys_own():
    q, k, v = qkv()
    calls = []

    def func(*a, **kw):
        calls.append(kw)
        return native_sdpa(*a, **kw)

    override = NativeAttention("sdpa", "osp13", k=4)
    to = {"grid_sizes": GRID, "block_index": 0, "total_blocks": 6}  # block 0 is dense in osp13
    out = override(func, flat(q), flat(k), flat(v), heads=2, transformer_options=to)
    assert len(calls) == 1 and torch.equal(out, native_sdpa(flat(q), flat(k), flat(v), 2))
    # skip_reshape layouts ([B, N, L, d] in and out)
    to = {"grid_sizes": GRID, "block_index": 2, "total_blocks": 6}
    out4 = NativeAttention("int8", "osp13")(func, q, k, v, heads=2, skip_reshape=True, skip_output_reshape=True,
                                            transformer_options=to)
    ref = AttentionDispatch("int8", skiparse=SkiparseSchedule.osp13(6, 4))(q, k, v, AttentionCall("self", 2))
    assert (out4 - ref).abs().max().item() <= 1e-6


def test_override_leaves_masked_and_non_grid_calls_to_comfy():
    q, k, v = qkv()
    override = NativeAttention("int8", "osp13")
    to = {"grid_sizes": (3, 6, 4), "block_index": 2, "total_blocks": 6}  # k length 90 != 72 grid tokens
    out = override(native_sdpa, flat(q), flat(k), flat(v), heads=2, transformer_options=to)
    ref = AttentionDispatch("int8")(q, k, v, AttentionCall("self", 2))  # int8, but dense
    assert (out - flat(ref)).abs().max().item() <= 1e-6
    mask = torch.ones(90, 90, dtype=torch.bool)
    out = override(native_sdpa, flat(q), flat(k), flat(v), heads=2, mask=mask,
                   transformer_options={"grid_sizes": GRID, "block_index": 2, "total_blocks": 6})
    assert torch.equal(out, native_sdpa(flat(q), flat(k), flat(v), 2, mask=mask))


def test_block_patch_resets_the_call_counter_and_sets_the_block():
    """ComfyUI 0.3.64's Wan forward sets neither the block number nor the grid: the attention patch's block
    replace patches and DIFFUSION_MODEL wrapper do; a one-block model sees a fresh counter at every forward."""
    q, k, v = qkv()
    override = NativeAttention("sdpa", "custom", ks=(4,))
    to: dict = {}
    outs = []

    def block(args):  # the Wan block: self-attention, then cross-attention
        for _ in range(2):
            outs.append(override(native_sdpa, flat(q), flat(k), flat(v), heads=2,
                                 transformer_options=args["transformer_options"]))
        return args

    x = torch.zeros(1, 16, 6, 12, 10)  # grid (6, 6, 5) = 180 tokens: not this call's 90, so dense
    native.grid_wrapper(Executor(lambda *a, **kw: None, class_obj=WanModel()), x, None, None, to)
    assert to["grid_sizes"] == (6, 6, 5)
    to["grid_sizes"] = GRID
    patch = native.attention_block_patch(0, 1)
    for _ in range(2):  # two forwards
        patch({"img": None, "transformer_options": to}, {"original_block": block})
    dense = native_sdpa(flat(q), flat(k), flat(v), 2)
    assert torch.equal(outs[0], outs[2]) and not torch.equal(outs[0], dense)  # self-attention: sparse
    assert torch.equal(outs[1], dense) and torch.equal(outs[3], dense)  # cross-attention: dense
    assert to["block_index"] == 0 and to["total_blocks"] == 1


class NativeStyleDispatch(AttentionDispatch):
    """Routes our DiT's attention through the override exactly as the native Wan forward does: q/k/v flattened
    to ``[B, L, heads*d]``, the grid, block index and block count in ``transformer_options``, ComfyUI's SDPA as
    ``func``, the per-block counter reset after each block."""

    def __init__(self, override: NativeAttention, layers: int):
        super().__init__("sdpa")
        self.override, self.layers = override, layers
        self.to: dict = {}
        self.last_block: int | None = None

    def __call__(self, q, k, v, call):
        if call.layer != self.last_block:  # a new block starts (what attention_block_patch does natively)
            NativeAttention.enter_block(self.to, call.layer, self.layers)
        self.last_block = call.layer
        out = self.override(native_sdpa, flat(q), flat(k), flat(v), heads=q.shape[1], transformer_options=self.to)
        return out.view(q.shape[0], q.shape[2], q.shape[1], -1).transpose(1, 2)


CUSTOM = (1, 2, 4, 4, 2, 1)


@pytest.mark.parametrize("schedule", ["osp13", "custom"])
def test_skiparse_through_override_equals_the_dits_own_skiparse(schedule):
    sd = random_dit_state(CFG)
    x, t, ctx = dit_inputs(CFG, grid=(3, 6, 5))
    sched = SkiparseSchedule.osp13(CFG.num_layers, 4) if schedule == "osp13" else SkiparseSchedule.custom(CUSTOM)
    own = WanDiT(CFG, AttentionDispatch("sdpa", skiparse=sched))
    own.load_state_dict(sd)
    dispatch = NativeStyleDispatch(NativeAttention("sdpa", schedule, k=4, ks=CUSTOM), CFG.num_layers)
    dispatch.to["grid_sizes"] = own.grid(x)
    routed = WanDiT(CFG, dispatch)
    routed.load_state_dict(sd)
    dense = WanDiT(CFG)
    dense.load_state_dict(sd)
    with torch.no_grad():
        a, b, c = own(x, t, ctx), routed(x, t, ctx), dense(x, t, ctx)
    assert (a - b).abs().max().item() <= 1e-5
    assert (a - c).abs().max().item() > 1e-3  # skiparse did change the output


def test_attention_choices_and_errors():
    assert NativeAttention().is_noop and not NativeAttention("int8").is_noop
    assert not NativeAttention("sdpa", "osp13").is_noop
    with pytest.raises(ValueError, match="choose one of"):
        NativeAttention("flash")
    with pytest.raises(ValueError, match="one integer >= 1 per block"):
        native.attention_override("sdpa", "custom", 4, "")
    with pytest.raises(ValueError, match="integers"):
        native.parse_ks("1 x 2")
    with pytest.raises(ValueError, match="6-block model"):
        native.attention_override("sdpa", "custom", 4, "1 2 1").check_layers(6)
    assert native.validate_attention("int8", "osp13", 4, "") is True
    assert "at most 8" in native.validate_attention("int8", "osp13", 9, "")


# ---------------------------------------------------------------------------------------------- the nodes


class WanModel(torch.nn.Module):  # stands for comfy.ldm.wan.model.WanModel
    def __init__(self, layers=6):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Identity() for _ in range(layers))


WanModel.__module__ = "comfy.ldm.wan.model"


class FakePatcher:
    """The part of ComfyUI's ModelPatcher the attention patch uses (clone copies model_options)."""

    def __init__(self, diffusion_model):
        self.model = type("BaseModel", (), {})()
        self.model.diffusion_model = diffusion_model
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = FakePatcher(self.model.diffusion_model)
        n.model_options = copy.deepcopy(self.model_options)
        return n

    def set_model_patch_replace(self, patch, name, block_name, number):
        to = self.model_options["transformer_options"]
        to.setdefault("patches_replace", {}).setdefault(name, {})[(block_name, number)] = patch

    def add_wrapper_with_key(self, wrapper_type, key, fn):
        self.model_options.setdefault("wrappers", {}).setdefault(wrapper_type, {}).setdefault(key, []).append(fn)


def test_attention_node_clones_and_never_mutates_the_input():
    model = FakePatcher(WanModel())
    before = copy.deepcopy(model.model_options)
    (same,) = native.patch_attention(model, "sdpa", "none", 4, "")
    assert same is model  # no-op
    (patched,) = native.patch_attention(model, "int8", "osp13", 4, "")
    assert patched is not model and model.model_options == before
    to = patched.model_options["transformer_options"]
    assert isinstance(to["optimized_attention_override"], NativeAttention)
    assert sorted(to["patches_replace"]["dit"]) == [("double_block", i) for i in range(6)]
    assert patched.model_options["wrappers"]["diffusion_model"]["wancore_attention"] == [native.grid_wrapper]
    (backend_only,) = native.patch_attention(model, "int8", "none", 4, "")  # no block patches needed
    assert "patches_replace" not in backend_only.model_options["transformer_options"]


def test_attention_node_chains_an_existing_override():
    model = FakePatcher(WanModel())
    seen = []

    def other(func, *args, **kwargs):
        seen.append(1)
        return func(*args, **kwargs)

    model.model_options["transformer_options"]["optimized_attention_override"] = other
    (patched,) = native.patch_attention(model, "sdpa", "osp13", 4, "")
    override = patched.model_options["transformer_options"]["optimized_attention_override"]
    q, k, v = qkv()
    override(native_sdpa, flat(q), flat(k), flat(v), heads=2,
             transformer_options={"grid_sizes": GRID, "block_index": 0, "total_blocks": 6})
    assert seen == [1]
    assert model.model_options["transformer_options"]["optimized_attention_override"] is other


@pytest.mark.parametrize("node", ["attention", "cache"])
def test_nodes_refuse_non_wan_models_in_one_line(node):
    unet = type("UNetModel", (torch.nn.Module,), {"__module__": "comfy.ldm.modules.diffusionmodules.openaimodel"})
    model = FakePatcher(unet())
    fn = native.patch_attention if node == "attention" else native.patch_cache
    with pytest.raises(ValueError) as err:
        fn(model, "int8") if node == "attention" else fn(model, "easycache")
    msg = str(err.value)
    assert "\n" not in msg and "UNetModel" in msg and "native Wan" in msg
    with pytest.raises(ValueError, match="ModelPatcher"):
        fn(object())


def test_cache_node_off_is_a_noop():
    model = FakePatcher(WanModel())
    assert native.patch_cache(model, "off")[0] is model
    assert native.NativeCache(CacheConfig.preset("exact")).is_noop
    assert native.validate_cache("easycache", -1.0, -1.0, -1.0, "extrapolate", "e", "") is True
    assert "threshold" in native.validate_cache("easycache", -5.0, -1.0, -1.0, "off", "e", "")


# ---------------------------------------------------------------------------------------------- the cache run


class Executor:
    """Stands for ComfyUI's WrapperExecutor around a native forward ``(x, t, context, ..., transformer_options)``."""

    def __init__(self, fn, class_obj=None):
        self.fn, self.class_obj, self.calls = fn, class_obj, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def velocity(x, t, context, clip_fea=None, time_dim_concat=None, transformer_options=None):
    return 0.9 * x + 0.01 * t.view(-1, 1, 1, 1, 1) / 1000 + context.mean(dim=(1, 2)).view(-1, 1, 1, 1, 1) * 0.1


def sample_sigmas(steps):
    return torch.linspace(1.0, 0.0, steps + 1)


def run_easycache(batched: bool, steps=12):
    model_cfg = CFG
    run = NativeCache(CacheConfig.preset("easycache", threshold=0.3)).start(model_cfg, steps, 5.0)
    ex = Executor(velocity)
    sig = sample_sigmas(steps)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 2, 4, 4, generator=g)
    ctx = torch.ones(1, 4, 8)
    outs = []
    for i in range(steps):
        xi = x * (1 - 0.05 * i)
        base = {"sigmas": sig[i:i + 1], "sample_sigmas": sig}
        t = sig[i:i + 1] * 1000
        if batched:
            to = dict(base, cond_or_uncond=[0, 1])
            out = native.diffusion_model_wrapper(
                Executor(lambda *a, **k: run.diffusion_model(ex, *a, **k)), torch.cat([xi, xi]), t.repeat(2),
                torch.cat([ctx, 2 * ctx]), None, None, dict(to, wancore_cache=run))
            outs.append(out)
        else:
            parts = []
            for kind, c in ((0, ctx), (1, 2 * ctx)):
                to = dict(base, cond_or_uncond=[kind], wancore_cache=run)
                parts.append(native.diffusion_model_wrapper(ex, xi, t, c, None, None, to))
            outs.append(torch.cat(parts))
    text = run.finish()
    return outs, run.report, text


def test_easycache_batched_and_unbatched_decide_the_same():
    out_b, rep_b, text = run_easycache(True)
    out_u, rep_u, _ = run_easycache(False)
    assert rep_b.status == rep_u.status
    assert 0 < rep_b.computed < rep_b.total  # some evaluations were skipped
    assert text.startswith(f"cache easycache: {rep_b.computed}/24 DiT evaluations")
    for a, b in zip(out_b, out_u):
        assert torch.allclose(a, b, atol=1e-6)


def test_easycache_reuses_each_branchs_own_transformation():
    outs, rep, _ = run_easycache(False)
    reused = [i for i, s in enumerate(rep.status) if s.get("cond") == "reused"]
    assert reused
    i = reused[0]
    last = max(j for j in range(i) if rep.status[j]["cond"] == "computed")
    x = torch.randn(1, 16, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    xi, xl = x * (1 - 0.05 * i), x * (1 - 0.05 * last)
    for row, scale in ((0, 1.0), (1, 2.0)):  # cond and uncond differ by their context
        ctx = scale * torch.ones(1, 4, 8)
        t = sample_sigmas(12)[last:last + 1] * 1000
        v_last = velocity(xl, t, ctx)
        assert torch.allclose(outs[i][row:row + 1], xi + (v_last - xl), atol=1e-5)


class TinyNative(torch.nn.Module):
    """A three-block forward that calls the block replace patches the way the native Wan forward does."""

    out_dim = 16
    freq_dim = 256
    dim = 8
    num_heads = 2

    def __init__(self):
        super().__init__()
        self.patch_embedding = torch.nn.Conv3d(16, 8, 1)
        self.time_embedding = torch.nn.Sequential(torch.nn.Linear(256, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8))
        self.time_projection = torch.nn.Sequential(torch.nn.SiLU(), torch.nn.Linear(8, 48))
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.block_calls = 0

    def forward(self, x, t, context, clip_fea=None, time_dim_concat=None, transformer_options=None):
        to = transformer_options
        h = self.patch_embedding(x).flatten(2).transpose(1, 2)
        h = h + context.mean(dim=(1, 2)).view(-1, 1, 1)
        replace = to.get("patches_replace", {}).get("dit", {})
        to["total_blocks"] = len(self.blocks)
        for i, block in enumerate(self.blocks):
            to["block_index"] = i

            def original(args, block=block):
                self.block_calls += 1
                return {"img": args["img"] + torch.tanh(block(args["img"]))}

            h = replace[("double_block", i)]({"img": h, "transformer_options": to}, {"original_block": original})["img"]
        return h.transpose(1, 2).reshape(x.shape[0], 8, *x.shape[2:])[:, :1].expand_as(x) + x


def test_block_stack_reuse_adds_the_stored_residual_and_skips_the_blocks():
    torch.manual_seed(0)
    dm = TinyNative()
    steps = 8
    cal = Calibration(model=None, steps=steps, mag_cond=(1.0,) * steps, mag_uncond=(1.0,) * steps)
    cfg = CacheConfig.preset("magcache", threshold=5.0, calibration=cal)
    model_cfg = native.native_config(dm)
    run = NativeCache(cfg).start(model_cfg, steps, 1.0)
    patches = {("double_block", i): native.block_patch(i) for i in range(3)}
    ex = Executor(dm, class_obj=dm)
    sig = sample_sigmas(steps)
    x = torch.randn(1, 16, 1, 2, 2)
    ctx = torch.ones(1, 3, 8)
    calls = []
    for i in range(steps):
        to = {"sigmas": sig[i:i + 1], "sample_sigmas": sig, "cond_or_uncond": [0], "wancore_cache": run,
              "patches_replace": {"dit": patches}}
        before = dm.block_calls
        out = native.diffusion_model_wrapper(ex, x, sig[i:i + 1] * 1000, ctx, None, None, to)
        calls.append(dm.block_calls - before)
        assert out.shape == x.shape
    st = [s["cond"] for s in run.report.status]
    assert "reused" in st and "computed" in st
    assert all(c == (3 if s == "computed" else 0) for c, s in zip(calls, st))
    # a reused step returns exactly what the computed one did (same x, same residual)
    run.finish()


def test_cfg_cache_estimates_uncond_from_cond():
    steps = 10
    run = NativeCache(CacheConfig.preset("wan")).start(CFG, steps, 5.0)
    sig = sample_sigmas(steps)
    seen = []

    def calc(model, conds, x_in, timestep, model_options):
        seen.append(conds[1] is not None)
        return [x_in * 0.5, x_in * 0.25 if conds[1] is not None else torch.zeros_like(x_in)]

    x = torch.randn(1, 16, 1, 4, 4)
    outs = []
    for i in range(steps):
        mo = {"transformer_options": {"sample_sigmas": sig, "wancore_cache": run}}
        outs.append(native.calc_cond_batch_wrapper(Executor(calc), None, ["c", "u"], x, sig[i:i + 1], mo))
    assert not all(seen) and seen[0]
    est = [i for i, s in enumerate(seen) if not s]
    assert all(o[1].abs().sum() > 0 for o in outs)  # estimated uncond is never the zeros placeholder
    assert run.report.count("estimated") == len(est)
    assert f"({len(est)} estimated)" in run.finish()


def test_conditioning_converter_pads_like_comfys_encoder():
    embeds = {"cond": [torch.ones(5, 8)], "uncond": [2 * torch.ones(3, 8)]}
    pos, neg = native.to_conditioning(embeds, 32)
    assert pos[0][0].shape == (1, 32, 8) and pos[0][1] == {}
    assert torch.equal(pos[0][0][0, :5], torch.ones(5, 8)) and pos[0][0][0, 5:].abs().sum() == 0
    assert torch.equal(neg[0][0][0, :3], 2 * torch.ones(3, 8))
    with pytest.raises(ValueError, match="exceed text_len 4"):
        native.to_conditioning(embeds, 4)


def test_time_embeddings_take_per_token_timesteps():
    """Wan 2.2 TI2V passes one timestep per token: the indicator uses each row's largest (the noised tokens)."""
    torch.manual_seed(0)
    dm = TinyNative()
    x = torch.zeros(2, 16, 1, 2, 2)
    per_token = torch.tensor([[0.0, 700.0, 700.0], [0.0, 500.0, 500.0]])
    e, e0 = native.time_embeddings(dm, per_token, x)
    ref, ref0 = native.time_embeddings(dm, torch.tensor([700.0, 500.0]), x)
    assert e.shape == (2, 8) and e0.shape == (2, 6, 8)
    assert torch.equal(e, ref) and torch.equal(e0, ref0)


@pytest.mark.parametrize("mode", ["reuse", "extrapolate"])
def test_wan_attention_cache_through_the_override(mode):
    """The wan preset's attention cache on a native-style forward: on reused steps the self-attention kernel
    is not called and its output is the stored one (reuse) or the linear extrapolation of the last two."""
    steps, layers = 10, 2
    run = NativeCache(CacheConfig.preset("wan", attention=mode)).start(CFG, steps, 5.0)
    override = native.CacheAttention()  # ComfyUI's func computes
    sig = sample_sigmas(steps)
    kernel_calls: list[int] = []
    self_outs: dict[int, torch.Tensor] = {}

    def func(q, k, v, heads, mask=None, transformer_options=None, **kw):
        kernel_calls.append(transformer_options["step"])
        return native_sdpa(q, k, v, heads)

    def forward(x, t, context, clip_fea=None, time_dim_concat=None, transformer_options=None):
        to = transformer_options
        to["grid_sizes"] = GRID
        step = to["step"]
        g = torch.Generator().manual_seed(step)
        for i in range(layers):
            NativeAttention.enter_block(to, i, layers)
            q, k, v = (torch.randn(x.shape[0], 90, 64, generator=g) for _ in range(3))
            out = override(func, q, k, v, heads=2, transformer_options=to)
            if i == 0:
                self_outs[step] = out
            override(func, q, k[:, :7], v[:, :7], heads=2, transformer_options=to)  # cross-attention
        return x

    ex = Executor(forward)
    for i in range(steps):
        to = {"sigmas": sig[i:i + 1], "sample_sigmas": sig, "cond_or_uncond": [0], "wancore_cache": run, "step": i}
        before = len(kernel_calls)
        native.diffusion_model_wrapper(ex, torch.zeros(1, 16, 3, 12, 10), sig[i:i + 1] * 1000, None, None, None, to)
        per_step = len(kernel_calls) - before
        assert per_step in (2 * layers, layers)  # all attention, or the cross-attention only
    rep = run.report
    assert rep.attention_reused > 0 and rep.attention_computed > 0
    reused = [s for s in range(steps) if rep.attention[s].get("cond", [0, 0])[1]]
    s = reused[-1]
    anchor = s - 1
    if mode == "reuse":
        assert torch.equal(self_outs[s], self_outs[anchor])
    else:
        old = anchor - 2
        assert torch.allclose(self_outs[s], self_outs[anchor] + 0.5 * (self_outs[anchor] - self_outs[old]), atol=1e-6)
    assert "self-attention reused" in run.finish()


class TinyNative364(TinyNative):
    """The same forward without ``transformer_options["total_blocks"]`` (ComfyUI 0.3.64 never sets it)."""

    def forward(self, x, t, context, clip_fea=None, time_dim_concat=None, transformer_options=None):
        to = transformer_options
        h = self.patch_embedding(x).flatten(2).transpose(1, 2)
        h = h + context.mean(dim=(1, 2)).view(-1, 1, 1)
        replace = to.get("patches_replace", {}).get("dit", {})
        for i, block in enumerate(self.blocks):
            to["block_index"] = i

            def original(args, block=block):
                return {"img": args["img"] + torch.tanh(block(args["img"]))}

            h = replace[("double_block", i)]({"img": h, "transformer_options": to}, {"original_block": original})["img"]
        return h.transpose(1, 2).reshape(x.shape[0], 8, *x.shape[2:])[:, :1].expand_as(x) + x


def _magcache_outputs(dm, steps=8):
    cal = Calibration(model=None, steps=steps, mag_cond=(1.0,) * steps, mag_uncond=(1.0,) * steps)
    run = NativeCache(CacheConfig.preset("magcache", threshold=5.0, calibration=cal)).start(
        native.native_config(dm), steps, 1.0)
    patches = {("double_block", i): native.block_patch(i) for i in range(3)}
    ex = Executor(dm, class_obj=dm)
    sig = sample_sigmas(steps)
    x = torch.randn(1, 16, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    outs = []
    for i in range(steps):
        to = {"sigmas": sig[i:i + 1], "sample_sigmas": sig, "cond_or_uncond": [0], "wancore_cache": run,
              "patches_replace": {"dit": patches}}
        outs.append(native.diffusion_model_wrapper(ex, x * (1 - 0.05 * i), sig[i:i + 1] * 1000, torch.ones(1, 3, 8),
                                                   None, None, to))
    status = [s["cond"] for s in run.report.status]
    run.finish()
    return outs, status


def test_block_stack_reuse_without_total_blocks_uses_the_models_block_count():
    """ComfyUI 0.3.64 sets no ``total_blocks``: the residual reused must still be the whole stack's (the same
    outputs as under 0.33.0, which sets it), not block 0's."""
    torch.manual_seed(0)
    old = TinyNative()
    new = TinyNative364()
    new.load_state_dict(old.state_dict())
    outs_old, st_old = _magcache_outputs(old)
    outs_new, st_new = _magcache_outputs(new)
    assert "reused" in st_old and st_old == st_new
    for a, b in zip(outs_old, outs_new):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


def test_native_cache_node_texts_name_only_what_it_has():
    """The native node has no 'exact' (ComfyUI's forward has no text K/V cache), its threshold is used by
    teacache / magcache / easycache only, and a calibration is pasted into the node of the run."""
    from nodes.native import specs as native_specs

    spec = next(s for s in native_specs.NODES if s.node_id == "WanCoreNativeCache")
    inputs = {i.name: i for i in spec.inputs}
    assert "exact" not in inputs["method"].tooltip and "exact" not in inputs["method"].options
    assert "wan and calibrate have no threshold" in inputs["threshold"].tooltip
    from wan_core.cache.report import CacheReport

    report = CacheReport("calibrate", 2, ("cond",))
    report.calibration = Calibration(model=None, steps=2, mag_cond=(1.0, 0.9))
    assert "WanCoreCache" not in report.text() and "cache node of this run" in report.text()


@pytest.mark.parametrize("cuda, installed, want", [(False, False, "sdpa"), (False, True, "sdpa"),
                                                   (True, False, "sdpa"), (True, True, "sage")])
def test_native_attention_auto_runs_sage_only_where_its_kernel_runs(monkeypatch, cuda, installed, want):
    """The default backend: without the SageAttention kernel, sage falls back to int8 in torch (a warning on
    every run, several times slower than sdpa), so auto takes ComfyUI's own attention there."""
    from nodes.native import specs as native_specs

    spec = next(s for s in native_specs.NODES if s.node_id == "WanCoreNativeAttention")
    assert {i.name: i for i in spec.inputs}["backend"].default == "auto"
    monkeypatch.setattr(native_specs.host, "torch_device", lambda: torch.device("cuda" if cuda else "cpu"))
    monkeypatch.setattr(native_specs, "sage_kernel_installed", lambda: installed)
    assert native_specs.attention_override("auto", "osp13", 4).backend == want
    assert native_specs.attention_override("auto", "none", 4).is_noop == (want == "sdpa")
    assert native_specs.validate_attention(backend="auto") is True
