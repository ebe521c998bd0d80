"""umT5 parity: our loader + encoder vs transformers' UMT5EncoderModel and T5 tokenizer
(docs/wan_spec.md sections 4.1, 7.1).

Reference: the randomised transformers model itself, fed by transformers' tokenizer with the official flow
(pad to 512, truncate, EOS, keep mask.sum() rows). Tolerance: max abs error <= 1e-5 in float32.
"""
from __future__ import annotations

import pytest
import torch

from wan_core import load_text_encoder

from . import helpers as H

TOL = 1e-5


@pytest.mark.parametrize("kind", ["official_pth", "official_st", "hf_st", "comfy_st", "aio_st", "hf_folder",
                                  "pipeline"])
def test_parity_with_transformers(tiny, reference_outputs, kind):
    te = load_text_encoder(tiny.files[kind], tokenizer=None if kind not in ("official_pth", "official_st", "hf_st",
                                                                           "aio_st") else tiny.tok_dir,
                           dtype=torch.float32, cache_size=0)
    out = te.encode(H.PROMPTS)
    err = H.max_abs_err(out, reference_outputs)
    print(f"umT5 parity [{kind}]: max abs err {err:.3g}")
    assert err <= TOL, f"{kind}: max abs err {err:.3g}"
    assert all(o.dtype == torch.float32 for o in out)
    # rows = real tokens + EOS, exactly the reference's mask.sum()
    assert [o.shape[0] for o in out] == [r.shape[0] for r in reference_outputs]
    assert out[3].shape == (1, 32)  # the empty prompt is the EOS token alone


def test_parity_scaled_fp8(tiny):
    """Scaled fp8 file vs the reference model holding the dequantised weights (fp8 * scale_weight)."""
    te = load_text_encoder(tiny.files["fp8_st"], dtype=torch.float32, cache_size=0)
    ref = H.reference_encode(tiny.ref_fp8, tiny.hf_tok, H.PROMPTS)
    err = H.max_abs_err(te.encode(H.PROMPTS), ref)
    print(f"umT5 parity [fp8 scaled]: max abs err {err:.3g}")
    assert err <= TOL, f"fp8 scaled: max abs err {err:.3g}"
    # the loaded weights are exactly the dequantised ones
    q = te.model.encoder.block[1].layer[0].SelfAttention.q.weight
    assert torch.equal(q, tiny.ref_fp8.encoder.block[1].layer[0].SelfAttention.q.weight)


def test_fp8_default_dtype_is_bf16(tiny):
    """Without dtype an fp8 file computes in bf16: compare with transformers' model cast to bf16."""
    import copy

    te = load_text_encoder(tiny.files["fp8_st"], cache_size=0)
    assert te.dtype == torch.bfloat16
    out = te.encode(H.PROMPTS)
    assert all(o.dtype == torch.float32 for o in out)
    ref_bf16 = H.reference_encode(copy.deepcopy(tiny.ref_fp8).to(torch.bfloat16), tiny.hf_tok, H.PROMPTS)
    assert H.rel_err(out, ref_bf16) < 1e-2


def test_fp16_keeps_ffn_output_projection_fp32(tiny, reference_outputs):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float16, cache_size=0)
    assert te.model.shared.weight.dtype == torch.float16
    assert te.model.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.float32
    assert H.rel_err(te.encode(H.PROMPTS), reference_outputs) < 1e-2  # fp16 compute vs fp32 reference


def test_batch_of_two_equals_each_alone(tiny):
    """Masking: a short prompt batched with a long one gives what it gives alone (padding is invisible)."""
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=0)
    short, long = H.PROMPTS[2], H.PROMPTS[0]
    ids, mask = te.tokenize([short, long])
    assert mask.sum(1).tolist()[0] < mask.shape[1]  # the short one really is padded
    batched = te.encode([short, long], batch_size=2)
    alone = [te.encode([short], batch_size=1)[0], te.encode([long], batch_size=1)[0]]
    assert H.max_abs_err(batched, alone) <= TOL  # fp32 summation order only
    # and an unmasked forward of the padded short prompt would differ (the mask matters)
    with torch.no_grad():
        unmasked = te.model(input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1])).last_hidden_state
    n = int(mask[0].sum())
    assert (unmasked[0, :n] - alone[0]).abs().max() > 1e-3


def test_truncation_to_512_tokens_with_eos(tiny):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=0)
    prompt = " ".join(H.corpus(200, seed=3))
    ids = tiny.hf_tok(prompt, max_length=512, truncation=True).input_ids
    assert len(ids) == 512 and ids[-1] == 1
    out = te.encode([prompt])[0]
    assert out.shape == (512, 32)
    ref = H.reference_encode(tiny.ref, tiny.hf_tok, [prompt])
    assert H.max_abs_err([out], ref) <= TOL


def test_encode_from_in_memory_state_dict(tiny, reference_outputs):
    te = load_text_encoder(dict(tiny.official), tokenizer=tiny.tok_dir / "spiece.model", dtype=torch.float32)
    assert H.max_abs_err(te.encode(H.PROMPTS), reference_outputs) <= TOL


def test_explicit_config_and_dtype_default(tiny, reference_outputs):
    te = load_text_encoder(tiny.files["official_pth"], tokenizer=tiny.json_dir, config="tiny")
    assert te.config.name == "tiny" and te.dtype == torch.float32  # stored dtype kept
    assert te.tokenizer.kind == "tokenizers"
    assert H.max_abs_err(te.encode(H.PROMPTS), reference_outputs) <= TOL


def test_parity_plain_fp8(tiny, tmp_path):
    """Plain fp8_e4m3fn file (no scale tensors): weights are the fp8 values themselves (scale 1)."""
    from safetensors.torch import save_file

    sd, deq = {}, {}
    for k, v in tiny.hf_sd.items():
        if k != "encoder.embed_tokens.weight" and any(s in k for s in H.FP8_LAYERS):
            sd[k] = v.to(torch.float8_e4m3fn)
            deq[k] = sd[k].to(torch.float32)
        else:
            sd[k] = deq[k] = v
    f = tmp_path / "umt5_xxl_fp8_e4m3fn.safetensors"
    save_file(sd, str(f))
    ref = H.reference_model()
    ref.load_state_dict(deq)
    te = load_text_encoder(f, tokenizer=tiny.tok_dir, dtype=torch.float32)
    err = H.max_abs_err(te.encode(H.PROMPTS), H.reference_encode(ref, tiny.hf_tok, H.PROMPTS))
    assert err <= TOL, f"plain fp8: max abs err {err:.3g}"
