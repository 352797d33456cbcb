"""A tiny, randomly initialised Qwen2-style causal LM + byte-level BPE tokenizer, built fully offline.

The tokenizer is trained with Qwen2's own pre-tokenizer (split regex + byte-level, NFC normaliser): in
transformers 5.x `AutoTokenizer` maps `model_type=qwen2` to `Qwen2Tokenizer`, which rebuilds the normaliser
and pre-tokenizer from its hard-coded settings on load. Training with the same settings keeps the raw
`tokenizers` encoding and the reloaded `AutoTokenizer` encoding identical.

torch / transformers / tokenizers are imported inside the functions so importing this module stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# Copied verbatim from transformers/models/qwen2/tokenization_qwen2.py (PRETOKENIZE_REGEX); a unit test checks
# that it still matches the installed transformers.
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]

# Tool calling, hermes style (data/tool_calls.py is the Python codec of the same text; a test checks they agree):
# a call is <tool_call>{"name": ..., "arguments": {...}}</tool_call> in the assistant's content, the tools a
# conversation may call are listed in a system turn of their own rendered before every message, and a tool's result
# is a `tool` turn like any other role's. Compact on purpose: the demo vocabulary is ~512 byte-level BPE tokens.
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOLS_HEAD = 'Tools: to call one, reply <tool_call>{"name": NAME, "arguments": {...}}</tool_call>\n<tools>'
TOOLS_TAIL = "\n</tools>"


def _jinja_literal(text: str) -> str:
    """`text` as a single-quoted Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# ChatML. Assistant content *and* its <|im_end|> sit inside {% generation %} so TRL's assistant_only_loss
# trains the model to stop. Prefix-preserving: a prompt rendered with add_generation_prompt=True is a prefix
# of the prompt + completion rendering (DPO/KTO/GRPO rely on that).
# Tools: with `tools=[schema, ...]` the system turn `tools_block(tools)` comes first; an assistant message's
# `tool_calls` ({"function": {name, arguments}} or {name, arguments}; arguments a mapping or a JSON string) follow
# its content as hermes blocks, one per line, inside {% generation %} (the model writes them). Without tools and
# tool_calls the rendering is byte-for-byte the template before tools existed (tests/demo pin it).
CHAT_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' + " + _jinja_literal(TOOLS_HEAD) + " -}}"
    "{%- for tool in tools -%}"
    "{{- '\\n' + (tool | tojson) -}}"
    "{%- endfor -%}"
    "{{- " + _jinja_literal(TOOLS_TAIL) + " + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{{- message['content'] or '' -}}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- if message['content'] or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- " + _jinja_literal(TOOL_CALL_START + '{"name": ') + " + (fn['name'] | tojson) + ', \"arguments\": ' -}}"
    "{{- fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson) -}}"
    "{{- " + _jinja_literal("}" + TOOL_CALL_END) + " -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

COMMON_WORDS = (
    "the be to of and a in that have I it for not on with he as you do at this but his by from they we "
    "say her she or an will my one all would there their what so up out if about who get which go me when "
    "make can like time no just him know take people into year your good some could them see other than "
    "then now look only come its over think also back after use two how our work first well way even new "
    "want because any these give day most us is are was were has had been did does said number numbers "
    "add plus sum total answer question result equals equal minus times what's let's solve compute "
    "calculate step answer: the answer is zero one two three four five six seven eight nine ten eleven "
    "twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty "
    "hundred thousand yes no correct wrong true false hello hi please thanks thank you sure okay here "
    "there user assistant system instruction input output prompt completion chosen rejected label math "
    "problem how many much more less each every apples books Alice Bob has bought gave left remaining "
    "together altogether what is the"
)

SENTENCES = (
    "You are a helpful assistant.",
    "Add the two numbers.",
    "What is the sum of the two numbers?",
    "The quick brown fox jumps over the lazy dog.",
    "Let's think step by step.",
    "The answer is",
    "Hello! How can I help you today?",
    "Alice has 3 apples and Bob gives her 5 more. How many apples does she have?",
    "#### 8",
)


def render_chatml(messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = False) -> str:
    """Python rendering of CHAT_TEMPLATE (used for the tokenizer corpus; a test checks they agree)."""
    out = [f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages]
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n")
    return "".join(out)


def _base_corpus(max_operand: int = 20) -> Iterator[str]:
    from training_platform.demo.arithmetic import ALPACA_INSTRUCTION, arithmetic_conversations

    for conv in arithmetic_conversations(max_operand):
        yield render_chatml(conv)
        yield render_chatml(conv[:1], add_generation_prompt=True)
        a_b = conv[0]["content"].rstrip("=")
        ans = conv[1]["content"]
        yield f"What is {a_b}?\n{a_b}={ans}\n#### {ans}"
        yield render_chatml([{"role": "user", "content": f"{ALPACA_INSTRUCTION}\n\n{a_b}"}, conv[1]])
    yield " ".join(str(i) for i in range(1000))
    yield "0123456789"
    yield COMMON_WORDS
    yield " ".join(w.capitalize() for w in COMMON_WORDS.split())
    yield from SENTENCES


def build_tokenizer(extra_corpus: Iterable[str] = (), *, vocab_size_target: int = 512) -> Tokenizer:
    """Train the byte-level BPE tokenizer (deterministic for a given corpus)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers as bpe_trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = bpe_trainers.BpeTrainer(
        vocab_size=vocab_size_target,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*_base_corpus(), *extra_corpus]
    # Special tokens are never split by the BPE model, so keep them out of the merge statistics.
    for special in SPECIAL_TOKENS:
        corpus = [t.replace(special, "\n") for t in corpus]
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    return tok


def _save_tokenizer(tok: Tokenizer, out_dir: Path, model_max_length: int) -> None:
    from transformers import PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        additional_special_tokens=[IM_START],
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out_dir)
    # Name the class AutoTokenizer resolves to anyway (model_type=qwen2), so the choice is explicit.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def create_tiny_model(
    out_dir: str | Path,
    *,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 512,
    vocab_size_target: int = 512,
    seed: int = 0,
    extra_corpus: Iterable[str] = (),
) -> Path:
    """Build tokenizer + randomly initialised Qwen2ForCausalLM into `out_dir`; returns `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(extra_corpus, vocab_size_target=vocab_size_target)
    _save_tokenizer(tok, out, max_position_embeddings)
    pad_id = tok.token_to_id(PAD_TOKEN)
    eos_id = tok.token_to_id(IM_END)

    config = Qwen2Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # transformers' PreTrainedModel.to is a functools.wraps object, which mypy calls without binding self
        model = Qwen2ForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(out, safe_serialization=True)
    return out


def create_tiny_reward_model(base_dir: str | Path, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Tiny model with a fresh 1-label sequence-classification head (PPO reward / value model in demos)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    base, out = Path(base_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(base)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "score.weight newly initialized" is expected here
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_pretrained(
                base, num_labels=1, pad_token_id=tokenizer.pad_token_id
            )
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def count_parameters(model: Any) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
