"""Train the bundled default model from nothing: corpus, tokenizer, a tiny Llama, a checkpoint.

    python -m local_backend.models.train_default [--out DIR] [--steps N]

The project ships a model it can rebuild offline, so the demo and the tests never download one.
Steps: (1) `corpus.build_corpus` writes the text, (2) a byte-level BPE tokenizer is trained on it
with `tokenizers`, (3) a 4-layer `LlamaForCausalLM` (GQA, tied embeddings) is trained with AdamW
and a cosine schedule on packed rows (one sample per block of the mask; no loss on the system
prompt), (4) a Hugging Face checkpoint directory is written (bf16 safetensors: the engine's CUDA
dtype, and a few MB), and (5) greedy answers to a few questions are printed for the model card.
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
from pathlib import Path

import torch
import transformers
from tokenizers import Encoding, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from local_backend.models import corpus

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

ROW_TOKENS = 512
"""Tokens per packed row: more than the longest sample (about 450 tokens with a long system prompt)."""
ROWS_PER_STEP = 4
STEPS = 600
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


def pack(encoded: list[tuple[list[int], list[int]]], rng: random.Random, pad_id: int) -> list[torch.Tensor]:
    """Shuffled samples packed into rows of `ROW_TOKENS`: (input ids, labels, position ids) each.

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
        if len(rows[-1][0]) + len(ids) > ROW_TOKENS:
            rows.append(([], [], []))
        rows[-1][0].extend(ids)
        rows[-1][1].extend(labels)
        rows[-1][2].extend(range(len(ids)))
    packed = torch.full((len(rows), 3, ROW_TOKENS), IGNORE, dtype=torch.long)
    packed[:, 0] = pad_id
    packed[:, 2] = torch.arange(ROW_TOKENS)
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


def lr_at(step: int, steps: int) -> float:
    """Linear warmup to `PEAK_LR`, then cosine down to `FINAL_LR_SHARE × PEAK_LR`."""
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return PEAK_LR * (FINAL_LR_SHARE + (1 - FINAL_LR_SHARE) * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model: torch.nn.Module, encoded: list[tuple[list[int], list[int]]], pad_id: int, steps: int) -> float:
    """AdamW over rows packed afresh each epoch; returns the mean loss of the last `LOG_EVERY` steps."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=PEAK_LR, betas=BETAS,
    )
    rng = random.Random(SEED)
    rows: list[torch.Tensor] = []
    recent: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        if len(rows) < ROWS_PER_STEP:
            rows = pack(encoded, rng, pad_id)
        batch = torch.stack([rows.pop() for _ in range(ROWS_PER_STEP)])
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps)
        loss = model(input_ids=batch[:, 0], labels=batch[:, 1], position_ids=batch[:, 2], use_cache=False).loss
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
    encoded = [(ids[:ROW_TOKENS], labels[:ROW_TOKENS]) for ids, labels in encoded]
    trained = sum(label != IGNORE for _, labels in encoded for label in labels)
    print(f"{len(samples)} samples, {sum(len(ids) for ids, _ in encoded)} tokens ({trained} trained); "
          f"vocab {tok.get_vocab_size()}", flush=True)
    end_ids = [tok.token_to_id(corpus.END), tok.token_to_id(corpus.EOS)]
    model = build_model(tok.get_vocab_size(), *end_ids, tok.token_to_id(corpus.BOS))
    print(f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
    loss = train(model, encoded, tok.token_to_id(corpus.EOS), args.steps)
    print(f"final loss {loss:.4f} after {args.steps} steps, {time.perf_counter() - started:.0f}s", flush=True)
    probe(model, tok, end_ids)
    save(model, tok, args.out)


if __name__ == "__main__":
    main()
