"""Train the bundled default model from nothing: corpus, tokenizer, a tiny Llama, a checkpoint.

    python -m training.train_default [--out DIR] [--steps N] [--tool-steps N] [--base DIR]

The project ships a model it can rebuild offline, so the demo and the tests never download one.
Steps: (1) `corpus.build_corpus` writes the text, (2) a byte-level BPE tokenizer is trained on it
with `tokenizers`, (3) the base stage trains a 4-layer `LlamaForCausalLM` (GQA, tied embeddings)
from nothing with AdamW and a cosine schedule on packed rows (one sample per block of the mask; no
loss on the system prompt), (4) the tool stage goes on from those weights on tool dialogues and
the base corpus again (`--base DIR` starts it from a base-stage checkpoint instead), (5) a Hugging
Face checkpoint directory is written (bf16 safetensors: the engine's CUDA dtype, and a few MB), and
(6) greedy answers to a few questions, and tool loops, are printed for the model card. Two stages,
because tool dialogues mixed into the base corpus from the start (700 steps) taught the format but
not the copying of values, and cost the everyday answers.
Corpus, tokenizer, initialisation and data order are seeded (the corpus and tokenizer rebuild
byte for byte); float sums on another CPU or thread count may move the weights slightly. Needs
`transformers` (training only; the engine never imports it).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Encoding, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from local_backend.model.tool_prompt import TOOL_CALL_END, TOOL_CALL_START, fold
from training import corpus, tool_corpus

SEED = 0
VOCAB_SIZE = 3072
"""An upper bound: the narrow corpus runs out of merges at about 1.9k tokens."""
HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 704
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 2
MAX_POSITIONS = 2048
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-5


@dataclass(frozen=True, slots=True)
class Stage:
    """One training stage: its optimizer steps, learning-rate schedule and packed rows."""

    steps: int
    peak_lr: float
    warmup_steps: int
    row_tokens: int
    """Tokens per packed row: more than the stage's longest sample."""
    rows_per_step: int


BASE_STAGE = Stage(steps=600, peak_lr=3e-3, warmup_steps=20, row_tokens=512, rows_per_step=4)
"""From nothing, on `corpus.build_corpus` (samples up to about 450 tokens with a long system prompt)."""
TOOL_STAGE = Stage(steps=800, peak_lr=2e-3, warmup_steps=10, row_tokens=1024, rows_per_step=2)
"""From the base stage's weights, on `corpus.build_tool_corpus` and the base corpus again (so its
answers are not forgotten). The tool listing, which the tokenizer (trained on the base corpus)
cuts into small pieces, makes these samples long: rows twice as long, at the same tokens per step."""
FINAL_LR_SHARE = 0.05
WEIGHT_DECAY = 0.05
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
LOG_EVERY = 10
THREADS = 2
"""CPU threads: the project's machines are shared 2-core boxes."""

IGNORE = -100
"""Label of a token the loss skips (transformers' convention)."""

OUT_DIR = Path(__file__).parents[1] / "local_backend" / "models" / "default"
PROBES = (
    "What is prefill?",
    "What is decode?",
    "What is the KV cache?",
    "How big is the KV cache?",
    "Why does a request ID at the start of the system prompt raise the bill?",
    "Hello!",
    "What colour is the sky?",
    "What is one plus one?",
    "What is the weather like today?",
    "Say it again and again.",
)
"""Questions answered greedily after training, for the model card and a quick look."""

TOOL_PROBES = (
    "What is the weather in Paris?",
    "How is the weather in Tokyo today?",
    "Weather in Lima?",
    "What is prefill?",
    "Hello!",
)
"""Questions asked with the weather tool offered: a call, then the answer once `PROBE_RESULT` comes back."""
PROBE_RESULT = '{"conditions": "rainy"}'
PROBE_TOKENS = 64


def train_tokenizer(samples: list[corpus.Sample]) -> Tokenizer:
    """Byte-level BPE over the corpus text; the special tokens get ids 0..5 and are never split."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(corpus.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(("".join(text for text, _ in sample) for sample in samples), trainer)
    bos_id = tok.token_to_id(corpus.BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{corpus.BOS} $A", special_tokens=[(corpus.BOS, bos_id)])
    return tok


def token_id(tok: Tokenizer, token: str) -> int:
    """The id of one of the corpus's special tokens, which the trained tokenizer always has."""
    found = tok.token_to_id(token)
    if found is None:
        raise ValueError(f"the tokenizer has no {token!r}")
    return found


