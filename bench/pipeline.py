"""Benchmark: whole text-to-video pipeline (sampling + VAE decode) ours vs diffusers.WanPipeline (not a test).

Same random weights, embeddings, initial noise and schedule; the text encoder is left out (both take
precomputed embeddings). After one warm-up run each, runs interleaved (ours, theirs, ...) and prints the median time ratio per dtype.

    python bench/pipeline.py [--steps 10] [--frames 17] [--size 256] [--repeats 2] [--dtypes float32,bfloat16]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from wan_core.config import DiTConfig
from wan_core.dit.keys import diffusers_to_official
from wan_core.dit.loader import load_dit
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import make_noise
from wan_core.vae.loader import load_vae


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args()

    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
    from diffusers import WanPipeline as DiffusersWanPipeline
    from diffusers import WanTransformer3DModel

    cfg = DiTConfig(dim=512, ffn_dim=1536, num_heads=4, num_layers=4, text_dim=4096)
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim, in_channels=16,
        out_channels=16, text_dim=cfg.text_dim, freq_dim=256, ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6).eval()
    vae = AutoencoderKLWan().eval()  # the real Wan 2.1 VAE widths
    with torch.no_grad():
        for p in list(transformer.parameters()) + list(vae.parameters()):
            p.normal_(0, 0.02)
    h = w = args.size
    gen = GenerationConfig(width=w, height=h, frames=args.frames, steps=args.steps, guidance=5.0, seed=0)
    noise = make_noise(0, gen.latent_shape)
    cond = torch.zeros(1, 512, 4096)
    cond[:, :20] = torch.randn(1, 20, 4096)
    uncond = torch.zeros(1, 512, 4096)
    uncond[:, :8] = torch.randn(1, 8, 4096)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; DiT dim {cfg.dim} x {cfg.num_layers} blocks, "
          f"real VAE widths, {args.frames} frames {w}x{h}, {args.steps} UniPC steps, CFG 5")
    for dtype in [getattr(torch, name) for name in args.dtypes.split(",")]:
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                            flow_shift=5.0, solver_order=2, solver_type="bh2")
        theirs = DiffusersWanPipeline(tokenizer=None, text_encoder=None, transformer=transformer.to(dtype),
                                      vae=vae.to(dtype), scheduler=scheduler)
        scheduler.set_timesteps(args.steps)
        sigmas = tuple(scheduler.sigmas.tolist())
        ours = WanPipeline(
            load_dit({diffusers_to_official(k): v for k, v in transformer.state_dict().items()}, dtype=dtype,
                     config=cfg),
            load_vae(vae.state_dict(), dtype=dtype), None)
        run_cfg = gen.replace(sigmas=sigmas, convention="custom", integer_timesteps=True)

        def run_ours():
            lat = ours.sample_latents([cond[0, :20]], [uncond[0, :8]], run_cfg)
            return ours.decode(lat, tiling="off")

        def run_theirs():
            return theirs(prompt_embeds=cond.to(dtype), negative_prompt_embeds=uncond.to(dtype), height=h, width=w,
                          num_frames=args.frames, num_inference_steps=args.steps, guidance_scale=5.0,
                          latents=noise.clone(), output_type="pt", return_dict=False)[0]

        times = {"ours": [], "diffusers": []}
        with torch.inference_mode():
            run_ours(), run_theirs()  # warm-up: first calls pay one-time kernel and allocator costs
            for _ in range(args.repeats):
                for name, fn in (("ours", run_ours), ("diffusers", run_theirs)):
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
        mo, md = statistics.median(times["ours"]), statistics.median(times["diffusers"])
        print(f"{str(dtype):15s}: ours {mo:.2f}s  diffusers {md:.2f}s  ratio ours/diffusers {mo / md:.3f}")


if __name__ == "__main__":
    main()
