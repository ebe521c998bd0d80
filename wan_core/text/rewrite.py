"""Prompt rewriting with a local instruction LLM (Wan report section 4.5, "prompt alignment").

Short user prompts are rewritten into the long, structured captions Wan was trained on: video style first,
then a one-sentence summary, then details; natural motion for every moving subject; the meaning kept. The LLM is
any transformers causal LM in a local folder (``config.json``, weights, tokenizer); nothing is downloaded.
transformers is imported only when a rewriter is loaded, so importing this module is cheap.
"""
from __future__ import annotations

import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast, get_args

import torch

Language = Literal["auto", "en", "zh"]
LANGUAGES: tuple[str, ...] = get_args(Language)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


class RewriterError(ValueError):
    """The folder cannot be used as a rewriting LLM; the message names the folder and what is wrong."""


class RewriteWarning(UserWarning):
    """The LLM gave nothing usable and the original prompt was kept."""


# ---------------------------------------------------------------- instructions (our own wording)

_INSTRUCTIONS = """\
You turn short prompts for a text-to-video model into the long, detailed video captions the model was \
trained on. Follow these rules:
1. Keep the meaning. Every subject, object, number, colour, place and action the user asked for stays, and \
nothing they asked for changes. Do not add new main characters, text overlays or a different story.
2. Order the caption like this: first the visual style of the video (for example realistic footage, \
cinematic film, documentary, anime, 3D animation, watercolour painting; keep the user's style if they name \
one, otherwise pick one that suits the scene), then one sentence that sums up what happens, then the details: \
what the subjects look like (clothing, colours, expressions), the setting and background, the lighting and \
the time of day, the shot size, camera angle and camera movement.
3. Give natural motion. Every subject that can move gets a simple, physically plausible action that suits \
what it is (a bird beats its wings, a person walks or turns their head, water ripples, hair and leaves sway \
in the wind), so the video moves smoothly.
4. Describe only what a camera can see during this one short clip: no sounds, smells, thoughts or events \
before and after it.
5. Answer with the rewritten prompt only: one paragraph of about 60 to 120 words, no title, no quotation \
marks, no list, no explanation."""

_LANGUAGE_LINE = {
    "en": "Write the rewritten prompt in English, whatever the language of the user's prompt.",
    "zh": "Write the rewritten prompt in Simplified Chinese (简体中文), whatever the language of the user's prompt.",
}

