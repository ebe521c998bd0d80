"""Produce WF-VAE parity fixtures with the official Open-Sora Plan WFVAEModel.

    OSP_ROOT=<Open-Sora-Plan checkout, outside this repository> python make_fixtures.py OUT.safetensors
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.environ.get("OSP_ROOT", "."))  # the official code is never part of this repository
from opensora.models.causalvideovae.model.vae.modeling_wfvae import WFVAEModel  # noqa: E402

H, W = 8, 16
STRUCTURES = {
    "4x8x8": dict(frames=(1, 9, 33), extra={}),
    "8x8x8": dict(frames=(1, 9, 57), extra=dict(
        l1_dowmsample_block="Spatial2xTime2x3DDownsample", l1_downsample_wavelet="HaarWaveletTransform3D",
        l1_upsample_block="Spatial2xTime2x3DUpsample", l1_upsample_wavelet="InverseHaarWaveletTransform3D")),
}


def main(out_path):
    tensors, configs = {}, {}
    for i, (name, spec) in enumerate(STRUCTURES.items()):
        torch.manual_seed(1000 + i)
        cfg = dict(latent_dim=4, base_channels=2, encoder_num_resblocks=1, encoder_energy_flow_hidden_size=3,
                   decoder_num_resblocks=1, decoder_energy_flow_hidden_size=2, connect_res_layer_num=1,
                   use_attention=True, norm_type="layernorm", t_interpolation="trilinear",
                   scale=[0.5, 0.25, 2.0, 1.0], shift=[0.1, -0.2, 0.0, 0.3], **spec["extra"])
        model = WFVAEModel(**cfg).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "wavelet" in pname:
                    continue
                p.add_(0.05 * torch.randn_like(p))
                p.copy_(p.half().float())  # exactly representable in float16: stored as float16
        sd = model.state_dict()
        for k, v in sd.items():
            tensors[f"{name}/weights/{k}"] = v.half() if "wavelet" not in k else v.clone()
        video = (torch.rand(1, 3, max(spec["frames"]), H, W) * 2 - 1).half()
        tensors[f"{name}/video"] = video
        video = video.float()
        with torch.no_grad():
            for t in spec["frames"]:
                mean = model.encode(video[:, :, :t]).mean
                tensors[f"{name}/mean_{t}"] = mean.contiguous()
                tensors[f"{name}/decoded_{t}"] = model.decode(mean).contiguous()
        configs[name] = cfg
    save_file(tensors, out_path, metadata={"configs": json.dumps(configs), "torch": torch.__version__})


if __name__ == "__main__":
    main(sys.argv[1])
