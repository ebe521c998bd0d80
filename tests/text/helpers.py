"""Reference builders for the umT5 tests: a tiny SentencePiece model, a randomised transformers
UMT5EncoderModel, exports of its weights under official / ComfyUI / fp8-scaled names (from the team's .tsv,
not from wan_core's own rules), and the reference encoding of transformers' tokenizer + model."""
from __future__ import annotations

import io
import json
import random
from pathlib import Path

import torch

DATA = Path(__file__).parent / "data"
TSV = DATA / "umt5_keymap_official_to_hf.tsv"
COMFY_PREFIX = "text_encoders.umt5xxl.transformer."


def tsv_rows() -> list[tuple[str, str, tuple[int, ...]]]:
    """(official, transformers, shape) rows of tests/text/data/umt5_keymap_official_to_hf.tsv."""
    rows = []
    for line in TSV.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        off, hf, shape = line.split("\t")
        rows.append((off, hf, tuple(json.loads(shape))))
    return rows


def corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """Deterministic pseudo-text: English-like words, invented words, accents and CJK characters."""
    rng = random.Random(seed)
    base = ("a the of in on with and through over under cat dog person woman man child camera pans zooms slowly "
            "quickly bright dark red blue green golden sky river ocean mountain forest city street night day rain "
            "snow light shadow walking running dancing flying video cinematic shot close-up wide 4k realistic "
            "café naïve 猫 犬 山 海 über straße").split()
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "be", "dan", "gor", "pel", "qui", "zan", "fro"]
    words = base + ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(500)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) + rng.choice(["", ".", ",", "!"])
            for _ in range(n)]


def train_spiece(vocab_size: int = 300) -> bytes:
    """A tiny umT5-style SentencePiece model (pad 0, EOS 1, unk 2, no BOS), serialized."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=buf, vocab_size=vocab_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2, num_threads=1,
    )
    return buf.getvalue()


def hf_tokenizer(folder: Path):
    """transformers' own T5 tokenizer built from the folder's spiece.model (the reference tokenizer)."""
    from transformers import AutoTokenizer

    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": 0}))
    return AutoTokenizer.from_pretrained(str(folder))


def reference_model(vocab=512, d_model=32, d_kv=8, heads=4, d_ff=64, layers=2, seed=0):
    """transformers UMT5EncoderModel (gated GELU) with every tensor randomised, in float32."""
    from transformers import UMT5Config, UMT5EncoderModel

    cfg = UMT5Config(vocab_size=vocab, d_model=d_model, d_kv=d_kv, num_heads=heads, d_ff=d_ff, num_layers=layers,
                     relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
                     layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu", is_encoder_decoder=False)
    model = UMT5EncoderModel(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "relative_attention_bias" in name or name == "shared.weight":
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
    return model


def hf_state_dict(model) -> dict[str, torch.Tensor]:
    """transformers names, contiguous copies (safetensors refuses shared storage), tied copy included."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def export_official(model) -> dict[str, torch.Tensor]:
    """Official Wan names, renamed through the .tsv rows (every parameter must be covered)."""
    sd = hf_state_dict(model)
    hf_to_off = {hf: off for off, hf, _ in tsv_rows()}
    out = {}
    for k, v in sd.items():
        if k == "encoder.embed_tokens.weight":
            continue
        assert k in hf_to_off, f"{k} is not in the .tsv"
        out[hf_to_off[k]] = v
    return out


FP8_LAYERS = ("SelfAttention.q.", "SelfAttention.k.", "SelfAttention.v.", "SelfAttention.o.", "wi_0.", "wi_1.",
              "wo.")


def export_scaled_fp8(model) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(ComfyUI-style scaled-fp8 state dict, the dequantised float32 state dict it stands for).

    Linear weights become float8_e4m3fn with a 0-d float32 ``scale_weight`` (and an unused ``scale_input``);
    a ``scaled_fp8`` marker is added; embedding and norms stay float32.
    """
    out, deq = {}, {}
    for k, v in hf_state_dict(model).items():
        if k == "encoder.embed_tokens.weight":
            continue
        if k.endswith(".weight") and any(s in k for s in FP8_LAYERS):
            layer = k[: -len(".weight")]
            scale = (v.abs().max() / 448.0).to(torch.float32)
            w8 = (v / scale).to(torch.float8_e4m3fn)
            out[k] = w8
            out[layer + ".scale_weight"] = scale.reshape(())
            out[layer + ".scale_input"] = torch.tensor(1.0)
            deq[k] = w8.to(torch.float32) * scale
        else:
            out[k] = v
            deq[k] = v
    out["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    return out, deq


def spiece_tensor(model_bytes: bytes) -> torch.Tensor:
    """ComfyUI's embedding of a SentencePiece model in a checkpoint: a uint8 tensor of its bytes."""
    return torch.frombuffer(bytearray(model_bytes), dtype=torch.uint8).clone()


def reference_encode(model, tokenizer, prompts: list[str]) -> list[torch.Tensor]:
    """The official flow: tokenizer padded to 512 with truncation and EOS, full forward, keep mask.sum() rows."""
    enc = tokenizer(prompts, padding="max_length", max_length=512, truncation=True, add_special_tokens=True,
                    return_tensors="pt")
    with torch.no_grad():
        hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    lens = enc["attention_mask"].sum(dim=1).tolist()
    return [hidden[i, :n].float() for i, n in enumerate(lens)]


def max_abs_err(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    assert len(a) == len(b)
    err = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        err = max(err, (x.float() - y.float()).abs().max().item())
    return err


def rel_err(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """||a - b|| / ||b|| over all prompts (for reduced-precision comparisons)."""
    num = sum(((x.float() - y.float()) ** 2).sum().item() for x, y in zip(a, b, strict=True))
    den = sum((y.float() ** 2).sum().item() for y in b)
    return (num / den) ** 0.5


# Prompts the parity tests use; already clean (cleaning is tested on its own).
PROMPTS = [
    "a cat walking through the forest at night, cinematic shot",
    "über straße café",
    "猫 山 海",
    "",
    "the camera pans slowly over a golden river, 4k realistic",
    "zanfro kalomi bright red sky!",
]