_EXAMPLES = {
    "en": (
        ("a cat on a windowsill",
         "Realistic footage, soft natural light. A ginger cat rests on a sunny windowsill and watches the street "
         "below. The cat has thick orange fur with pale stripes and bright green eyes; it lies on a folded grey "
         "blanket, slowly swishes its tail, twitches one ear and blinks lazily. Thin white curtains drift in a "
         "light breeze beside it and small pots of herbs stand along the sill. Medium close-up from inside the "
         "room, static camera, shallow depth of field with the street softly blurred."),
        ("red sports car drifting",
         "Cinematic action shot, high contrast, late afternoon. A red sports car drifts around a hairpin bend on "
         "a mountain road. The glossy car slides sideways with its front wheels turned against the curve, its "
         "rear tyres throwing up pale smoke and loose gravel, then straightens and speeds away. Grey rock walls "
         "and pine trees line the road, and golden sunlight flashes across the bodywork. Low-angle tracking "
         "shot that follows the car through the bend."),
    ),
    "zh": (
        ("一只狗在雪地里奔跑",
         "写实风格，明亮的自然光。一只金毛犬在积雪覆盖的田野上欢快地奔跑。它金色的长毛随着步伐上下起伏，四肢有力地"
         "蹬地，溅起蓬松的雪花，舌头微微伸出，耳朵随奔跑轻轻摆动。远处是覆雪的松树林和淡蓝色的天空，阳光在雪面上闪"
         "烁。低角度跟拍镜头，随着狗的奔跑方向平稳移动。"),
        ("两个宇航员在月球上打篮球",
         "写实科幻风格，电影感画面。两名宇航员在月球表面打篮球。他们身穿白色宇航服，头盔面罩映出远处蓝色的地球；一人"
         "缓慢运球后高高跃起，在低重力中飘浮般投篮，另一人伸展双臂起跳防守，靴子扬起细细的灰色月尘。背景是漆黑的星空"
         "和坑洼的灰白地面，强烈的侧光投下清晰的长影。中景，镜头随球员缓慢横移。"),
    ),
}

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def resolve_language(prompt: str, language: Language = "auto") -> str:
    """``"en"`` or ``"zh"``; ``auto``: Chinese when the prompt contains Chinese characters, else English."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    if language != "auto":
        return language
    return "zh" if _CJK.search(prompt) else "en"


def rewrite_instructions(language: str = "en") -> str:
    """The system message: the rewriting rules, the output language and two example rewrites."""
    if language not in _LANGUAGE_LINE:
        raise ValueError(f"language must be 'en' or 'zh', got {language!r}")
    examples = "\n\n".join(f"Prompt: {short}\nRewritten: {long}" for short, long in _EXAMPLES[language])
    return f"{_INSTRUCTIONS}\n6. {_LANGUAGE_LINE[language]}\n\nExamples:\n\n{examples}"


# ---------------------------------------------------------------- cleaning the LLM's answer

_SPECIAL = re.compile(r"<\|[^<>|\n]{1,40}\|>|</?s>|<(?:bos|eos|pad|unk|end_of_turn|start_of_turn|eot_id)>|\[/?INST\]",
                      re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"^.*</(?:think|thinking|reasoning)>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>.*$", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"^\s*```[\w-]*\s*$", re.MULTILINE)
_LABEL_WORDS = (r"(?:(?:the|your|my|final|new|rewritten|rewrite|revised|expanded|enhanced|improved|refined|"
                r"detailed|video|text-to-video|t2v)\s+)*(?:prompt|caption|description|output|answer|result|"
                r"rewritten|rewrite|version)")
# "Rewritten prompt:", "**Prompt:**", "改写后的提示词：" at the very start of the answer
_LABEL = re.compile(r"^[\s*#>_-]*(?:" + _LABEL_WORDS + r"|(?:改写|扩写|重写|优化)(?:后)?的?(?:提示词|描述|结果|prompt)?"
                    r"|提示词|描述)\s*[*_]*\s*[:：]\s*[*_]*\s*", re.IGNORECASE)
# "Sure! Here is the rewritten prompt:" / "Here's an expanded version:" (a chatty lead-in ending in a colon)
_LEAD_IN = re.compile(r"^[\s*#>_-]*(?:sure|okay|ok|certainly|of course|absolutely|here|below is|好的|当然)\b"
                      r"[^\n:：]{0,80}[:：]\s*[*_]*\s*", re.IGNORECASE)
# a new turn or an afterword: cut everything from there
_TAIL = re.compile(r"\n\s*[*_#]*\s*(?:user|human|assistant|system|input|prompt|note|notes|explanation|"
                   r"word count|用户|注|说明)\s*[*_]*\s*[:：]", re.IGNORECASE)
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("「", "」"), ("『", "』"), ("«", "»"), ("`", "`"),
           ("**", "**"))
_WHITESPACE = re.compile(r"\s+")


def _strip_quotes(text: str) -> str:
    changed = True
    while changed and text:
        changed = False
        for left, right in _QUOTES:
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                inner = text[len(left): -len(right)]
                if left == right and left in inner:  # '"a" and "b"' is not one quoted string
                    continue
                text, changed = inner.strip(), True
                break
    return text


def clean_rewritten_prompt(text: str, special_tokens: Sequence[str] = ()) -> str:
    """The usable prompt in an LLM answer (empty when there is none).

    Removes special tokens (``special_tokens`` and the usual ``<|...|>``, ``</s>``, ``<eos>``, ``[INST]``
    forms), thinking blocks (``<think>...</think>``, an unclosed ``<think>`` to the end, or everything up to
    a lone ``</think>``), code fences, leading labels and lead-ins ("Rewritten prompt:", "Sure! Here is ...:"),
    a new turn or afterword ("\\nUser:", "\\nNote:"), surrounding quotes; collapses whitespace.
    """
    text = _THINK_BLOCK.sub(" ", text)  # thinking first: its tags may be special tokens
    text = _THINK_CLOSE.sub(" ", text)
    text = _THINK_OPEN.sub(" ", text)
    for tok in special_tokens:
        if tok:
            text = text.replace(tok, " ")
    text = _SPECIAL.sub(" ", text)
    text = _FENCE.sub("", text).strip()
    for _ in range(4):  # "Sure! Here it is:\n\n**Rewritten prompt:** ..." has two
        before = text
        text = _strip_quotes(text.strip())
        text = _LEAD_IN.sub("", text, count=1)
        text = _LABEL.sub("", text, count=1).strip()
        if text == before:
            break
    match = _TAIL.search(text)
    if match:
        text = text[: match.start()]
    text = _WHITESPACE.sub(" ", text).strip()
    return _strip_quotes(text)


def is_usable(text: str) -> bool:
    """At least a few letters or digits (an answer of punctuation or one character is not a prompt)."""
    return sum(ch.isalnum() for ch in text) >= 2


# ---------------------------------------------------------------- generation helpers


class _SeededSampler:
    """A logits processor that samples the next token with its own ``torch.Generator`` (seeded, on the CPU,
    so the global RNG is untouched and a seed gives the same tokens on any device for the same logits) and
    leaves only that token finite: greedy decoding then picks it."""

    def __init__(self, seed: int, temperature: float, top_p: float):
        self.generator = torch.Generator(device="cpu").manual_seed(int(seed) % 2**64)
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float().cpu() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(dim=-1) - sorted_p > self.top_p  # keep the smallest set reaching top_p
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        choice = torch.multinomial(probs, 1, generator=self.generator).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(-1, choice, 0.0)


class _PerToken:
    """A stopping criterion that never stops by itself: it calls ``callback(generated, max_new_tokens)``
    after every generated token; the callback raises to stop (an interrupt)."""

    def __init__(self, callback: Callable[[int, int], Any], prompt_length: int, max_new_tokens: int):
        self.callback = callback
        self.prompt_length = prompt_length
        self.max_new_tokens = max_new_tokens

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        self.callback(int(input_ids.shape[1] - self.prompt_length), self.max_new_tokens)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _as_transformers(base_name: str, obj):
    """``obj`` as an instance of transformers' ``LogitsProcessor`` / ``StoppingCriteria`` (named ``base_name``)."""
    import transformers

    base = getattr(transformers, base_name)
    return type(type(obj).__name__.lstrip("_"), (base,), {"__call__": lambda self, *a, **kw: obj(*a, **kw)})()