def encode_sample(tok: Tokenizer, sample: corpus.Sample) -> tuple[list[int], list[int]]:
    """Token ids of the whole text (as the engine will tokenize it) and labels for trained pieces.

    The text is encoded in one go, not piece by piece, so the boundaries match inference; a token
    is trained when it starts inside a trained piece. The leading `<|bos|>` is never a target: a
    runaway answer must never be taught to end by starting a new conversation.
    """
    text, spans, at = "", [], 0
    for piece, trained in sample:
        if trained:
            spans.append((at, at + len(piece)))
        text += piece
        at += len(piece)
    enc: Encoding = tok.encode(text, add_special_tokens=False)
    labels = [
        token if any(lo <= start < hi for lo, hi in spans) else IGNORE
        for token, (start, _) in zip(enc.ids, enc.offsets, strict=True)
    ]
    return enc.ids, labels


def pack(
    encoded: list[tuple[list[int], list[int]]], rng: random.Random, pad_id: int, row_tokens: int
) -> list[torch.Tensor]:
    """Shuffled samples packed into rows of `row_tokens`: (input ids, labels, position ids) each.

    Position ids restart at 0 for every sample, and transformers turns those restarts into a
    block-diagonal causal mask, so each sample sees only itself from position 0, exactly as at
    inference, while a row still mixes topics at random. (Packing without restarts put short chats
    late in long rows, and the model answered badly at the start of a fresh context; length-bucketed
    batches grouped one topic per step, and the last steps decided the answers.) Padding at a row's
    end is never a target.
    """
    order = list(range(len(encoded)))
    rng.shuffle(order)
    rows: list[tuple[list[int], list[int], list[int]]] = [([], [], [])]
    for index in order:
        ids, labels = encoded[index]
        if len(rows[-1][0]) + len(ids) > row_tokens:
            rows.append(([], [], []))
        rows[-1][0].extend(ids)
        rows[-1][1].extend(labels)
        rows[-1][2].extend(range(len(ids)))
    packed = torch.full((len(rows), 3, row_tokens), IGNORE, dtype=torch.long)
    packed[:, 0] = pad_id
    packed[:, 2] = torch.arange(row_tokens)
    for i, (ids, labels, positions) in enumerate(rows):
        packed[i, 0, : len(ids)] = torch.tensor(ids)
        packed[i, 1, : len(ids)] = torch.tensor(labels)
        packed[i, 2, : len(ids)] = torch.tensor(positions)
    return list(packed)


def build_model(vocab_size: int, end_id: int, eos_id: int, bos_id: int) -> transformers.LlamaForCausalLM:
    """A freshly initialised `LlamaForCausalLM` of the bundled size."""
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        rms_norm_eps=RMS_NORM_EPS,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=[end_id, eos_id],
    )
    return transformers.LlamaForCausalLM(config)


