"""Train the bundled default model from nothing: corpus, tokenizer, a tiny Llama, a checkpoint.

    python -m local_backend.models.train_default [--out DIR] [--steps N]

The project ships a model it can rebuild offline, so the demo and the tests never download one.
Steps: (1) `corpus.build_corpus` writes the text, (2) a byte-level BPE tokenizer is trained on it
with `tokenizers`, (3) a 4-layer `LlamaForCausalLM` (GQA, tied embeddings) is trained with AdamW
and a cosine schedule on length-bucketed batches (no loss on the system prompt), (4) a Hugging Face checkpoint
directory is written (bf16 safetensors: the engine's CUDA dtype, and a few MB), and (5) greedy
answers to a few questions are printed for the model card. Seeded throughout: two runs on the same
torch build give the same files. Needs `transformers` (training only; the engine never imports it).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import transformers
from tokenizers import Encoding, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from local_backend.models import corpus

SEED = 0
VOCAB_SIZE = 3072
"""An upper bound: the narrow corpus runs out of merges at about 2.1k tokens."""
HIDDEN_SIZE = 256
INTERMEDIATE_SIZE = 704
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 2
MAX_POSITIONS = 2048
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-5

BATCH_TOKENS = 2048
"""Rows × padded length per step: ~60 short chats, or two with long system prompts."""
MAX_SAMPLE_TOKENS = 1024
STEPS = 500
PEAK_LR = 3e-3
FINAL_LR_SHARE = 0.05
WARMUP_STEPS = 20
WEIGHT_DECAY = 0.05
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
LOG_EVERY = 10
THREADS = 2
"""CPU threads: the project's machines are shared 2-core boxes."""

IGNORE = -100
"""Label of a token the loss skips (transformers' convention)."""

OUT_DIR = Path(__file__).parent / "default"
PROBES = ("What is prefill?", "What is decode?", "What is the KV cache?", "Why does a request ID at the "
          "start of the system prompt raise the bill?", "Hello!", "What is two plus three?",
          "Say it again and again.")
"""Questions answered greedily after training, for the model card and a quick look."""


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


def make_batches(encoded: list[tuple[list[int], list[int]]], pad_id: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Group length-sorted samples into padded batches of at most `BATCH_TOKENS` (rows × longest).

    Each sample starts at position 0 behind its own `<|bos|>`, exactly as at inference: packing
    several into one row put short chats late in long rows, and the model then answered them badly
    at the start of a fresh context. Padding sits at a row's end, is never a target, and causal
    attention keeps it out of the real tokens.
    """
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    group: list[tuple[list[int], list[int]]] = []
    for ids, labels in sorted(encoded, key=lambda pair: len(pair[0])):
        if group and (len(group) + 1) * len(ids) > BATCH_TOKENS:
            batches.append(_pad(group, pad_id))
            group = []
        group.append((ids[:MAX_SAMPLE_TOKENS], labels[:MAX_SAMPLE_TOKENS]))
    batches.append(_pad(group, pad_id))
    return batches


def _pad(group: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in group)
    inputs = torch.full((len(group), width), pad_id, dtype=torch.long)
    targets = torch.full((len(group), width), IGNORE, dtype=torch.long)
    for i, (ids, labels) in enumerate(group):
        inputs[i, : len(ids)] = torch.tensor(ids)
        targets[i, : len(labels)] = torch.tensor(labels)
    return inputs, targets


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


def lr_at(step: int, steps: int) -> float:
    """Linear warmup to `PEAK_LR`, then cosine down to `FINAL_LR_SHARE × PEAK_LR`."""
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return PEAK_LR * (FINAL_LR_SHARE + (1 - FINAL_LR_SHARE) * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> float:
    """AdamW over the batches, reshuffled each epoch; returns the mean loss of the last `LOG_EVERY` steps."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=PEAK_LR, betas=BETAS,
    )
    generator = torch.Generator().manual_seed(SEED)
    order: list[int] = []
    recent: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        if not order:
            order = torch.randperm(len(batches), generator=generator).tolist()
        inputs, targets = batches[order.pop()]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps)
        loss = model(input_ids=inputs, labels=targets).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        recent = (recent + [loss.item()])[-LOG_EVERY:]
        if (step + 1) % LOG_EVERY == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps} loss {sum(recent) / len(recent):.4f} "
                  f"lr {lr_at(step, steps):.2e} {time.perf_counter() - started:.0f}s", flush=True)
    return sum(recent) / len(recent)


def save(model: torch.nn.Module, tok: Tokenizer, out: Path) -> None:
    """Write config, bf16 safetensors, tokenizer files and the generation config."""
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
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


def probe(model: torch.nn.Module, tok: Tokenizer, end_ids: list[int]) -> None:
    """Print greedy chat answers (64 tokens at most) to `PROBES`."""
    model.eval()
    for question in PROBES:
        prompt = f"{corpus.BOS}<|user|>\n{question}{corpus.END}\n<|assistant|>\n"
        ids = torch.tensor([tok.encode(prompt, add_special_tokens=False).ids])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=64, do_sample=False, eos_token_id=end_ids, pad_token_id=end_ids[0])
        print(f"Q: {question}\nA: {tok.decode(out[0, ids.shape[1]:].tolist())!r}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="checkpoint directory to write")
    parser.add_argument("--steps", type=int, default=STEPS, help="optimizer steps")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    random.seed(SEED)
    torch.manual_seed(SEED)
    started = time.perf_counter()
    samples = corpus.build_corpus(SEED)
    tok = train_tokenizer(samples)
    encoded = [encode_sample(tok, sample) for sample in samples]
    batches = make_batches(encoded, tok.token_to_id(corpus.EOS))
    trained = sum(int((targets != IGNORE).sum()) for _, targets in batches)
    print(f"{len(samples)} samples, {sum(len(ids) for ids, _ in encoded)} tokens ({trained} trained) "
          f"in {len(batches)} batches; vocab {tok.get_vocab_size()}", flush=True)
    end_ids = [tok.token_to_id(corpus.END), tok.token_to_id(corpus.EOS)]
    model = build_model(tok.get_vocab_size(), *end_ids, tok.token_to_id(corpus.BOS))
    print(f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
    loss = train(model, batches, args.steps)
    print(f"final loss {loss:.4f} after {args.steps} steps, {time.perf_counter() - started:.0f}s", flush=True)
    probe(model, tok, end_ids)
    save(model, tok, args.out)


if __name__ == "__main__":
    main()