# ---------------------------------------------------------------- the rewriter


class PromptRewriter:
    """A local causal LM (transformers) and its tokenizer, used to rewrite prompts; results are cached.

    ``model``: a transformers ``*ForCausalLM``; ``tokenizer``: its tokenizer. Use ``load_prompt_rewriter``
    to build one from a folder.
    """

    def __init__(self, model, tokenizer, source: str = "", cache_size: int = 64):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source = source
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[tuple, str] = OrderedDict()

    # -- placement (the node moves it to the GPU for a run and back to the offload device afterwards)
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def to(self, device) -> "PromptRewriter":
        self.model.to(device)
        return self

    def __repr__(self) -> str:
        return f"PromptRewriter({self.source!r}, {type(self.model).__name__}, {self.dtype}, {self.device})"

    # -- the text the model sees
    def messages(self, prompt: str, language: Language = "auto") -> list[dict[str, str]]:
        """Chat messages: system = the rewriting instructions (with examples), user = the prompt."""
        lang = resolve_language(prompt, language)
        return [{"role": "system", "content": rewrite_instructions(lang)},
                {"role": "user", "content": prompt.strip()}]

    def chat_text(self, prompt: str, language: Language = "auto") -> str:
        """The full input text: the tokenizer's chat template when it has one (system merged into the user
        turn if the template refuses a system role), else a plain-text format ending in "Rewritten:"."""
        system, user = self.messages(prompt, language)
        if getattr(self.tokenizer, "chat_template", None):
            kwargs = {"tokenize": False, "add_generation_prompt": True, "enable_thinking": False}
            try:
                return self.tokenizer.apply_chat_template([system, user], **kwargs)
            except Exception:  # noqa: BLE001 - e.g. "System role not supported" (raised from the template)
                merged = {"role": "user", "content": f"{system['content']}\n\nPrompt: {user['content']}"}
                return self.tokenizer.apply_chat_template([merged], **kwargs)
        return f"{system['content']}\n\nPrompt: {user['content']}\nRewritten:"

    # -- caching
    @staticmethod
    def _key(prompt: str, seed: int, max_new_tokens: int, temperature: float, top_p: float,
             repetition_penalty: float, language: Language) -> tuple:
        sampling = temperature > 0
        return (prompt, int(seed) if sampling else None, int(max_new_tokens), float(temperature),
                float(top_p) if sampling else None, float(repetition_penalty), resolve_language(prompt, language))

    def cached(self, prompt: str, *, seed: int = 0, max_new_tokens: int = 256, temperature: float = 0.0,
               top_p: float = 0.9, repetition_penalty: float = 1.05, language: Language = "auto") -> str | None:
        """The cached rewrite for these settings, or None (greedy results ignore the seed)."""
        key = self._key(prompt, seed, max_new_tokens, temperature, top_p, repetition_penalty, language)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        return None

    def clear_cache(self) -> None:
        self._cache.clear()

    # -- generation
    def generate_text(self, text: str, *, seed: int = 0, max_new_tokens: int = 256, temperature: float = 0.0,
                      top_p: float = 0.9, repetition_penalty: float = 1.05,
                      callback: Callable[[int, int], Any] | None = None) -> str:
        """The raw answer of the model to the input ``text`` (special tokens left in)."""
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        tok = self.tokenizer
        enc = tok(text, return_tensors="pt", add_special_tokens=not getattr(tok, "chat_template", None))
        device = self.device
        ids = enc["input_ids"].to(device)
        mask = enc.get("attention_mask", torch.ones_like(enc["input_ids"])).to(device)

        base = self.model.generation_config
        eos = base.eos_token_id if base.eos_token_id is not None else tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else (eos[0] if isinstance(eos, list) else eos)
        config = GenerationConfig(max_new_tokens=int(max_new_tokens), do_sample=False, num_beams=1,
                                  repetition_penalty=float(repetition_penalty), eos_token_id=eos,
                                  pad_token_id=pad, bos_token_id=base.bos_token_id)
        processors = LogitsProcessorList()
        if temperature > 0:
            processors.append(_as_transformers("LogitsProcessor", _SeededSampler(seed, temperature, top_p)))
        criteria = StoppingCriteriaList()
        if callback is not None:
            per_token = _PerToken(callback, ids.shape[1], int(max_new_tokens))
            criteria.append(_as_transformers("StoppingCriteria", per_token))
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                      logits_processor=processors, stopping_criteria=criteria)
        # special tokens kept: the cleaner removes them after the thinking blocks (whose tags may be special)
        return tok.decode(out[0, ids.shape[1]:].cpu(), skip_special_tokens=False)

    def rewrite(self, prompt: str, *, seed: int = 0, max_new_tokens: int = 256, temperature: float = 0.0,
                top_p: float = 0.9, repetition_penalty: float = 1.05, language: Language = "auto",
                callback: Callable[[int, int], Any] | None = None) -> str:
        """``prompt`` rewritten as a Wan-style caption (style, summary, details; natural motion; same meaning).

        ``temperature`` 0 decodes greedily (deterministic, ``seed`` unused); above 0 it samples (nucleus
        ``top_p``) with a generator seeded by ``seed`` (reproducible). ``language``: ``auto`` (Chinese answer
        for a prompt with Chinese characters, else English), ``en`` or ``zh``. ``callback(n, max_new_tokens)``
        runs after each generated token and may raise to stop. Results are cached per prompt and settings.
        When the answer holds nothing usable, the original prompt is returned with a ``RewriteWarning``.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ValueError("prompt is empty: there is nothing to rewrite")
        settings: dict[str, Any] = dict(seed=seed, max_new_tokens=max_new_tokens, temperature=temperature,
                                        top_p=top_p, repetition_penalty=repetition_penalty, language=language)
        hit = self.cached(prompt, **settings)
        if hit is not None:
            return hit
        raw = self.generate_text(self.chat_text(prompt, language), seed=seed, max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, repetition_penalty=repetition_penalty,
                                 callback=callback)
        text = clean_rewritten_prompt(raw, getattr(self.tokenizer, "all_special_tokens", ()))
        if not is_usable(text):
            shown = raw.strip().replace("\n", " ")
            warnings.warn(f"prompt rewrite: the LLM ({self.source or type(self.model).__name__}) gave no usable "
                          f"text ({shown[:80]!r}); keeping the original prompt", RewriteWarning, stacklevel=2)
            return prompt
        self._cache[self._key(prompt, **settings)] = text
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return text


# ---------------------------------------------------------------- loading


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    """``auto``/None: bf16 on a CUDA GPU that supports it (else fp16), fp32 elsewhere."""
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "fp32": torch.float32, "float32": torch.float32}
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in names:
        raise ValueError(f"dtype must be auto, bf16, fp16 or fp32, got {dtype!r}")
    return names[dtype]


def _dtype_kwarg(dtype: torch.dtype) -> dict:
    import transformers

    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def load_prompt_rewriter(folder: str | Path, *, dtype: str | torch.dtype | None = "auto",
                         device: str | torch.device = "cpu", trust_remote_code: bool = False,
                         cache_size: int = 64) -> PromptRewriter:
    """A ``PromptRewriter`` from a local transformers folder (``config.json`` of a causal LM, its weights and
    tokenizer files), e.g. a Qwen2.5-Instruct download. Never downloads (``local_files_only``).

    ``dtype``: auto (bf16/fp16 on GPU, fp32 on CPU), bf16, fp16, fp32 or a ``torch.dtype``; the model is
    placed on ``device``. Raises ``FileNotFoundError`` for a missing folder and ``RewriterError`` (naming the
    folder) for a folder that is not a causal LM with a tokenizer.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = Path(folder).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"LLM folder {str(path)!r} does not exist or is not a folder; give the folder of "
                                f"a transformers instruction model (config.json, weights, tokenizer files)")
    if not (path / "config.json").is_file():
        raise RewriterError(f"LLM folder {str(path)!r} is not a transformers model folder: no config.json "
                            f"(GGUF and single-file checkpoints are not supported)")
    from wan_core.checkpoint import CheckpointError, check_folder_references

    try:  # transformers follows the file names in the folder's JSON; they must stay inside the folder
        check_folder_references(path)
    except CheckpointError as e:
        raise RewriterError(f"LLM folder {str(path)!r}: {e}") from e
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - unknown model_type, custom code, broken JSON
        raise RewriterError(f"LLM folder {str(path)!r}: transformers cannot read its config.json ({e})") from e
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not getattr(config, "auto_map", None):
        raise RewriterError(f"LLM folder {str(path)!r} holds a {model_type!r} model, which is not a causal "
                            f"language model (need e.g. qwen2, llama, mistral, gemma, phi3)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise RewriterError(f"LLM folder {str(path)!r} has no tokenizer files (looked for "
                            f"{', '.join(TOKENIZER_FILES)})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                                  trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001
        raise RewriterError(f"LLM folder {str(path)!r}: cannot load its tokenizer ({e})") from e
    target = torch.device(device)
    torch_dtype = resolve_dtype(dtype, target)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                     trust_remote_code=trust_remote_code, **_dtype_kwarg(torch_dtype))
    except (OSError, ValueError) as e:  # no weights, unsupported architecture, custom code
        raise RewriterError(f"LLM folder {str(path)!r}: cannot load the model ({e})") from e
    # transformers wraps ``to`` so that its typed signature loses ``self``; the call is nn.Module.to
    cast(torch.nn.Module, model).to(target)
    return PromptRewriter(model, tokenizer, source=str(path), cache_size=cache_size)


__all__ = ["PromptRewriter", "load_prompt_rewriter", "clean_rewritten_prompt", "rewrite_instructions",
           "resolve_language", "resolve_dtype", "is_usable", "RewriterError", "RewriteWarning", "LANGUAGES",
           "Language"]
