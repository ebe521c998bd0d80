"""A tiny random instruction LLM written as a transformers folder (for the prompt-rewrite tests): a byte-level
BPE tokenizer trained here on the rewriting instructions, a ChatML-like chat template, and a 2-layer Qwen2 causal
LM. Tokens without a letter or digit (special tokens included) get zero embeddings, so greedy decoding of the
random model always writes words (never EOS), which makes "a usable rewrite" deterministic."""
from __future__ import annotations

from pathlib import Path

import torch

EOS, PAD, IM_START = "<|im_end|>", "<|endoftext|>", "<|im_start|>"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
             "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def train_tokenizer(chat_template: str | None = CHATML):
    """A ``PreTrainedTokenizerFast``: EOS ``<|im_end|>`` = id 0, pad ``<|endoftext|>`` = id 1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from wan_core.text.rewrite import rewrite_instructions

    corpus = [rewrite_instructions("en"), rewrite_instructions("zh"),
              "a cat on the moon, a dog runs in the snow, a red car at night, cinematic realistic footage"] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=[EOS, PAD, IM_START], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   additional_special_tokens=[IM_START])
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def build_tiny_llm(folder: Path, chat_template: str | None = CHATML, seed: int = 0) -> Path:
    """Write ``config.json``, ``model.safetensors`` and the tokenizer files of a tiny Qwen2 chat LM."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    folder = Path(folder)
    tok = train_tokenizer(chat_template)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.normal_(0.0, 0.2)
        for i in range(len(tok)):
            if not any(ch.isalnum() for ch in tok.decode([i])):
                emb[i] = 0.0
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder
