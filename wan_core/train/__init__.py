"""Training utilities: flow-matching loss, bucket sampler, adaptive clipping, tail init, SUV skips, a loop.

Specs: docs/algorithms.md sections 7 (objective; Wan report section 4.2.2), 1.2 (SUV), 1.4 (tail init),
1.6 (bucket sampler), 1.7 (adaptive clipping); docs/wan_spec.md section 6.1 (the sampler's convention the loss is
trained for).
"""
from .bucket_sampler import BucketPlan, BucketSampler, shape_key
from .grad_clip import (AdaptiveGradClipper, ClipResult, GradientSpikeError, clear_spike_marker,
                        global_grad_norm, read_spike_marker)
from .loop import TrainConfig, TrainResult, evaluation_loss, latest_checkpoint, train
from .loss import (FlowMatchingBatch, flow_matching_loss, make_flow_matching_batch, sample_timesteps,
                   shift_sigma, sigma_to_wan_t, wan_t_to_sigma)
from .suv import SkipFusion, SUVBlocks, SUVStage, block_sparse_mode, suv_stage_table
from .tail_init import InflationReport, inflate_conv2d_weight, inflate_state_dict

__all__ = [
    "AdaptiveGradClipper", "BucketPlan", "BucketSampler", "ClipResult", "FlowMatchingBatch",
    "GradientSpikeError", "InflationReport", "SUVBlocks", "SUVStage", "SkipFusion", "TrainConfig",
    "TrainResult", "block_sparse_mode", "clear_spike_marker", "evaluation_loss", "flow_matching_loss",
    "global_grad_norm", "inflate_conv2d_weight", "inflate_state_dict", "latest_checkpoint",
    "make_flow_matching_batch", "read_spike_marker", "sample_timesteps", "shape_key", "shift_sigma",
    "sigma_to_wan_t", "suv_stage_table", "train", "wan_t_to_sigma", "SUVWanDiT",
]


def __getattr__(name):
    # SUVWanDiT needs the DiT package; imported on first use so the rest works on its own
    if name == "SUVWanDiT":
        from .suv_dit import SUVWanDiT
        return SUVWanDiT
    raise AttributeError(f"module 'wan_core.train' has no attribute {name!r}")
