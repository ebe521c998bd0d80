"""The single attention dispatch point (DESIGN.md section 3): every attention call in the models goes here."""
from .dispatch import AttentionCall, AttentionDispatch, attention_backends, register_backend, sdpa_attention

__all__ = ["AttentionCall", "AttentionDispatch", "attention_backends", "register_backend", "sdpa_attention"]
