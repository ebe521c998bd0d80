"""The torch GGML kernels against the ``gguf`` package's numpy ``dequantize`` (bit-equal).

Types gguf can quantise: random data quantised by gguf. K-quants (gguf has no quantiser for them): random
blocks built byte by byte, with f16 scales drawn from normal and subnormal magnitudes."""
import numpy as np
import pytest
import torch

from wan_core.checkpoint.ggml_blocks import BLOCK_TYPES, QK_K, dequantize_rows

gguf = pytest.importorskip("gguf")
GT = gguf.GGMLQuantizationType
QUANTISABLE = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "F16", "F32")
# byte offsets of the f16 scales inside each K-quant block (ggml-common.h block_q*_K layouts)
K_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def _ours(raw: np.ndarray, name: str) -> np.ndarray:
    return dequantize_rows(torch.from_numpy(np.ascontiguousarray(raw)).view(torch.uint8), name).numpy()


def test_sizes_and_ids_match_gguf():
    for name, t in BLOCK_TYPES.items():
        assert GT[name].value == t.type_id
        assert gguf.GGML_QUANT_SIZES[GT[name]] == (t.block_size, t.type_size)


@pytest.mark.parametrize("name", QUANTISABLE)
def test_quantisable_types_equal_gguf(name):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 512)) * np.exp(rng.uniform(-6, 3, (8, 1)))).astype(np.float32)
    x[0, :64] = 0.0  # all-zero blocks: scale 0
    raw = gguf.quantize(x, GT[name])
    ref = gguf.dequantize(raw, GT[name]).reshape(8, 512)
    raw_u8 = np.ascontiguousarray(raw).view(np.uint8).reshape(8, -1)
    ours = _ours(raw_u8, name)
    np.testing.assert_array_equal(ours, ref)
    if name != "F32":
        assert 0 < np.abs(ours - x).max() < np.abs(x).max()  # really lossy, and close


def _random_k_blocks(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    size = BLOCK_TYPES[name].type_size
    blocks = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for at in K_SCALES[name]:
        mags = np.exp2(rng.uniform(-20, -4, n))  # below 2**-14: f16 subnormals
        mags[::7] = rng.uniform(0, 6e-8, len(mags[::7]))  # the smallest subnormals and zero
        signs = np.where(rng.random(n) < 0.2, -1.0, 1.0)
        blocks[:, at:at + 2] = (mags * signs).astype(np.float16).view(np.uint8).reshape(n, 2)
    return blocks


@pytest.mark.parametrize("name", list(K_SCALES))
def test_k_quants_equal_gguf_on_random_blocks(name):
    rng = np.random.default_rng(1)
    blocks = _random_k_blocks(name, 96, rng)
    scales = np.concatenate([blocks[:, a:a + 2].copy().view(np.float16) for a in K_SCALES[name]])
    assert (np.abs(scales.astype(np.float32)) < 2 ** -14).any()  # subnormal scales really are exercised
    ref = gguf.dequantize(blocks, GT[name]).reshape(-1)
    ours = _ours(blocks.reshape(4, -1), name).reshape(-1)
    assert ours.size == 96 * QK_K
    np.testing.assert_array_equal(ours, ref)
    assert np.count_nonzero(ours) > ours.size // 2


def test_output_dtype_and_bad_input():
    raw = torch.zeros(2, 34, dtype=torch.uint8)
    assert dequantize_rows(raw, "Q8_0", torch.bfloat16).shape == (2, 32)
    assert dequantize_rows(raw, "Q8_0", torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="Q8_0 data must be uint8 rows of whole 34-byte blocks"):
        dequantize_rows(torch.zeros(2, 33, dtype=torch.uint8), "Q8_0")
