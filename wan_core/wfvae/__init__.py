"""Open-Sora Plan's WF-VAE (Wavelet-driven energy Flow VAE), 4x8x8 and the v1.5 8x8x8: model, loading, streamed
and tiled encode/decode. docs/wfvae.md.
"""
