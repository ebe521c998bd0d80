"""umT5 text encoding for Wan 2.1 (docs/wan_spec.md section 4): key maps, tokenizers, prompt cleaning, encoder.

transformers is imported only when an encoder is built, so importing this package is cheap.
"""
from .encoder import TextEncoder, detect_text_encoder_config, load_text_encoder
from .prompt import clean_prompt
from .tokenizer import TokenizerError, load_tokenizer

__all__ = ["TextEncoder", "load_text_encoder", "detect_text_encoder_config", "clean_prompt", "load_tokenizer",
           "TokenizerError"]
