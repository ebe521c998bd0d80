"""Tokenizers: spiece.model, tokenizer.json and ComfyUI's embedded ``spiece_model`` give the token ids of
transformers' T5 tokenizer (the reference), truncated to 512 with EOS (docs/wan_spec.md section 4.1)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import load_text_encoder
from wan_core.text.tokenizer import TokenizerError, load_tokenizer

from . import helpers as H

TEXTS = H.PROMPTS + [
    "zebra quokka xylophone",  # unseen words
    "a cat </s> a dog",  # a control piece written literally
    "<pad>a<unk>",
    "Ünïcødé ✓ 🙂 ½",
    " ".join(H.corpus(150, seed=5)),  # longer than 512 tokens
]


def _reference_ids(hf_tok, text):
    return hf_tok(text, max_length=512, truncation=True).input_ids


@pytest.mark.parametrize("which", ["spiece_file", "spiece_folder", "json_file", "json_folder", "bytes"])
def test_ids_match_transformers_tokenizer(tiny, which):
    spec = {"spiece_file": tiny.tok_dir / "spiece.model", "spiece_folder": tiny.tok_dir,
            "json_file": tiny.json_dir / "tokenizer.json", "json_folder": tiny.json_dir,
            "bytes": tiny.spm_bytes}[which]
    tok = load_tokenizer(spec)
    assert tok.eos_id == 1 and tok.pad_id == 0
    for text in TEXTS:
        assert tok.token_ids(text, 512) == _reference_ids(tiny.hf_tok, text), text
    assert len(tok.token_ids(TEXTS[-1], 512)) == 512


def test_batch_is_right_padded_and_masked(tiny):
    tok = load_tokenizer(tiny.tok_dir)
    ids, mask = tok(["a cat", "", "a cat walking through the forest"], 512)
    lens = [len(tok.token_ids(t)) for t in ["a cat", "", "a cat walking through the forest"]]
    assert mask.sum(1).tolist() == lens and ids.shape == (3, max(lens))
    assert ids[1, 0] == 1 and (ids[1, 1:] == 0).all() and (mask[1, 1:] == 0).all()


def test_tokenizer_from_embedded_spiece_model(tiny):
    """A ComfyUI umt5 file embeds its SentencePiece model as a uint8 tensor: used when no tokenizer is given."""
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32)
    assert te.tokenizer.kind == "sentencepiece" and "spiece_model" in te.tokenizer.source
    for text in TEXTS:
        assert te.tokenizer.token_ids(text) == _reference_ids(tiny.hf_tok, text)


def test_explicit_tokenizer_wins_over_embedded(tiny):
    te = load_text_encoder(tiny.files["comfy_st"], tokenizer=tiny.json_dir)
    assert te.tokenizer.kind == "tokenizers"


def test_tokenizer_found_beside_official_pth(tiny, tmp_path):
    """Official Wan layout: models_t5_umt5-xxl-enc-bf16.pth next to google/umt5-xxl/ (the tokenizer)."""
    (tmp_path / "google" / "umt5-xxl").mkdir(parents=True)
    (tmp_path / "google" / "umt5-xxl" / "spiece.model").write_bytes(tiny.spm_bytes)
    pth = tmp_path / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(tiny.official, pth)
    te = load_text_encoder(pth)
    assert te.tokenizer.source.endswith("spiece.model")


def test_missing_tokenizer_is_a_clear_error(tiny):
    with pytest.raises(TokenizerError) as e:
        load_text_encoder(tiny.files["official_pth"])
    msg = str(e.value)
    assert "no tokenizer: pass tokenizer=<folder with spiece.model or tokenizer.json>, or use a ComfyUI umt5 file " \
           "that embeds spiece_model" in msg
    assert str(tiny.files["official_pth"]) in msg


def test_bad_tokenizer_paths(tiny, tmp_path):
    with pytest.raises(TokenizerError, match="no tokenizer.json or spiece.model"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="no such tokenizer"):
        load_tokenizer(tmp_path / "nope.model")
    bad = tmp_path / "spiece.model"
    bad.write_bytes(b"not a sentencepiece model")
    with pytest.raises(TokenizerError, match="not a valid SentencePiece model"):
        load_tokenizer(bad)


def test_tokenizer_larger_than_the_embedding_is_rejected(tiny, tmp_path):
    small = H.export_official(H.reference_model(vocab=256))  # the tokenizer has 300 pieces
    f = tmp_path / "small_vocab.safetensors"
    save_file(small, str(f))
    with pytest.raises(TokenizerError, match="300 tokens but the encoder .* embeds only 256"):
        load_text_encoder(f, tokenizer=tiny.tok_dir)
