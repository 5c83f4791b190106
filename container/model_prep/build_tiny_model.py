"""Build the tiny model the tests, `make serve-local`, `make bench` and `make demo` serve.

A random Llama (hidden 128, 2 layers) with a byte-level BPE tokenizer trained on a small
manga-shop corpus, a chat template, and LoRA adapters made with peft. The adapters use
``init_lora_weights=False`` so they really change the output (peft's default init makes B zero,
which would make every adapter answer like the base). Deterministic: fixed seeds.

    python -m container.model_prep.build_tiny_model --out build/tiny-src

writes ``OUT/base`` and ``OUT/adapters/<name>`` for ``manga_domain``, ``general_support`` and
``jp_style`` (rank 16) and, with ``--bad-rank-adapter``, ``OUT/bad_adapters/too_wide`` (rank 32,
above the default max_lora_rank 16) for the validation test. Also writes ``OUT/calibration.jsonl``
(the domain calibration set for AWQ) and ``OUT/heldout.jsonl`` (the quality gate's prompts).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# Tool schemas are rendered the way real chat templates (Llama 3, Qwen) do: as JSON text in the
# prompt, so they cost context tokens (the context budget counts them).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|system|>\nTools: {{ tools | tojson }}{{ eos_token }}\n"
    "{% endif %}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
ADAPTERS = ("manga_domain", "general_support", "jp_style")

_SERIES = ["One Piece", "Chainsaw Man", "Spy x Family", "Frieren", "Blue Lock", "Naruto", "Berserk"]
_TOPICS = [
    "Recommend {s} for a new reader.",
    "Is volume {n} of {s} in stock?",
    "What is the return policy for a damaged copy of {s}?",
    "When does {s} volume {n} ship to Tokyo?",
    "Show me box sets similar to {s} with a darker tone.",
    "Kono manga {s} no dai {n} kan wa arimasu ka?",
    "Tracking number for my order of {s} please.",
    "Compare the art style of {s} and {t}.",
]


def corpus(count: int, seed: int) -> list[str]:
    """Synthetic manga-shop sentences: the tokenizer's training text and the AWQ calibration set."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        s, t = rng.sample(_SERIES, 2)
        out.append(rng.choice(_TOPICS).format(s=s, t=t, n=rng.randint(1, 30)))
    return out


def build_tokenizer(out: Path, vocab_size: int = 400) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(2000, seed=1), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_base(out: Path, vocab_size: int, special_ids: list[int]) -> None:
    """The random base model. The rows of ``lm_head`` for the special tokens are zero, so their
    logits are 0 for any input and every greedy step picks a text token: a random model otherwise
    ends some answers before they begin. With the seeds here the general_support adapter's first
    greedy token after the demo's conversation was ``</s>`` (an empty answer, which the smoke
    gate counts as a failure), and ``<|user|>`` and the rest are dropped from the decoded text
    (skip_special_tokens). The adapters (q/k/v/o only) cannot move those logits. A text token
    wins unless every other (random) logit is at or below 0 at once. Answers then run to
    ``max_tokens`` (finish_reason "length"), and nothing in the tests waits on an end of
    sequence."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Larger weights than the default init so greedy outputs differ clearly by adapter.
        model.lm_head.weight.mul_(8.0)
        model.lm_head.weight[list(special_ids)] = 0.0
    model.save_pretrained(out, safe_serialization=True)


def build_adapter(base: Path, out: Path, rank: int, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    cfg = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, cfg)
    peft_model.save_pretrained(out, safe_serialization=True)
    # peft records the absolute base path; record the portable name model_prep checks against.
    config_path = out / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base.name
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def build(out: Path, bad_rank_adapter: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    base = out / "base"
    build_tokenizer(base)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    build_base(base, len(tokenizer), tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    for i, name in enumerate(ADAPTERS):
        build_adapter(base, out / "adapters" / name, rank=16, seed=100 + i)
    if bad_rank_adapter:
        build_adapter(base, out / "bad_adapters" / "too_wide", rank=32, seed=200)
    with (out / "calibration.jsonl").open("w") as f:
        for text in corpus(64, seed=2):
            f.write(json.dumps({"text": text}) + "\n")
    with (out / "heldout.jsonl").open("w") as f:
        for text in corpus(16, seed=3):
            f.write(json.dumps({"text": text}) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bad-rank-adapter", action="store_true")
    args = parser.parse_args(argv)
    build(args.out, bad_rank_adapter=args.bad_rank_adapter)
    print(f"tiny model written to {args.out}")


if __name__ == "__main__":
    main()
