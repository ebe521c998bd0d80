"""The Wan diffusion transformer: patch and time embeddings, 3-D RoPE, attention blocks, the model, its loader
and load options, the image (I2V) branch and the Wan 2.2 expert pair."""