def lr_at(step: int, stage: Stage) -> float:
    """Linear warmup to the stage's peak, then cosine down to `FINAL_LR_SHARE` of it."""
    if step < stage.warmup_steps:
        return stage.peak_lr * (step + 1) / stage.warmup_steps
    progress = (step - stage.warmup_steps) / max(1, stage.steps - stage.warmup_steps)
    return stage.peak_lr * (FINAL_LR_SHARE + (1 - FINAL_LR_SHARE) * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model: torch.nn.Module, encoded: list[tuple[list[int], list[int]]], pad_id: int, stage: Stage) -> float:
    """AdamW over rows packed afresh each epoch; returns the mean loss of the last `LOG_EVERY` steps."""
    encoded = [(ids[: stage.row_tokens], labels[: stage.row_tokens]) for ids, labels in encoded]
    trained = sum(label != IGNORE for _, labels in encoded for label in labels)
    print(f"{len(encoded)} samples, {sum(len(ids) for ids, _ in encoded)} tokens ({trained} trained)", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=stage.peak_lr,
        betas=BETAS,
    )
    rng = random.Random(SEED)
    rows: list[torch.Tensor] = []
    recent: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(stage.steps):
        if len(rows) < stage.rows_per_step:
            rows = pack(encoded, rng, pad_id, stage.row_tokens)
        batch = torch.stack([rows.pop() for _ in range(stage.rows_per_step)])
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, stage)
        loss = model(input_ids=batch[:, 0], labels=batch[:, 1], position_ids=batch[:, 2], use_cache=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        recent = (recent + [loss.item()])[-LOG_EVERY:]
        if (step + 1) % LOG_EVERY == 0 or step + 1 == stage.steps:
            print(
                f"step {step + 1}/{stage.steps} loss {sum(recent) / len(recent):.4f} "
                f"lr {lr_at(step, stage):.2e} {time.perf_counter() - started:.0f}s",
                flush=True,
            )
    return sum(recent) / len(recent)


def save(model: transformers.LlamaForCausalLM, tok: Tokenizer, out: Path) -> None:
    """Write config, bf16 safetensors, tokenizer files and the generation config."""
    out.mkdir(parents=True, exist_ok=True)
    model.bfloat16().save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": corpus.BOS,
        "eos_token": corpus.END,
        "pad_token": corpus.EOS,
        "add_bos_token": False,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": corpus.CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False) + "\n")


def probe(model: transformers.LlamaForCausalLM, tok: Tokenizer, end_ids: list[int]) -> None:
    """Print greedy chat answers (`PROBE_TOKENS` at most) to `PROBES`, then the tool loops of `TOOL_PROBES`."""
    model.eval()

    def answer(turns: list[dict[str, str]]) -> str:
        ids = torch.tensor([tok.encode(corpus.chat_text(turns), add_special_tokens=False).ids])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=PROBE_TOKENS, do_sample=False, eos_token_id=end_ids, pad_token_id=end_ids[0]
            )
        return tok.decode(out[0, ids.shape[1] :].tolist())

    for question in PROBES:
        print(f"Q: {question}\nA: {answer([{'role': 'user', 'content': question}])!r}", flush=True)
    for question in TOOL_PROBES:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        text = answer(fold(messages, [tool_corpus.WEATHER_TOOL]))
        print(f"Q (weather tool offered): {question}\nA: {text!r}", flush=True)
        if not text.startswith(TOOL_CALL_START):
            continue
        try:
            call = json.loads(text.removeprefix(TOOL_CALL_START).split(TOOL_CALL_END)[0])
            messages += [
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": call["name"], "arguments": call["arguments"]}}],
                },
                {"role": "tool", "content": PROBE_RESULT},
            ]
        except (ValueError, KeyError, TypeError):
            continue
        print(f"  result {PROBE_RESULT}\nA: {answer(fold(messages, [tool_corpus.WEATHER_TOOL]))!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="checkpoint directory to write")
    parser.add_argument("--steps", type=int, default=BASE_STAGE.steps, help="optimizer steps of the base stage")
    parser.add_argument("--tool-steps", type=int, default=TOOL_STAGE.steps, help="optimizer steps of the tool stage")
    parser.add_argument("--base", type=Path, help="a base-stage checkpoint to start the tool stage from")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    random.seed(SEED)
    torch.manual_seed(SEED)
    started = time.perf_counter()
    samples = corpus.build_corpus(SEED)
    tok = train_tokenizer(samples)
    end_id, eos_id = token_id(tok, corpus.END), token_id(tok, corpus.EOS)
    end_ids, pad_id = [end_id, eos_id], eos_id
    base = [encode_sample(tok, sample) for sample in samples]
    print(f"vocab {tok.get_vocab_size()}", flush=True)
    if args.base is None:
        model = build_model(tok.get_vocab_size(), end_id, eos_id, token_id(tok, corpus.BOS))
        print(f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
        loss = train(model, base, pad_id, replace(BASE_STAGE, steps=args.steps))
        print(f"base stage: loss {loss:.4f}, {time.perf_counter() - started:.0f}s", flush=True)
    else:
        if Tokenizer.from_file(str(args.base / "tokenizer.json")).to_str() != tok.to_str():
            raise SystemExit(f"{args.base} was not trained on this corpus's tokenizer")
        model = transformers.LlamaForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    tools = [encode_sample(tok, sample) for sample in corpus.build_tool_corpus(SEED)]
    loss = train(model, tools + base, pad_id, replace(TOOL_STAGE, steps=args.tool_steps))
    print(f"tool stage: loss {loss:.4f}, {time.perf_counter() - started:.0f}s", flush=True)
    probe(model, tok, end_ids)
    save(model, tok, args.out)


if __name__ == "__main__":
    main()
